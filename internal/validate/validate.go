// Package validate checks a partner's SubmitTransactionRequest before any
// work is done on it. Both the GTR (at the edge) and every cell (which must
// not trust its caller) run the same checks.
//
// Every error is a *FieldError naming the offending field in the request's
// own path syntax (for example "card.pan"). A FieldError carries its gRPC
// status, INVALID_ARGUMENT with a BadRequest detail, so a handler can return
// it as it is. Messages never contain a card number.
package validate

import (
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/internal/iso"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// MaxMinorUnits bounds an amount so that FX conversion and sums over many
// transactions stay far inside int64.
const MaxMinorUnits = 1_000_000_000_000_000

// FieldError says which field of a request is invalid and why.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// GRPCStatus makes a FieldError an INVALID_ARGUMENT status with a
// BadRequest field violation, so callers can read the field without parsing
// text.
func (e *FieldError) GRPCStatus() *status.Status {
	st := status.New(codes.InvalidArgument, e.Error())
	if d, err := st.WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: e.Field, Description: e.Reason}},
	}); err == nil {
		return d
	}
	return st
}

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Request checks req at time now (card expiry) and returns the first
// problem found, or nil.
func Request(req *cellpayv1.SubmitTransactionRequest, now time.Time) error {
	if req == nil {
		return fieldErr("request", "is required")
	}
	if err := idempotency.ValidateKey(req.GetTransactionId()); err != nil {
		return fieldErr("transaction_id", "%s", err.Error())
	}
	pt := req.GetPaymentType()
	switch pt {
	case cellpayv1.PaymentType_CARD_AUTHORIZATION, cellpayv1.PaymentType_CARD_REFUND, cellpayv1.PaymentType_BANK_TRANSFER:
	case cellpayv1.PaymentType_PAYMENT_TYPE_UNSPECIFIED:
		return fieldErr("payment_type", "is required")
	default:
		return fieldErr("payment_type", "unknown value %d", int32(pt))
	}
	if err := idempotency.ValidateKey(req.GetPartnerId()); err != nil {
		return fieldErr("partner_id", "%s", err.Error())
	}
	if !iso.IsCountry(req.GetMarket()) {
		return fieldErr("market", "must be an ISO 3166-1 alpha-2 country code")
	}
	if err := amount(req.GetAmount()); err != nil {
		return err
	}
	if err := merchant(req.GetMerchant()); err != nil {
		return err
	}
	if pt == cellpayv1.PaymentType_BANK_TRANSFER {
		if req.Card != nil {
			return fieldErr("card", "must be empty for BANK_TRANSFER")
		}
		return nil
	}
	return cardFields(req.GetCard(), now)
}

func amount(m *cellpayv1.Money) error {
	if m == nil {
		return fieldErr("amount", "is required")
	}
	if m.GetMinorUnits() <= 0 {
		return fieldErr("amount.minor_units", "must be greater than zero")
	}
	if m.GetMinorUnits() > MaxMinorUnits {
		return fieldErr("amount.minor_units", "must be at most %d", int64(MaxMinorUnits))
	}
	if !iso.IsCurrency(m.GetCurrency()) {
		return fieldErr("amount.currency", "must be an active ISO 4217 currency code")
	}
	return nil
}

func merchant(m *cellpayv1.Merchant) error {
	if m == nil {
		return fieldErr("merchant", "is required")
	}
	if err := idempotency.ValidateKey(m.GetId()); err != nil {
		return fieldErr("merchant.id", "%s", err.Error())
	}
	mcc := m.GetMcc()
	if len(mcc) != 4 || !digits(mcc) {
		return fieldErr("merchant.mcc", "must be four digits")
	}
	if !iso.IsCountry(m.GetCountry()) {
		return fieldErr("merchant.country", "must be an ISO 3166-1 alpha-2 country code")
	}
	return nil
}

func cardFields(c *cellpayv1.Card, now time.Time) error {
	if c == nil {
		return fieldErr("card", "is required for card payment types")
	}
	pan := c.GetPan()
	if len(pan) < 12 || len(pan) > 19 {
		return fieldErr("card.pan", "must be 12 to 19 digits, got %d characters", len(pan))
	}
	if !digits(pan) {
		return fieldErr("card.pan", "must contain digits only")
	}
	if !card.Luhn(pan) {
		return fieldErr("card.pan", "fails the Luhn check")
	}
	month, year := c.GetExpiryMonth(), c.GetExpiryYear()
	if month < 1 || month > 12 {
		return fieldErr("card.expiry_month", "must be 1 to 12")
	}
	if year < 2000 || year > 2099 {
		return fieldErr("card.expiry_year", "must be a four-digit year from 2000 to 2099")
	}
	// A card is valid through the last day of its expiry month.
	ny, nm, _ := now.UTC().Date()
	if int(year) < ny || int(year) == ny && time.Month(month) < nm {
		return fieldErr("card.expiry_year", "card expired %02d/%d", month, year)
	}
	return nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// FollowUp checks a capture, void or refund (as the GTR forwards it to a
// cell) and returns the first problem found, or nil. A void carries no
// amount.
func FollowUp(req *cellproto.FollowUpRequest) error {
	if req == nil {
		return fieldErr("request", "is required")
	}
	if err := idempotency.ValidateKey(req.GetTransactionId()); err != nil {
		return fieldErr("transaction_id", "%s", err.Error())
	}
	if err := idempotency.ValidateKey(req.GetPartnerId()); err != nil {
		return fieldErr("partner_id", "%s", err.Error())
	}
	if err := idempotency.ValidateKey(req.GetOriginalTransactionId()); err != nil {
		return fieldErr("original_transaction_id", "%s", err.Error())
	}
	if req.GetOriginalTransactionId() == req.GetTransactionId() {
		return fieldErr("transaction_id", "must differ from original_transaction_id: a follow-up is a transaction of its own")
	}
	if !iso.IsCountry(req.GetMarket()) {
		return fieldErr("market", "must be the original's market, an ISO 3166-1 alpha-2 country code")
	}
	switch req.GetKind() {
	case cellpayv1.PaymentType_CAPTURE, cellpayv1.PaymentType_REFUND:
		return amount(req.GetAmount())
	case cellpayv1.PaymentType_VOID:
		if req.Amount != nil {
			return fieldErr("amount", "must be empty for a void (it releases the whole authorization)")
		}
		return nil
	}
	return fieldErr("kind", "must be CAPTURE, VOID or REFUND")
}
