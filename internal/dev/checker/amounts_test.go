package checker

import (
	"testing"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// TestJudgeAmounts: the money of follow-ups is judged without I/O: an
// authorization's ledger must be its approved follow-ups' sum and keep its
// limits, and a follow-up approved in its cell must be the issuer's
// approved effect for the same amount (and a declined one no approval).
func TestJudgeAmounts(t *testing.T) {
	auth := func(ledger, followed Sums) CellRecord {
		return CellRecord{PartnerID: "p", TransactionID: "a", Cell: "c", State: "approved", PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION,
			Amount: 1000, Ledger: ledger, Followed: followed}
	}
	capture := func(state string, amount int64) CellRecord {
		return CellRecord{PartnerID: "p", TransactionID: "f", Cell: "c", State: state, PaymentType: cellpayv1.PaymentType_CAPTURE, Amount: amount, Original: "a"}
	}
	for _, c := range []struct {
		name string
		rec  CellRecord
		o    Observed
		bad  bool
	}{
		{"ledger equals its follow-ups", auth(Sums{600, 100, false}, Sums{600, 100, false}), Observed{}, false},
		{"ledger differs", auth(Sums{600, 100, false}, Sums{500, 100, false}), Observed{}, true},
		{"ledger over the authorization", auth(Sums{1001, 0, false}, Sums{1001, 0, false}), Observed{}, true},
		{"refunds over the captures", auth(Sums{100, 200, false}, Sums{100, 200, false}), Observed{}, true},
		{"capture as the issuer applied it", capture("approved", 600), Observed{Effects: 1, Amounts: true, IssuerApproved: true, IssuerAmount: 600}, false},
		{"capture for another amount", capture("approved", 600), Observed{Effects: 1, Amounts: true, IssuerApproved: true, IssuerAmount: 599}, true},
		{"capture approved, not at the issuer", capture("approved", 600), Observed{Amounts: true}, true},
		{"capture declined, approved at the issuer", capture("declined", 600), Observed{Effects: 1, Amounts: true, IssuerApproved: true, IssuerAmount: 600}, true},
		{"capture pending", capture("sending", 600), Observed{Effects: 1, Amounts: true, IssuerApproved: true, IssuerAmount: 600}, false},
		{"amounts not read (the simulator)", capture("approved", 600), Observed{Effects: 1}, false},
	} {
		k := idempotency.Key{PartnerID: c.rec.PartnerID, TransactionID: c.rec.TransactionID}
		st := cellpayv1.TransactionStatus_APPROVED
		if c.rec.State == "declined" {
			st = cellpayv1.TransactionStatus_DECLINED
		}
		c.o.Read, c.o.Records = &cellpayv1.Transaction{TransactionId: k.TransactionID, Status: st}, []CellRecord{c.rec}
		r := Judge([]Answer{{PartnerID: k.PartnerID, ID: k.TransactionID, Status: st}}, map[idempotency.Key]Observed{k: c.o}, nil, 5)
		if got := r.AmountMismatches == 1; got != c.bad || r.OK() == c.bad {
			t.Errorf("%s: %d amount mismatches (OK %v), want a mismatch %v: %v", c.name, r.AmountMismatches, r.OK(), c.bad, r.Examples)
		}
	}
}
