package validate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// Valid returns a request that passes validation.
func valid() *cellpayv1.SubmitTransactionRequest {
	return &cellpayv1.SubmitTransactionRequest{
		TransactionId: "t-1",
		PaymentType:   cellpayv1.PaymentType_CARD_AUTHORIZATION,
		PartnerId:     "p-001",
		Market:        "GB",
		Amount:        &cellpayv1.Money{MinorUnits: 1250, Currency: "GBP"},
		Merchant:      &cellpayv1.Merchant{Id: "m-1", Mcc: "5411", Country: "GB"},
		Card:          &cellpayv1.Card{Pan: "4242424242424242", ExpiryMonth: 12, ExpiryYear: 2030},
	}
}

func TestRequest(t *testing.T) {
	type mut = func(r *cellpayv1.SubmitTransactionRequest)
	cases := []struct {
		name  string
		mut   mut
		field string // "" means valid
	}{
		{"valid", func(*cellpayv1.SubmitTransactionRequest) {}, ""},
		{"bank transfer without card", func(r *cellpayv1.SubmitTransactionRequest) {
			r.PaymentType, r.Card = cellpayv1.PaymentType_BANK_TRANSFER, nil
		}, ""},
		{"refund", func(r *cellpayv1.SubmitTransactionRequest) { r.PaymentType = cellpayv1.PaymentType_CARD_REFUND }, ""},
		{"expires this month", func(r *cellpayv1.SubmitTransactionRequest) { r.Card.ExpiryMonth, r.Card.ExpiryYear = 11, 2026 }, ""},
		{"19-digit pan", func(r *cellpayv1.SubmitTransactionRequest) { r.Card.Pan = "6011000990139424000" }, "card.pan"},
		{"empty id", func(r *cellpayv1.SubmitTransactionRequest) { r.TransactionId = "" }, "transaction_id"},
		{"long id", func(r *cellpayv1.SubmitTransactionRequest) { r.TransactionId = strings.Repeat("a", 65) }, "transaction_id"},
		{"bad id chars", func(r *cellpayv1.SubmitTransactionRequest) { r.TransactionId = "a/b" }, "transaction_id"},
		{"unicode id", func(r *cellpayv1.SubmitTransactionRequest) { r.TransactionId = "é" }, "transaction_id"},
		{"no type", func(r *cellpayv1.SubmitTransactionRequest) { r.PaymentType = 0 }, "payment_type"},
		{"unknown type", func(r *cellpayv1.SubmitTransactionRequest) { r.PaymentType = 42 }, "payment_type"},
		{"no partner", func(r *cellpayv1.SubmitTransactionRequest) { r.PartnerId = "" }, "partner_id"},
		{"bad market", func(r *cellpayv1.SubmitTransactionRequest) { r.Market = "UK" }, "market"},
		{"no amount", func(r *cellpayv1.SubmitTransactionRequest) { r.Amount = nil }, "amount"},
		{"zero amount", func(r *cellpayv1.SubmitTransactionRequest) { r.Amount.MinorUnits = 0 }, "amount.minor_units"},
		{"negative amount", func(r *cellpayv1.SubmitTransactionRequest) { r.Amount.MinorUnits = -5 }, "amount.minor_units"},
		{"huge amount", func(r *cellpayv1.SubmitTransactionRequest) { r.Amount.MinorUnits = MaxMinorUnits + 1 }, "amount.minor_units"},
		{"unknown currency", func(r *cellpayv1.SubmitTransactionRequest) { r.Amount.Currency = "XYZ" }, "amount.currency"},
		{"lower currency", func(r *cellpayv1.SubmitTransactionRequest) { r.Amount.Currency = "gbp" }, "amount.currency"},
		{"no merchant", func(r *cellpayv1.SubmitTransactionRequest) { r.Merchant = nil }, "merchant"},
		{"no merchant id", func(r *cellpayv1.SubmitTransactionRequest) { r.Merchant.Id = "" }, "merchant.id"},
		{"mcc 3 digits", func(r *cellpayv1.SubmitTransactionRequest) { r.Merchant.Mcc = "541" }, "merchant.mcc"},
		{"mcc 5 digits", func(r *cellpayv1.SubmitTransactionRequest) { r.Merchant.Mcc = "54111" }, "merchant.mcc"},
		{"mcc letters", func(r *cellpayv1.SubmitTransactionRequest) { r.Merchant.Mcc = "54a1" }, "merchant.mcc"},
		{"merchant country", func(r *cellpayv1.SubmitTransactionRequest) { r.Merchant.Country = "" }, "merchant.country"},
		{"card missing", func(r *cellpayv1.SubmitTransactionRequest) { r.Card = nil }, "card"},
		{"card on transfer", func(r *cellpayv1.SubmitTransactionRequest) { r.PaymentType = cellpayv1.PaymentType_BANK_TRANSFER }, "card"},
		{"refund without card", func(r *cellpayv1.SubmitTransactionRequest) {
			r.PaymentType, r.Card = cellpayv1.PaymentType_CARD_REFUND, nil
		}, "card"},
		{"luhn", func(r *cellpayv1.SubmitTransactionRequest) { r.Card.Pan = "4242424242424241" }, "card.pan"},
		{"pan short", func(r *cellpayv1.SubmitTransactionRequest) { r.Card.Pan = "42424242424" }, "card.pan"},
		{"pan long", func(r *cellpayv1.SubmitTransactionRequest) { r.Card.Pan = "42424242424242424242" }, "card.pan"},
		{"pan letters", func(r *cellpayv1.SubmitTransactionRequest) { r.Card.Pan = "4242-4242-4242-4242" }, "card.pan"},
		{"month 0", func(r *cellpayv1.SubmitTransactionRequest) { r.Card.ExpiryMonth = 0 }, "card.expiry_month"},
		{"month 13", func(r *cellpayv1.SubmitTransactionRequest) { r.Card.ExpiryMonth = 13 }, "card.expiry_month"},
		{"two-digit year", func(r *cellpayv1.SubmitTransactionRequest) { r.Card.ExpiryYear = 30 }, "card.expiry_year"},
		{"expired last month", func(r *cellpayv1.SubmitTransactionRequest) { r.Card.ExpiryMonth, r.Card.ExpiryYear = 10, 2026 }, "card.expiry_year"},
		{"expired last year", func(r *cellpayv1.SubmitTransactionRequest) { r.Card.ExpiryYear = 2025 }, "card.expiry_year"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := valid()
			c.mut(r)
			err := Request(r, now)
			if c.field == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("want a *FieldError for %s, got %v", c.field, err)
			}
			if fe.Field != c.field {
				t.Fatalf("field = %q (%v), want %q", fe.Field, err, c.field)
			}
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument {
				t.Fatalf("code = %v, want InvalidArgument", st.Code())
			}
			if !strings.HasPrefix(st.Message(), c.field+": ") {
				t.Fatalf("message %q does not start with the field", st.Message())
			}
			var found bool
			for _, d := range st.Details() {
				if br, ok := d.(*errdetails.BadRequest); ok && br.FieldViolations[0].Field == c.field {
					found = true
				}
			}
			if !found {
				t.Fatalf("status has no BadRequest detail naming %s", c.field)
			}
		})
	}
}

