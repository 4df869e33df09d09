package issuersim

import (
	"crypto/sha256"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/cellpay/cellpay/internal/followup"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// Test cards. See the package documentation for their outcomes.
const (
	CardApproved          = "4111111111111111"
	CardDoNotHonor        = "4000000000000002"
	CardInsufficientFunds = "4000000000009995"
	CardStolen            = "4000000000009979"
	CardExpired           = "4000000000000069"
)

// Decline reasons, as sent in AuthorizeResponse.decline_reason.
const (
	ReasonDoNotHonor        = "do_not_honor"
	ReasonInsufficientFunds = "insufficient_funds"
	ReasonStolenCard        = "stolen_card"
	ReasonExpiredCard       = "expired_card"
	ReasonInvalidExpiry     = "invalid_expiry"
	ReasonExceedsLimit      = "exceeds_limit"

	// Adjust's reasons.
	ReasonUnknownOriginal   = "unknown_original"
	ReasonCurrencyMismatch  = "currency_mismatch"
	ReasonExceedsAuthorized = "exceeds_authorized"
	ReasonVoided            = "voided"
	ReasonAlreadyCaptured   = "already_captured"
	ReasonExceedsCaptured   = "exceeds_captured"
)

// FixedDecline returns the reason a test card always declines with, and
// false for any other PAN.
func FixedDecline(pan string) (reason string, ok bool) {
	switch pan {
	case CardDoNotHonor:
		return ReasonDoNotHonor, true
	case CardInsufficientFunds:
		return ReasonInsufficientFunds, true
	case CardStolen:
		return ReasonStolenCard, true
	case CardExpired:
		return ReasonExpiredCard, true
	}
	return "", false
}

// authCodeAlphabet has no I or O, which read as 1 and 0.
const authCodeAlphabet = "0123456789ABCDEFGHJKLMNPQRSTUVWXYZ"

// AuthCode returns the six-character authorization code the simulator gives
// an approved transaction: a function of its partner and transaction ID
// alone, so a replay anywhere yields the same code, and two partners'
// transactions with one ID get codes of their own.
func AuthCode(partnerID, transactionID string) string {
	// The partner's length first, so that no two pairs hash alike.
	sum := sha256.Sum256([]byte(strconv.Itoa(len(partnerID)) + ":" + partnerID + transactionID))
	var code [6]byte
	for i := range code {
		code[i] = authCodeAlphabet[int(sum[i])%len(authCodeAlphabet)]
	}
	return string(code[:])
}

// request is the part of an AuthorizeRequest the rules read.
type request struct {
	pan           string
	expiryMonth   int32
	expiryYear    int32
	amount        int64
	refund        bool
	bankTransfer  bool
	approvedSpent int64 // the card's cumulative approved amount so far
}

// limits are the configured amount limits.
type limits struct {
	perTxn  int64
	perCard int64
}

// decide applies the rules (package documentation, rules 3 to 8) to a
// validated request. It is pure: the caller records the outcome and, when
// it is an approved non-refund, adds the amount to the card's total.
func decide(r request, lim limits, now time.Time) (approved bool, reason string) {
	if r.bankTransfer {
		if r.amount > lim.perTxn {
			return false, ReasonExceedsLimit
		}
		return true, ""
	}
	if reason, ok := FixedDecline(r.pan); ok {
		return false, reason
	}
	if r.refund {
		return true, ""
	}
	if r.expiryMonth < 1 || r.expiryMonth > 12 {
		return false, ReasonInvalidExpiry
	}
	if expired(r.expiryMonth, r.expiryYear, now) {
		return false, ReasonExpiredCard
	}
	if r.amount > lim.perTxn {
		return false, ReasonExceedsLimit
	}
	// Written as a subtraction: approvedSpent <= perCard always holds, so
	// this cannot overflow where approvedSpent+amount could.
	if r.amount > lim.perCard-r.approvedSpent {
		return false, ReasonInsufficientFunds
	}
	return true, ""
}

// expired reports whether a card expiring at the end of month/year has
// expired by now.
func expired(month, year int32, now time.Time) bool {
	if year >= 0 && year < 100 {
		year += 2000
	}
	now = now.UTC()
	ny, nm := int32(now.Year()), int32(now.Month())
	return year < ny || (year == ny && month < nm)
}

// followupKinds are the follow-up payment types of the adjustment kinds.
var followupKinds = map[issuerproto.AdjustKind]cellpayv1.PaymentType{
	issuerproto.AdjustKind_ADJUST_KIND_CAPTURE: cellpayv1.PaymentType_CAPTURE,
	issuerproto.AdjustKind_ADJUST_KIND_VOID:    cellpayv1.PaymentType_VOID,
	issuerproto.AdjustKind_ADJUST_KIND_REFUND:  cellpayv1.PaymentType_REFUND,
}

// brokenReasons are Adjust's decline reasons for the rules of package
// followup.
var brokenReasons = map[string]string{
	followup.CaptureExceeds:   ReasonExceedsAuthorized,
	followup.OriginalVoided:   ReasonVoided,
	followup.VoidAfterCapture: ReasonAlreadyCaptured,
	followup.RefundExceeds:    ReasonExceedsCaptured,
	// The issuer's contract has one reason for a refund beyond the
	// captures, none captured included.
	followup.RefundBeforeCapture: ReasonExceedsCaptured,
}

// adjust applies an adjustment of kind (a valid one) for amount to an
// authorization's ledger l, held and settled at once: the issuer knows its
// outcome as it holds it. It returns the amount applied (a void's is the
// authorized amount, whatever the request carried), or reason, the rule
// the adjustment would break, with l unchanged.
func adjust(l *followup.Ledger, kind issuerproto.AdjustKind, amount int64) (applied int64, reason string) {
	pt, ok := followupKinds[kind]
	if !ok {
		panic("issuersim: adjust of an unvalidated kind")
	}
	if pt == cellpayv1.PaymentType_VOID {
		amount = l.Authorized
	}
	if err := l.Hold(pt, amount); err != nil {
		var b *followup.Broken
		if !errors.As(err, &b) {
			panic("issuersim: followup refused a follow-up kind: " + err.Error())
		}
		if r, ok := brokenReasons[b.Reason]; ok {
			return 0, r
		}
		// A rule newer than this table: still a decline, named after it.
		return 0, strings.ToLower(b.Reason)
	}
	l.Settle(pt, amount, true)
	return amount, ""
}
