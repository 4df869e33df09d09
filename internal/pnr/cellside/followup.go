package cellside

import (
	"errors"
	"fmt"
	"time"

	"github.com/cellpay/cellpay/internal/followup"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// A follow-up (a capture, void or refund) never crosses cells: it runs
// where its authorization is recorded, and its record, written with its
// amount held on the authorization's ledger, is its point of no return.
// So its decisions are few and need no handshake: FollowUpRecord builds
// the record, HoldFollowUp decides whether it may be held (under the
// authorization's row lock, in the store's transaction), and
// FollowUpOutcome reads the issuer's answer. The store and the server
// drive them.

// ErrOriginalNotFound: the cell has no authorization of the partner with
// the follow-up's original ID.
var ErrOriginalNotFound = errors.New("original_transaction_id: no transaction of the partner has this ID")

// Refused is a follow-up its authorization does not allow; Reason is the
// API's (pkg/api/apierr).
type Refused struct {
	Reason string
	Msg    string
}

func (r *Refused) Error() string { return r.Msg }

// FollowUpKey is the follow-up's original's key.
func FollowUpKey(req *cellproto.FollowUpRequest) idempotency.Key {
	return idempotency.Key{PartnerID: req.GetPartnerId(), TransactionID: req.GetOriginalTransactionId()}
}

// AsRequest is the follow-up as a SubmitTransactionRequest, for its
// fingerprint (idempotency.Fingerprinter) only: its ID, kind as the
// payment type (so no payment's fingerprint is ever a follow-up's),
// partner, market, amount, and its original's ID where a payment has its
// merchant's. Every field is length-prefixed in a fingerprint, so no two
// follow-ups encode alike.
func AsRequest(req *cellproto.FollowUpRequest) *cellpayv1.SubmitTransactionRequest {
	return &cellpayv1.SubmitTransactionRequest{
		TransactionId: req.GetTransactionId(),
		PaymentType:   req.GetKind(),
		PartnerId:     req.GetPartnerId(),
		Market:        req.GetMarket(),
		Amount:        req.GetAmount(),
		Merchant:      &cellpayv1.Merchant{Id: req.GetOriginalTransactionId()},
	}
}

// FollowUpRecord is the record of follow-up req of original, in state
// sending: its amount (a void's is the authorization's), the original's
// merchant and masked card, settlement and risk amounts in the
// original's proportion.
func FollowUpRecord(req *cellproto.FollowUpRequest, original *Record, cellID string, fp idempotency.Fingerprint, fpKeyID string, now time.Time) *Record {
	amount, currency := req.GetAmount().GetMinorUnits(), req.GetAmount().GetCurrency()
	if req.GetKind() == cellpayv1.PaymentType_VOID {
		amount, currency = original.Amount, original.Currency
	}
	now = now.UTC().Truncate(time.Microsecond)
	return &Record{
		TransactionID: req.GetTransactionId(), Fingerprint: fp, FingerprintKeyID: fpKeyID,
		State: StateSending, PaymentType: req.GetKind(), PartnerID: req.GetPartnerId(), Market: req.GetMarket(),
		Amount: amount, Currency: currency,
		SettlementAmount: share(original.SettlementAmount, amount, original.Amount), SettlementCurrency: original.SettlementCurrency,
		RiskAmount: share(original.RiskAmount, amount, original.Amount),
		MerchantID: original.MerchantID, MCC: original.MCC, MerchantCountry: original.MerchantCountry,
		MaskedPAN: original.MaskedPAN, RefdataVersion: original.RefdataVersion, RouteRule: req.GetRouteRule(),
		Attempt: 1, CellID: cellID, CreatedAt: now, UpdatedAt: now, Original: original.TransactionID,
	}
}

// share is whole*part/of, rounded down, without overflow for amounts up
// to validate.MaxMinorUnits.
func share(whole, part, of int64) int64 {
	if of == 0 {
		return 0
	}
	q, r := whole/of, whole%of
	return q*part + r*part/of
}

// HoldFollowUp decides whether follow-up f may be held on original (read
// under its row lock) and, if so, holds it on original.Ledger: nil, or a
// *Refused naming the rule.
func HoldFollowUp(original, f *Record) error {
	switch {
	case original.PaymentType != cellpayv1.PaymentType_CARD_AUTHORIZATION:
		return &Refused{"ORIGINAL_NOT_APPROVED", fmt.Sprintf("original_transaction_id: a %v cannot be captured, voided or refunded", original.PaymentType)}
	case original.State != StateApproved:
		what := "was not approved"
		if original.State == StateSending {
			what = "is still pending; retry once it is approved"
		}
		return &Refused{"ORIGINAL_NOT_APPROVED", "original_transaction_id: the authorization " + what}
	case f.Market != original.Market && !original.Recovered():
		// A recovered original holds no market (the issuer's record has
		// none): its currency is the check left.
		return &Refused{"ORIGINAL_MISMATCH", "market: not the original's"}
	case f.Currency != original.Currency:
		return &Refused{"ORIGINAL_MISMATCH", "amount.currency: not the original's (" + original.Currency + ")"}
	}
	original.Ledger.Authorized = original.Amount
	if err := original.Ledger.Hold(f.PaymentType, f.Amount); err != nil {
		var b *followup.Broken
		if errors.As(err, &b) {
			return &Refused{b.Reason, b.Msg}
		}
		return err
	}
	return nil
}

// FollowUpOutcome is f's final record after the issuer answered.
func FollowUpOutcome(f *Record, approved bool, authCode, declineReason string, now time.Time) *Record {
	out := *f
	out.UpdatedAt = now.UTC().Truncate(time.Microsecond)
	if approved {
		out.State, out.AuthCode = StateApproved, authCode
	} else {
		out.State, out.DeclineReason = StateDeclined, declineReason
	}
	return &out
}
