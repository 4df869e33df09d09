package cellside

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/internal/followup"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// State is where a transaction stands in its cell. It is what the store
// persists; the partner sees a Status derived from it.
type State string

const (
	// StateReceived: recorded, not yet at the point of no return. A cell that
	// restarts never continues such a transaction (see StateAbandoned).
	StateReceived State = "received"
	// StateSending: the point of no return has passed. The issuer may have
	// applied it; the outcome is unknown until the issuer answers or an
	// inquiry resolves it. Partners see PENDING.
	StateSending  State = "sending"
	StateApproved State = "approved"
	StateDeclined State = "declined"
	StateFailed   State = "failed"
	// StateAbandoned: stopped before the point of no return (for example by a
	// restart); nothing reached the issuer, and the GTR may restart the
	// transaction on any cell, this one included.
	StateAbandoned State = "abandoned"
	// StateDeciding: an outcome decided before the point of no return (a
	// decline of the cell's own, in DeclineReason) is durable here and on
	// its way into the transaction directory, which makes it the
	// transaction's; partners never see it. A restart never abandons it:
	// the reconciler settles it by the directory (the outcome if the
	// entry holds it, abandoned if not).
	StateDeciding State = "deciding"
)

// ReasonNoFXRate is the reason of a transaction FAILED before its point
// of no return: no rate converts its amount.
const ReasonNoFXRate = "no_fx_rate"

// DecisionState is the final state of an outcome a cell decides before
// the point of no return, by its reason: FAILED when the cell could not
// price it (ReasonNoFXRate), DECLINED for the cell's own rules (merchant
// category, risk limits). A record left deciding keeps only the reason.
func DecisionState(reason string) State {
	if reason == ReasonNoFXRate {
		return StateFailed
	}
	return StateDeclined
}

// StateOf is the state a partner's status s stands for; "" for
// UNSPECIFIED.
func StateOf(s cellpayv1.TransactionStatus) State {
	switch s {
	case cellpayv1.TransactionStatus_PENDING:
		return StateSending
	case cellpayv1.TransactionStatus_APPROVED:
		return StateApproved
	case cellpayv1.TransactionStatus_DECLINED:
		return StateDeclined
	case cellpayv1.TransactionStatus_FAILED:
		return StateFailed
	}
	return ""
}

// Terminal reports whether s is a final outcome.
func (s State) Terminal() bool {
	return s == StateApproved || s == StateDeclined || s == StateFailed
}

// Status is what a partner sees for s; UNSPECIFIED for states partners never
// see (received, abandoned).
func (s State) Status() cellpayv1.TransactionStatus {
	switch s {
	case StateSending:
		return cellpayv1.TransactionStatus_PENDING
	case StateApproved:
		return cellpayv1.TransactionStatus_APPROVED
	case StateDeclined:
		return cellpayv1.TransactionStatus_DECLINED
	case StateFailed:
		return cellpayv1.TransactionStatus_FAILED
	}
	return cellpayv1.TransactionStatus_TRANSACTION_STATUS_UNSPECIFIED
}

// Record is one transaction as a cell keeps it, identified by Key (partner
// and transaction ID). It never holds a full card number: only the masked
// PAN and a keyed hash.
type Record struct {
	TransactionID string
	Fingerprint   idempotency.Fingerprint
	// FingerprintKeyID names the key Fingerprint was computed under (a
	// key ID, never the key): a replay is compared under that key.
	FingerprintKeyID   string
	State              State
	DeclineReason      string
	AuthCode           string
	PaymentType        cellpayv1.PaymentType
	PartnerID          string
	Market             string
	Amount             int64
	Currency           string
	SettlementAmount   int64
	SettlementCurrency string
	// RiskAmount is Amount in the risk policy's limit currency.
	RiskAmount      int64
	MerchantID      string
	MCC             string
	MerchantCountry string
	MaskedPAN       string
	PANHash         []byte
	// PANHashKeyID names the key PANHash was computed under.
	PANHashKeyID   string
	RefdataVersion string
	RouteRule      string
	Attempt        int32
	CellID         string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	// Original is, for a follow-up (CAPTURE, VOID, REFUND), the
	// authorization it follows; empty otherwise.
	Original string
	// Ledger is, for a CARD_AUTHORIZATION, the sums of its follow-ups
	// (Ledger.Authorized is Amount).
	Ledger followup.Ledger
	// Unfiled: decided at the natural home without a directory claim
	// (the directory was unavailable), so the directory has no entry for
	// it until the cell files one once the directory is back.
	Unfiled bool
}

