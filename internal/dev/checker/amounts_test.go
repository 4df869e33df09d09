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

// TestJudgeAnsweredAmounts: what a partner was answered is judged to the
// minor unit against the record of the cell that decided it and the
// issuer's effect, for every payment type; a planted difference in any
// one amount, currency or sum is an amount mismatch, counted once.
func TestJudgeAnsweredAmounts(t *testing.T) {
	const id = "t"
	rec := func(pt cellpayv1.PaymentType, state string, amount int64, currency string) CellRecord {
		r := CellRecord{PartnerID: "p", TransactionID: id, Cell: "c", State: state, PaymentType: pt, Amount: amount, Currency: currency}
		if pt == cellpayv1.PaymentType_CAPTURE || pt == cellpayv1.PaymentType_REFUND || pt == cellpayv1.PaymentType_VOID {
			r.Original = "a"
		}
		return r
	}
	authRec := func(ledger Sums) CellRecord {
		r := rec(cellpayv1.PaymentType_CARD_AUTHORIZATION, "approved", 1000, "EUR")
		r.Ledger, r.Followed = ledger, ledger
		return r
	}
	ans := func(st cellpayv1.TransactionStatus, amount int64, currency string) Answer {
		return Answer{PartnerID: "p", ID: id, Status: st, Amounts: true, Amount: amount, Currency: currency}
	}
	withSums := func(a Answer, captured, refunded int64, voided bool) Answer {
		a.Captured, a.Refunded, a.Voided = captured, refunded, voided
		return a
	}
	approved, declined := cellpayv1.TransactionStatus_APPROVED, cellpayv1.TransactionStatus_DECLINED
	issuer := func(amount int64, currency string) Observed {
		return Observed{Effects: 1, Amounts: true, IssuerApproved: true, IssuerAmount: amount, IssuerCurrency: currency}
	}
	for _, c := range []struct {
		name string
		a    Answer
		rec  CellRecord
		o    Observed
		bad  bool
	}{
		{"authorization as recorded and applied", ans(approved, 1000, "EUR"), authRec(Sums{}), issuer(1000, "EUR"), false},
		{"authorization answered for another amount", ans(approved, 999, "EUR"), authRec(Sums{}), issuer(1000, "EUR"), true},
		{"authorization answered in another currency", ans(approved, 1000, "GBP"), authRec(Sums{}), issuer(1000, "EUR"), true},
		{"authorization applied for another amount", ans(approved, 1000, "EUR"), authRec(Sums{}), issuer(1001, "EUR"), true},
		{"authorization applied in another currency", ans(approved, 1000, "EUR"), authRec(Sums{}), issuer(1000, "GBP"), true},
		{"authorization approved, declined at the issuer", ans(approved, 1000, "EUR"), authRec(Sums{}), Observed{Effects: 1, Amounts: true}, true},
		{"authorization's sums behind its ledger", withSums(ans(approved, 1000, "EUR"), 300, 100, false), authRec(Sums{600, 100, false}), issuer(1000, "EUR"), false},
		{"authorization answered captured ahead of its ledger", withSums(ans(approved, 1000, "EUR"), 700, 0, false), authRec(Sums{600, 0, false}), issuer(1000, "EUR"), true},
		{"authorization answered refunded ahead of its ledger", withSums(ans(approved, 1000, "EUR"), 600, 200, false), authRec(Sums{600, 100, false}), issuer(1000, "EUR"), true},
		{"authorization answered voided, ledger not", withSums(ans(approved, 1000, "EUR"), 0, 0, true), authRec(Sums{}), issuer(1000, "EUR"), true},
		{"authorization declined as recorded", ans(declined, 1000, "EUR"), rec(cellpayv1.PaymentType_CARD_AUTHORIZATION, "declined", 1000, "EUR"), Observed{Effects: 1, Amounts: true}, false},
		{"authorization declined, recorded for another amount", ans(declined, 10, "EUR"), rec(cellpayv1.PaymentType_CARD_AUTHORIZATION, "declined", 1000, "EUR"), Observed{Effects: 1, Amounts: true}, true},
		{"card refund answered for another amount", ans(approved, 500, "EUR"), rec(cellpayv1.PaymentType_CARD_REFUND, "approved", 500, "EUR"), issuer(499, "EUR"), true},
		{"bank transfer as applied", ans(approved, 500, "EUR"), rec(cellpayv1.PaymentType_BANK_TRANSFER, "approved", 500, "EUR"), issuer(500, "EUR"), false},
		{"capture as recorded and applied", ans(approved, 600, "EUR"), rec(cellpayv1.PaymentType_CAPTURE, "approved", 600, "EUR"), issuer(600, "EUR"), false},
		{"capture answered for another amount", ans(approved, 601, "EUR"), rec(cellpayv1.PaymentType_CAPTURE, "approved", 600, "EUR"), issuer(600, "EUR"), true},
		{"capture adjusted in another currency", ans(approved, 600, "EUR"), rec(cellpayv1.PaymentType_CAPTURE, "approved", 600, "EUR"), issuer(600, "GBP"), true},
		{"refund as recorded and applied", ans(approved, 200, "EUR"), rec(cellpayv1.PaymentType_REFUND, "approved", 200, "EUR"), issuer(200, "EUR"), false},
		{"refund answered for another amount", ans(approved, 100, "EUR"), rec(cellpayv1.PaymentType_REFUND, "approved", 200, "EUR"), issuer(200, "EUR"), true},
		{"refund adjusted for another amount", ans(approved, 200, "EUR"), rec(cellpayv1.PaymentType_REFUND, "approved", 200, "EUR"), issuer(201, "EUR"), true},
		{"void of the whole authorization", ans(approved, 1000, "EUR"), rec(cellpayv1.PaymentType_VOID, "approved", 1000, "EUR"), issuer(1000, "EUR"), false},
		{"void answered for less", ans(approved, 0, "EUR"), rec(cellpayv1.PaymentType_VOID, "approved", 1000, "EUR"), issuer(1000, "EUR"), true},
		{"pending answer not judged", ans(cellpayv1.TransactionStatus_PENDING, 1, "EUR"), rec(cellpayv1.PaymentType_CAPTURE, "approved", 600, "EUR"), issuer(600, "EUR"), false},
		{"answer without amounts not judged", Answer{PartnerID: "p", ID: id, Status: approved}, rec(cellpayv1.PaymentType_CAPTURE, "approved", 600, "EUR"), issuer(600, "EUR"), false},
	} {
		k := idempotency.Key{PartnerID: "p", TransactionID: id}
		c.o.Read, c.o.Records = &cellpayv1.Transaction{TransactionId: id, Status: c.a.Status}, []CellRecord{c.rec}
		if c.a.Status == cellpayv1.TransactionStatus_PENDING {
			c.o.Read.Status = approved
		}
		r := Judge([]Answer{c.a}, map[idempotency.Key]Observed{k: c.o}, nil, 5)
		if got := r.AmountMismatches; got != 0 != c.bad || got > 1 || r.OK() == c.bad {
			t.Errorf("%s: %d amount mismatches (OK %v), want a mismatch %v: %v", c.name, got, r.OK(), c.bad, r.Examples)
		}
	}
}
