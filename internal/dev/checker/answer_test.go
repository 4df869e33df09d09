package checker

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

func TestAnswersRoundTrip(t *testing.T) {
	in := []Answer{
		{PartnerID: "p-1", ID: "a", Status: cellpayv1.TransactionStatus_APPROVED, AuthCode: "ABC123", CellID: "cell-a"},
		{PartnerID: "p-2", ID: "a", Status: cellpayv1.TransactionStatus_APPROVED, AuthCode: "XYZ789", CellID: "cell-b"},
		{PartnerID: "p-1", ID: "b", Status: cellpayv1.TransactionStatus_DECLINED, DeclineReason: "do_not_honor", CellID: "cell-b"},
		{PartnerID: "p-1", ID: "c", Status: cellpayv1.TransactionStatus_PENDING, CellID: "cell-c"},
		{PartnerID: "p-1", ID: "d", Code: codes.Unavailable},
		{PartnerID: "p-1", ID: "e", Code: codes.Code(42)},
		{PartnerID: "p-1", ID: "f", Status: cellpayv1.TransactionStatus_APPROVED, CellID: "cell-a",
			Amounts: true, Amount: 1000, Currency: "EUR", Captured: 600, Refunded: 100},
		{PartnerID: "p-1", ID: "g", Status: cellpayv1.TransactionStatus_APPROVED, CellID: "cell-a", Amounts: true, Currency: "EUR", Voided: true},
	}
	var buf bytes.Buffer
	for _, a := range in {
		if err := WriteAnswer(&buf, a); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Count(buf.String(), "\n"); got != len(in) {
		t.Fatalf("%d lines, want %d", got, len(in))
	}
	for _, want := range []string{`"status":"APPROVED"`, `"code":"UNAVAILABLE"`, `"code":"OK"`, `"partner_id":"p-2","id":"a"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("file lacks %s:\n%s", want, buf.String())
		}
	}
	out, err := ReadAnswers(strings.NewReader(buf.String() + "\n  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("read %d answers, want %d", len(out), len(in))
	}
	for i := range in {
		if out[i] != in[i] {
			t.Errorf("answer %d: got %+v, want %+v", i, out[i], in[i])
		}
	}
}

func TestReadAnswersErrors(t *testing.T) {
	tests := []struct {
		name, file, want string
	}{
		{"not JSON", "{\"partner_id\":\"p-1\",\"id\":\"a\",\"status\":\"APPROVED\"}\nnope\n", "line 2"},
		{"no id", `{"partner_id":"p-1","status":"APPROVED"}`, "without an id"},
		{"no partner", `{"id":"a","status":"APPROVED"}`, "without a partner_id"},
		{"unknown status", `{"partner_id":"p-1","id":"a","status":"MAYBE"}`, "unknown status"},
		{"unknown code", `{"partner_id":"p-1","id":"a","code":"OOPS"}`, "unknown gRPC code"},
		{"OK without status", `{"partner_id":"p-1","id":"a","code":"OK"}`, "needs a status"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadAnswers(strings.NewReader(tt.file))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error with %q", err, tt.want)
			}
		})
	}
}

func TestAnswerOf(t *testing.T) {
	txn := &cellpayv1.Transaction{TransactionId: "a", Status: cellpayv1.TransactionStatus_DECLINED, DeclineReason: "stolen_card", CellId: "cell-a"}
	if got, want := AnswerOf("p-1", "a", txn, nil), (Answer{PartnerID: "p-1", ID: "a", Status: cellpayv1.TransactionStatus_DECLINED, DeclineReason: "stolen_card", CellID: "cell-a"}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	auth := &cellpayv1.Transaction{TransactionId: "f", Status: cellpayv1.TransactionStatus_APPROVED, CellId: "cell-a",
		Amount:         &cellpayv1.Money{MinorUnits: 1000, Currency: "EUR"},
		CapturedAmount: &cellpayv1.Money{MinorUnits: 600, Currency: "EUR"}, RefundedAmount: &cellpayv1.Money{MinorUnits: 100, Currency: "EUR"}}
	if got, want := AnswerOf("p-1", "f", auth, nil), (Answer{PartnerID: "p-1", ID: "f", Status: cellpayv1.TransactionStatus_APPROVED, CellID: "cell-a",
		Amounts: true, Amount: 1000, Currency: "EUR", Captured: 600, Refunded: 100}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got := AnswerOf("p-1", "b", nil, status.Error(codes.AlreadyExists, "x")); got != (Answer{PartnerID: "p-1", ID: "b", Code: codes.AlreadyExists, Message: "x"}) || !got.Err() {
		t.Errorf("got %+v", got)
	}
	if got := AnswerOf("p-1", "c", nil, errors.New("plain")); got.Code != codes.Unknown {
		t.Errorf("plain error: got %+v", got)
	}
}