// RecoveredKeyID is the FingerprintKeyID of a recovered record: one the
// cell had lost (its database restored or promoted from a copy behind its
// last commits) and wrote again from the issuer's record of the effect
// (cmd/cell/internal/issuercheck). Its Fingerprint is zero: the issuer's
// record holds no payload to fingerprint, so a replay is compared by
// MatchesRecovered instead.
const RecoveredKeyID = "recovered"

// Recovered reports whether r was written from the issuer's record.
func (r *Record) Recovered() bool { return r.FingerprintKeyID == RecoveredKeyID }

// MatchesRecovered reports whether req (a payment, or a follow-up as
// AsRequest renders it) may be answered recovered record r: it matches r
// on everything the issuer's record held, the payment type, a
// follow-up's original, and the amount and currency of an approval (a
// decline's record holds none; a void's amount is its authorization's,
// not the request's). Any other payload is a conflict, as for a record
// with a fingerprint.
func MatchesRecovered(r *Record, req *cellpayv1.SubmitTransactionRequest) bool {
	switch {
	case req.GetPaymentType() != r.PaymentType:
		return false
	case r.Original != "" && req.GetMerchant().GetId() != r.Original:
		return false
	case r.PaymentType == cellpayv1.PaymentType_VOID || r.Amount == 0 && r.Currency == "":
		return true
	}
	return req.GetAmount().GetMinorUnits() == r.Amount && req.GetAmount().GetCurrency() == r.Currency
}

// Key identifies the transaction: transaction IDs are a namespace per
// partner.
func (r *Record) Key() idempotency.Key {
	return idempotency.Key{PartnerID: r.PartnerID, TransactionID: r.TransactionID}
}

// Transaction renders r for the partner.
func (r *Record) Transaction() *cellpayv1.Transaction {
	t := &cellpayv1.Transaction{
		TransactionId:         r.TransactionID,
		Status:                r.State.Status(),
		DeclineReason:         r.DeclineReason,
		AuthCode:              r.AuthCode,
		CellId:                r.CellID,
		Attempts:              r.Attempt,
		Amount:                &cellpayv1.Money{MinorUnits: r.Amount, Currency: r.Currency},
		SettlementAmount:      &cellpayv1.Money{MinorUnits: r.SettlementAmount, Currency: r.SettlementCurrency},
		RefdataVersion:        r.RefdataVersion,
		RouteRule:             r.RouteRule,
		MaskedPan:             r.MaskedPAN,
		PaymentType:           r.PaymentType,
		PartnerId:             r.PartnerID,
		Market:                r.Market,
		MerchantId:            r.MerchantID,
		Mcc:                   r.MCC,
		CreatedAt:             timestamppb.New(r.CreatedAt),
		UpdatedAt:             timestamppb.New(r.UpdatedAt),
		OriginalTransactionId: r.Original,
	}
	// An authorization's follow-up sums, only once it has some: every
	// answer is also a directory entry and a callback body, and an absent
	// Money reads as zero.
	if r.Ledger.Captured > 0 {
		t.CapturedAmount = &cellpayv1.Money{MinorUnits: r.Ledger.Captured, Currency: r.Currency}
	}
	if r.Ledger.Refunded > 0 {
		t.RefundedAmount = &cellpayv1.Money{MinorUnits: r.Ledger.Refunded, Currency: r.Currency}
	}
	t.Voided = r.Ledger.Voided
	return t
}
