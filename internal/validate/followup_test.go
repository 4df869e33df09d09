package validate

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
)

func validFollowUp() *cellproto.FollowUpRequest {
	return &cellproto.FollowUpRequest{
		Kind: cellpayv1.PaymentType_CAPTURE, PartnerId: "p-001", TransactionId: "cap-1",
		OriginalTransactionId: "auth-1", Market: "GB", Amount: &cellpayv1.Money{MinorUnits: 500, Currency: "GBP"},
	}
}

func TestFollowUp(t *testing.T) {
	if err := FollowUp(validFollowUp()); err != nil {
		t.Fatalf("valid capture refused: %v", err)
	}
	void := validFollowUp()
	void.Kind, void.Amount = cellpayv1.PaymentType_VOID, nil
	if err := FollowUp(void); err != nil {
		t.Fatalf("valid void refused: %v", err)
	}
	for _, c := range []struct {
		field string
		edit  func(r *cellproto.FollowUpRequest)
	}{
		{"transaction_id", func(r *cellproto.FollowUpRequest) { r.TransactionId = "" }},
		{"transaction_id", func(r *cellproto.FollowUpRequest) { r.TransactionId = r.OriginalTransactionId }},
		{"partner_id", func(r *cellproto.FollowUpRequest) { r.PartnerId = "a b" }},
		{"original_transaction_id", func(r *cellproto.FollowUpRequest) { r.OriginalTransactionId = "" }},
		{"market", func(r *cellproto.FollowUpRequest) { r.Market = "XX" }},
		{"amount", func(r *cellproto.FollowUpRequest) { r.Amount = nil }},
		{"amount.minor_units", func(r *cellproto.FollowUpRequest) { r.Amount.MinorUnits = 0 }},
		{"amount.currency", func(r *cellproto.FollowUpRequest) { r.Amount.Currency = "gbp" }},
		{"amount", func(r *cellproto.FollowUpRequest) { r.Kind = cellpayv1.PaymentType_VOID }},
		{"kind", func(r *cellproto.FollowUpRequest) { r.Kind = cellpayv1.PaymentType_CARD_AUTHORIZATION }},
	} {
		r := validFollowUp()
		c.edit(r)
		var fe *FieldError
		if err := FollowUp(r); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: got %v, want an error naming %s", c.field, err, c.field)
		}
	}
	if FollowUp(nil) == nil {
		t.Error("nil follow-up accepted")
	}
}

// FuzzFollowUp: validation never panics, never changes its input, and
// names a field whenever it refuses.
func FuzzFollowUp(f *testing.F) {
	f.Add(int32(4), "p-001", "cap-1", "auth-1", "GB", int64(500), "GBP", true)
	f.Add(int32(5), "p", "v", "a", "DE", int64(0), "", false)
	f.Add(int32(0), "", "", "", "", int64(-1), "x", true)
	f.Fuzz(func(t *testing.T, kind int32, partner, id, orig, market string, minor int64, cur string, hasAmount bool) {
		r := &cellproto.FollowUpRequest{Kind: cellpayv1.PaymentType(kind), PartnerId: partner, TransactionId: id,
			OriginalTransactionId: orig, Market: market}
		if hasAmount {
			r.Amount = &cellpayv1.Money{MinorUnits: minor, Currency: cur}
		}
		before := proto.Clone(r)
		err := FollowUp(r)
		if !proto.Equal(before, r) {
			t.Fatal("FollowUp modified its input")
		}
		var fe *FieldError
		if err != nil && (!errors.As(err, &fe) || fe.Field == "") {
			t.Fatalf("error without a field: %v", err)
		}
	})
}
