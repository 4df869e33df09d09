package cellside

import (
	"testing"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
)

// TestMatchesRecovered: a replay of a recovered record matches on what
// the issuer's record held, and only that.
func TestMatchesRecovered(t *testing.T) {
	capture := &Record{PaymentType: cellpayv1.PaymentType_CAPTURE, Original: "a-1", Amount: 400, Currency: "EUR", FingerprintKeyID: RecoveredKeyID}
	void := &Record{PaymentType: cellpayv1.PaymentType_VOID, Original: "a-1", Amount: 1000, Currency: "EUR", FingerprintKeyID: RecoveredKeyID}
	// Declines: with the amount the issuer's record says was asked for,
	// and from an issuer that does not say.
	declined := &Record{PaymentType: cellpayv1.PaymentType_CAPTURE, Original: "a-1", State: StateDeclined, Amount: 700, Currency: "EUR", FingerprintKeyID: RecoveredKeyID}
	declinedUnknown := &Record{PaymentType: cellpayv1.PaymentType_CAPTURE, Original: "a-1", State: StateDeclined, FingerprintKeyID: RecoveredKeyID}
	followUp := func(kind cellpayv1.PaymentType, original string, amount int64, currency string) *cellpayv1.SubmitTransactionRequest {
		return AsRequest(&cellproto.FollowUpRequest{TransactionId: "c-1", Kind: kind, PartnerId: "p-001",
			OriginalTransactionId: original, Amount: &cellpayv1.Money{MinorUnits: amount, Currency: currency}})
	}
	for _, tt := range []struct {
		name string
		r    *Record
		req  *cellpayv1.SubmitTransactionRequest
		want bool
	}{
		{"the same capture", capture, followUp(cellpayv1.PaymentType_CAPTURE, "a-1", 400, "EUR"), true},
		{"another amount", capture, followUp(cellpayv1.PaymentType_CAPTURE, "a-1", 401, "EUR"), false},
		{"another currency", capture, followUp(cellpayv1.PaymentType_CAPTURE, "a-1", 400, "GBP"), false},
		{"another original", capture, followUp(cellpayv1.PaymentType_CAPTURE, "a-2", 400, "EUR"), false},
		{"another kind", capture, followUp(cellpayv1.PaymentType_REFUND, "a-1", 400, "EUR"), false},
		{"a void, whatever its amount", void, followUp(cellpayv1.PaymentType_VOID, "a-1", 0, ""), true},
		{"a void of another original", void, followUp(cellpayv1.PaymentType_VOID, "a-2", 0, ""), false},
		{"a decline, the amount asked", declined, followUp(cellpayv1.PaymentType_CAPTURE, "a-1", 700, "EUR"), true},
		{"a decline, another amount", declined, followUp(cellpayv1.PaymentType_CAPTURE, "a-1", 900, "EUR"), false},
		{"a decline whose amount the issuer did not say", declinedUnknown, followUp(cellpayv1.PaymentType_CAPTURE, "a-1", 900, "EUR"), true},
	} {
		if got := MatchesRecovered(tt.r, tt.req); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	if !capture.Recovered() || (&Record{FingerprintKeyID: "fp-1"}).Recovered() {
		t.Error("Recovered does not follow the key ID")
	}
}

// TestFollowUpOfARecoveredOriginal: a recovered authorization holds no
// market (the issuer's record has none), so its follow-ups are held on
// its currency alone; a live original still refuses another market.
func TestFollowUpOfARecoveredOriginal(t *testing.T) {
	original := func(recovered bool) *Record {
		r := &Record{TransactionID: "a-1", PartnerID: "p-001", State: StateApproved, PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION,
			Amount: 1000, Currency: "EUR", Market: "GB", FingerprintKeyID: "fp-cur"}
		if recovered {
			r.Market, r.FingerprintKeyID = "", RecoveredKeyID
		}
		return r
	}
	capture := &Record{TransactionID: "c-1", PartnerID: "p-001", PaymentType: cellpayv1.PaymentType_CAPTURE, Market: "GB", Amount: 400, Currency: "EUR"}
	if err := HoldFollowUp(original(true), capture); err != nil {
		t.Fatalf("a capture of a recovered authorization: %v", err)
	}
	other := *capture
	other.Market = "FR"
	if err := HoldFollowUp(original(false), &other); err == nil {
		t.Fatal("another market held on a live original")
	}
	other.Currency = "GBP"
	if err := HoldFollowUp(original(true), &other); err == nil {
		t.Fatal("another currency held on a recovered original")
	}
}
