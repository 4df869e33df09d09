package model

import (
	"reflect"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// TestRecoveredRecord holds recoveredRecord, the model's copy of
// cmd/cell/internal/issuercheck.Recovered (which the model cannot import),
// to the code's: for each effect, the record Recovered builds from the
// issuer's record of it (a RecordedEffect with the same fields, applied
// at modelTime by the cell's terminal), field by field as its code sets
// them. A change to Recovered must change this table, and the copy.
func TestRecoveredRecord(t *testing.T) {
	now := modelTime.Add(time.Hour + 1500*time.Nanosecond) // truncated to the microsecond
	at := modelTime.UTC().Truncate(time.Microsecond)
	upd := now.UTC().Truncate(time.Microsecond)
	for _, tt := range []struct {
		name string
		e    issued
		want cellside.Record
	}{
		{"an approved authorization", issued{id: "a0", cell: 1, kind: cellpayv1.PaymentType_CARD_AUTHORIZATION, approved: true, amount: 103, currency: "EUR", auth: "A-a0", payload: 3},
			cellside.Record{TransactionID: "a0", PartnerID: partner, FingerprintKeyID: cellside.RecoveredKeyID, State: cellside.StateApproved,
				AuthCode: "A-a0", PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION, Amount: 103, Currency: "EUR",
				Attempt: 1, CellID: "cell-1", CreatedAt: at, UpdatedAt: upd}},
		{"a declined authorization: no amount", issued{id: "t1", cell: 0, kind: cellpayv1.PaymentType_CARD_AUTHORIZATION, reason: "do_not_honor", payload: 1},
			cellside.Record{TransactionID: "t1", PartnerID: partner, FingerprintKeyID: cellside.RecoveredKeyID, State: cellside.StateDeclined,
				DeclineReason: "do_not_honor", PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION,
				Attempt: 1, CellID: "cell-0", CreatedAt: at, UpdatedAt: upd}},
		{"an approved capture, with its original", issued{id: "f0", cell: 2, kind: cellpayv1.PaymentType_CAPTURE, orig: "a0", approved: true, amount: 40, currency: "EUR", auth: "A-f0"},
			cellside.Record{TransactionID: "f0", PartnerID: partner, FingerprintKeyID: cellside.RecoveredKeyID, State: cellside.StateApproved,
				AuthCode: "A-f0", PaymentType: cellpayv1.PaymentType_CAPTURE, Amount: 40, Currency: "EUR",
				Attempt: 1, CellID: "cell-2", CreatedAt: at, UpdatedAt: upd, Original: "a0"}},
		{"an approved void: the authorization's amount", issued{id: "f1", cell: 2, kind: cellpayv1.PaymentType_VOID, orig: "a0", approved: true, amount: 103, currency: "EUR", auth: "A-f1"},
			cellside.Record{TransactionID: "f1", PartnerID: partner, FingerprintKeyID: cellside.RecoveredKeyID, State: cellside.StateApproved,
				AuthCode: "A-f1", PaymentType: cellpayv1.PaymentType_VOID, Amount: 103, Currency: "EUR",
				Attempt: 1, CellID: "cell-2", CreatedAt: at, UpdatedAt: upd, Original: "a0"}},
		{"a declined refund", issued{id: "f2", cell: 0, kind: cellpayv1.PaymentType_REFUND, orig: "a1", reason: "exceeds_captured"},
			cellside.Record{TransactionID: "f2", PartnerID: partner, FingerprintKeyID: cellside.RecoveredKeyID, State: cellside.StateDeclined,
				DeclineReason: "exceeds_captured", PaymentType: cellpayv1.PaymentType_REFUND,
				Attempt: 1, CellID: "cell-0", CreatedAt: at, UpdatedAt: upd, Original: "a1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := recoveredRecord(tt.e, now)
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("recoveredRecord:\n got %+v\nwant %+v", *got, tt.want)
			}
			if !got.Recovered() || !got.State.Terminal() {
				t.Errorf("not a final recovered record: %+v", *got)
			}
			if k := compareEffect(tt.e, got); k != effectAgrees {
				t.Errorf("the recovered record of an effect %s with it", k)
			}
		})
	}
}

