package statement

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

func TestSum(t *testing.T) {
	line := func(pt cellpayv1.PaymentType, st cellpayv1.TransactionStatus, cur string, n, amount int64) *cellpayv1.StatementLine {
		return &cellpayv1.StatementLine{PaymentType: pt, Status: st, Currency: cur, Count: n, AmountMinorUnits: amount}
	}
	approved, declined := cellpayv1.TransactionStatus_APPROVED, cellpayv1.TransactionStatus_DECLINED
	auth, capture := cellpayv1.PaymentType_CARD_AUTHORIZATION, cellpayv1.PaymentType_CAPTURE
	in := []*cellpayv1.StatementLine{
		line(capture, approved, "GBP", 1, 300), line(auth, declined, "GBP", 2, 50), line(auth, approved, "GBP", 1, 1000),
		line(auth, approved, "EUR", 1, 7), line(auth, approved, "GBP", 3, 2000), line(capture, approved, "GBP", 2, 200),
	}
	want := []*cellpayv1.StatementLine{
		line(auth, approved, "EUR", 1, 7), line(auth, approved, "GBP", 4, 3000), line(auth, declined, "GBP", 2, 50),
		line(capture, approved, "GBP", 3, 500),
	}
	got := Sum(in)
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("line %d: %v, want %v", i, got[i], want[i])
		}
	}
	if in[2].GetCount() != 1 {
		t.Error("Sum changed its input")
	}
	if _, _, err := Day("2026-02-30"); err == nil {
		t.Error("2026-02-30 is a day")
	}
	if s, e, err := Day("2026-12-07"); err != nil || e.Sub(s).Hours() != 24 || s.Location().String() != "UTC" {
		t.Errorf("Day: %v %v %v", s, e, err)
	}
}