func TestNil(t *testing.T) {
	if err := Request(nil, now); err == nil {
		t.Fatal("nil request accepted")
	}
}

// FuzzRequest mutates every field of a valid request: validation must never
// panic, must always name a field when it refuses, and must never echo the
// card number.
func FuzzRequest(f *testing.F) {
	f.Add("t-1", int32(1), "p-001", "GB", int64(1250), "GBP", "m-1", "5411", "GB", "4242424242424242", int32(12), int32(2030), true)
	f.Add("", int32(0), "", "", int64(0), "", "", "", "", "", int32(0), int32(0), false)
	f.Add("x y", int32(3), "p", "DE", int64(-1), "EUR", "m", "12345", "DE", "4000000000000002", int32(13), int32(99), true)
	f.Fuzz(func(t *testing.T, id string, pt int32, partner, market string, minor int64, cur, mid, mcc, mcountry, pan string, em, ey int32, hasCard bool) {
		r := &cellpayv1.SubmitTransactionRequest{
			TransactionId: id, PaymentType: cellpayv1.PaymentType(pt), PartnerId: partner, Market: market,
			Amount:   &cellpayv1.Money{MinorUnits: minor, Currency: cur},
			Merchant: &cellpayv1.Merchant{Id: mid, Mcc: mcc, Country: mcountry},
		}
		if hasCard {
			r.Card = &cellpayv1.Card{Pan: pan, ExpiryMonth: em, ExpiryYear: ey}
		}
		before := proto.Clone(r)
		err := Request(r, now)
		if !proto.Equal(before, r) {
			t.Fatal("Request modified its input")
		}
		if err == nil {
			return
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field == "" {
			t.Fatalf("error without a field: %v", err)
		}
		if strings.HasPrefix(fe.Field, "card") && len(pan) >= 6 && strings.Contains(err.Error(), pan) {
			t.Fatalf("error echoes the card number: %v", err)
		}
	})
}