// TestCompareEffect holds compareEffect, the model's copy of
// issuercheck.Compare, to the code's judgement on a table: the finding
// Compare gives for the same effect and record.
func TestCompareEffect(t *testing.T) {
	auth := issued{id: "a0", cell: 0, kind: cellpayv1.PaymentType_CARD_AUTHORIZATION, approved: true, amount: 100, currency: "EUR", auth: "A-a0"}
	declined := issued{id: "t1", cell: 0, kind: cellpayv1.PaymentType_CARD_AUTHORIZATION, reason: "do_not_honor"}
	capture := issued{id: "f0", cell: 0, kind: cellpayv1.PaymentType_CAPTURE, orig: "a0", approved: true, amount: 40, currency: "EUR", auth: "A-f0"}
	void := issued{id: "f1", cell: 0, kind: cellpayv1.PaymentType_VOID, orig: "a0", approved: true, amount: 100, currency: "EUR", auth: "A-f1"}
	rec := func(st cellside.State, kind cellpayv1.PaymentType, orig string, amount int64, currency, code string) *cellside.Record {
		return &cellside.Record{State: st, PaymentType: kind, Original: orig, Amount: amount, Currency: currency, AuthCode: code}
	}
	card := cellpayv1.PaymentType_CARD_AUTHORIZATION
	for _, tt := range []struct {
		name string
		e    issued
		r    *cellside.Record
		want effectKind
	}{
		{"no record", auth, nil, effectMissing},
		{"received", auth, rec(cellside.StateReceived, card, "", 100, "EUR", ""), effectUnresolved},
		{"deciding", auth, rec(cellside.StateDeciding, card, "", 100, "EUR", ""), effectUnresolved},
		{"sending", auth, rec(cellside.StateSending, card, "", 100, "EUR", ""), effectUnresolved},
		{"abandoned where the issuer applied it", auth, rec(cellside.StateAbandoned, card, "", 100, "EUR", ""), effectDiffers},
		{"failed where the issuer applied it", auth, rec(cellside.StateFailed, card, "", 100, "EUR", ""), effectDiffers},
		{"approved, the same", auth, rec(cellside.StateApproved, card, "", 100, "EUR", "A-a0"), effectAgrees},
		{"approved, another auth code", auth, rec(cellside.StateApproved, card, "", 100, "EUR", "A-x"), effectDiffers},
		{"approved, another amount", auth, rec(cellside.StateApproved, card, "", 101, "EUR", "A-a0"), effectDiffers},
		{"approved, another currency", auth, rec(cellside.StateApproved, card, "", 100, "GBP", "A-a0"), effectDiffers},
		{"declined where the issuer approved", auth, rec(cellside.StateDeclined, card, "", 100, "EUR", ""), effectDiffers},
		{"approved where the issuer declined", declined, rec(cellside.StateApproved, card, "", 101, "EUR", "A-t1"), effectDiffers},
		{"declined, any reason, any amount", declined, rec(cellside.StateDeclined, card, "", 104, "EUR", ""), effectAgrees},
		{"another kind", capture, rec(cellside.StateApproved, cellpayv1.PaymentType_REFUND, "a0", 40, "EUR", "A-f0"), effectDiffers},
		{"another original", capture, rec(cellside.StateApproved, cellpayv1.PaymentType_CAPTURE, "a1", 40, "EUR", "A-f0"), effectDiffers},
		{"a capture, the same", capture, rec(cellside.StateApproved, cellpayv1.PaymentType_CAPTURE, "a0", 40, "EUR", "A-f0"), effectAgrees},
		{"a void's amount is not compared", void, rec(cellside.StateApproved, cellpayv1.PaymentType_VOID, "a0", 0, "", "A-f1"), effectAgrees},
		{"a void's auth code is", void, rec(cellside.StateApproved, cellpayv1.PaymentType_VOID, "a0", 100, "EUR", "A-x"), effectDiffers},
	} {
		if got := compareEffect(tt.e, tt.r); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

// TestLossScripted walks the loss of a cell's last commits and its
// recovery (loss.go) through the real machines: an authorization lost
// whole is written back from the issuer's record, and a retry answered
// (from the directory's entry, which the loss did not touch); a capture
// lost whole is written back with its sum on its authorization, and a
// retry answered from it (cellside.MatchesRecovered), another amount
// ALREADY_EXISTS. A capture of a recovered authorization is held on its
// currency alone (the recovered record holds no market: the issuer's
// record does not carry one). One thing the model shows of the code as
// built, kept here so that a change to it is seen: a recovered decline
// of a follow-up answers a retry of another amount with its decline (the
// issuer's record of a decline holds no amount, so MatchesRecovered
// matches any), which breaks the model's rule of one answer per
// follow-up ID and payload.
func TestLossScripted(t *testing.T) {
	home := ranking("a0")[0]
	capture := func(amount int64) fuPayload {
		return fuPayload{kind: cellpayv1.PaymentType_CAPTURE, orig: "a0", amount: amount}
	}
	// start approves a0, with the store's images kept before and after
	// (the simulator keeps one after each step).
	start := func(m *model) {
		m.track = true
		m.snapshot() // image 0: empty
		m.submit(0, "a0", 0)
		m.drain()
		m.snapshot() // image 1: a0 approved
	}
	lose := func(m *model, to int) {
		m.loseCommitsTo(home, to)
		m.restart(home)
		m.recoverCell(home)
	}
	fuAnswer := func(t *testing.T, m *model, id string, n int) result {
		t.Helper()
		if as := m.fuAnswers[id]; len(as) > n {
			return as[n].res
		}
		t.Fatalf("%s: no answer %d: %v", id, n, m.fuAnswers[id])
		return result{}
	}
	runScripts(t, []scripted{
		{"an authorization lost whole: recovered; a retry answered; a capture of it approved", Rules{}, func(m *model) {
			start(m)
			lose(m, 0)
			m.submit(1, "a0", 0)
			m.drain()
			m.submit(1, "a0", 3)
			m.drain()
			m.followUp(0, "f0", capture(10))
			m.drain()
		}, "", func(t *testing.T, m *model) {
			r := m.cells[home].db["a0"]
			if r == nil || r.recovered == nil || r.state != approved || r.auth != "A-a0" {
				t.Fatalf("a0 in cell %d: %+v, want recovered approved", home, r)
			}
			if as := m.answers["a0"]; len(as) != 3 || as[1].res != as[0].res || as[2].res.status != "ALREADY_EXISTS" {
				t.Errorf("a0 answered %v", as)
			}
			if res := fuAnswer(t, m, "f0", 0); res.status != "APPROVED" {
				t.Errorf("a capture of a recovered authorization answered %v", res)
			}
			if err := m.effectsHeld(true); err != nil {
				t.Error(err)
			}
		}},
		{"a capture lost whole: recovered with its sum; a retry answered from it, another amount ALREADY_EXISTS", Rules{}, func(m *model) {
			start(m)
			m.followUp(0, "f0", capture(10))
			m.drain()
			m.snapshot() // image 2: f0 approved, a0 captured 10
			lose(m, 1)
			m.followUp(1, "f0", capture(10))
			m.drain()
			m.followUp(1, "f0", capture(11))
			m.drain()
		}, "", func(t *testing.T, m *model) {
			f := m.cells[home].fdb["f0"]
			if f == nil || !f.rec.Recovered() || f.rec.State != cellside.StateApproved || f.rec.Amount != 10 {
				t.Fatalf("f0 in cell %d: %+v, want recovered approved 10", home, f)
			}
			if l := m.cells[home].db["a0"].ledger; l.Captured != 10 {
				t.Errorf("a0's ledger %+v, want captured 10", l)
			}
			if res := fuAnswer(t, m, "f0", 1); res.status != "APPROVED" || res.auth != "A-f0" {
				t.Errorf("the retry answered %v", res)
			}
			if res := fuAnswer(t, m, "f0", 2); res.status != "ALREADY_EXISTS" {
				t.Errorf("another amount answered %v", res)
			}
			if err := m.effectsHeld(true); err != nil {
				t.Error(err)
			}
		}},
		{"a follow-up's decline lost whole: recovered; a retry of another amount answered its decline", Rules{}, func(m *model) {
			start(m)
			m.followUp(0, "f0", capture(13)) // a multiple of 13: declined do_not_honor
			m.drain()
			m.snapshot()
			lose(m, 1)
			m.followUp(1, "f0", capture(14))
			m.drain()
		}, "same follow-up ID, other payload, ALREADY_EXISTS", nil},
	})
}
