// Package followup is the rule book of an authorization's life after it
// was approved: captures (full or partial, several), a void (before any
// capture) and refunds (full or partial, several, of what was captured).
// It is pure: a Ledger is one authorization's sums, and Hold and Settle
// are the only ways they change. The cell keeps a Ledger in its original's
// row (and the database's CHECK constraints hold the same limits); the
// issuer simulator keeps its own.
//
// A follow-up is held before it is sent (its amount counts against the
// limits while its outcome is unknown) and settled once known: approved,
// it moves from held to done; declined or failed, it is released. So the
// sums never pass the limits, whatever order outcomes arrive in.
package followup

import (
	"fmt"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// Ledger is one authorization's sums, in minor units of its currency.
type Ledger struct {
	// Authorized is the original's amount.
	Authorized int64
	// Captured and Refunded are the approved captures' and refunds' sums.
	Captured, Refunded int64
	// HeldCapture is the amount of captures (and of a void: the whole
	// authorization) in flight; HeldRefund of refunds.
	HeldCapture, HeldRefund int64
	Voided                  bool
}

// Broken is a rule a follow-up would break; Reason is the API's reason
// (pkg/api/apierr) for it.
type Broken struct {
	Reason string
	Msg    string
}

func (b *Broken) Error() string { return b.Msg }

// The reasons of Broken.
const (
	CaptureExceeds = "CAPTURE_EXCEEDS_AUTHORIZATION"
	// RefundBeforeCapture: a refund of an authorization none of whose
	// captures was approved yet (one still in flight included: it is
	// not captured until it is approved).
	RefundBeforeCapture = "REFUND_BEFORE_CAPTURE"
	// RefundExceeds: a refund of more than was captured and not refunded.
	RefundExceeds    = "REFUND_EXCEEDS_CAPTURED"
	VoidAfterCapture = "VOID_AFTER_CAPTURE"
	OriginalVoided   = "ORIGINAL_VOIDED"
)

// Check says whether a follow-up of kind for amount may be held now: nil,
// or the *Broken rule. A void's amount is ignored (it holds the whole
// authorization).
func (l Ledger) Check(kind cellpayv1.PaymentType, amount int64) error {
	switch kind {
	case cellpayv1.PaymentType_CAPTURE:
		if l.Voided {
			return &Broken{OriginalVoided, "original_transaction_id: the authorization was voided"}
		}
		if left := l.Authorized - l.Captured - l.HeldCapture; amount > left {
			return &Broken{CaptureExceeds, fmt.Sprintf("amount: %d is more than the %d left to capture of the authorization", amount, max(left, 0))}
		}
	case cellpayv1.PaymentType_VOID:
		if l.Voided {
			return nil // a second void changes nothing: Hold refuses it as held
		}
		if l.Captured > 0 || l.HeldCapture > 0 {
			return &Broken{VoidAfterCapture, "original_transaction_id: the authorization has a capture (refund it instead)"}
		}
	case cellpayv1.PaymentType_REFUND:
		if l.Captured == 0 {
			return &Broken{RefundBeforeCapture, "original_transaction_id: nothing of the authorization is captured yet (capture it first)"}
		}
		if left := l.Captured - l.Refunded - l.HeldRefund; amount > left {
			return &Broken{RefundExceeds, fmt.Sprintf("amount: %d is more than the %d captured and not refunded", amount, max(left, 0))}
		}
	default:
		return fmt.Errorf("followup: %v is not a follow-up", kind)
	}
	return nil
}

// Hold checks a follow-up and holds its amount. A void of a voided
// authorization is refused as OriginalVoided.
func (l *Ledger) Hold(kind cellpayv1.PaymentType, amount int64) error {
	if kind == cellpayv1.PaymentType_VOID && l.Voided {
		return &Broken{OriginalVoided, "original_transaction_id: the authorization was voided"}
	}
	if err := l.Check(kind, amount); err != nil {
		return err
	}
	switch kind {
	case cellpayv1.PaymentType_CAPTURE:
		l.HeldCapture += amount
	case cellpayv1.PaymentType_VOID:
		l.HeldCapture += l.Authorized
	case cellpayv1.PaymentType_REFUND:
		l.HeldRefund += amount
	}
	return nil
}

// Settle ends a held follow-up: approved, it counts; otherwise it is
// released. amount is the one held (a void's: Authorized).
func (l *Ledger) Settle(kind cellpayv1.PaymentType, amount int64, approved bool) {
	switch kind {
	case cellpayv1.PaymentType_CAPTURE:
		l.HeldCapture -= amount
		if approved {
			l.Captured += amount
		}
	case cellpayv1.PaymentType_VOID:
		l.HeldCapture -= amount
		if approved {
			l.Voided = true
		}
	case cellpayv1.PaymentType_REFUND:
		l.HeldRefund -= amount
		if approved {
			l.Refunded += amount
		}
	}
}

// Valid reports whether l keeps every limit: what the database's CHECK
// constraints say too.
func (l Ledger) Valid() bool {
	return l.Captured >= 0 && l.Refunded >= 0 && l.HeldCapture >= 0 && l.HeldRefund >= 0 &&
		l.Captured+l.HeldCapture <= l.Authorized &&
		l.Refunded+l.HeldRefund <= l.Captured &&
		(!l.Voided || l.Captured == 0)
}
