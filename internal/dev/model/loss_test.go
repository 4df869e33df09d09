package model

import (
	"maps"
	"reflect"
	"strings"
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
		{"a declined authorization: the amount asked", issued{id: "t1", cell: 0, kind: cellpayv1.PaymentType_CARD_AUTHORIZATION, reason: "do_not_honor", payload: 1, requested: 101, requestedCurrency: "EUR"},
			cellside.Record{TransactionID: "t1", PartnerID: partner, FingerprintKeyID: cellside.RecoveredKeyID, State: cellside.StateDeclined,
				DeclineReason: "do_not_honor", PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION, Amount: 101, Currency: "EUR",
				Attempt: 1, CellID: "cell-0", CreatedAt: at, UpdatedAt: upd}},
		{"an approved capture, with its original", issued{id: "f0", cell: 2, kind: cellpayv1.PaymentType_CAPTURE, orig: "a0", approved: true, amount: 40, currency: "EUR", auth: "A-f0"},
			cellside.Record{TransactionID: "f0", PartnerID: partner, FingerprintKeyID: cellside.RecoveredKeyID, State: cellside.StateApproved,
				AuthCode: "A-f0", PaymentType: cellpayv1.PaymentType_CAPTURE, Amount: 40, Currency: "EUR",
				Attempt: 1, CellID: "cell-2", CreatedAt: at, UpdatedAt: upd, Original: "a0"}},
		{"an approved void: the authorization's amount", issued{id: "f1", cell: 2, kind: cellpayv1.PaymentType_VOID, orig: "a0", approved: true, amount: 103, currency: "EUR", auth: "A-f1"},
			cellside.Record{TransactionID: "f1", PartnerID: partner, FingerprintKeyID: cellside.RecoveredKeyID, State: cellside.StateApproved,
				AuthCode: "A-f1", PaymentType: cellpayv1.PaymentType_VOID, Amount: 103, Currency: "EUR",
				Attempt: 1, CellID: "cell-2", CreatedAt: at, UpdatedAt: upd, Original: "a0"}},
		{"a declined refund", issued{id: "f2", cell: 0, kind: cellpayv1.PaymentType_REFUND, orig: "a1", reason: "exceeds_captured", requested: 30, requestedCurrency: "EUR"},
			cellside.Record{TransactionID: "f2", PartnerID: partner, FingerprintKeyID: cellside.RecoveredKeyID, State: cellside.StateDeclined,
				DeclineReason: "exceeds_captured", PaymentType: cellpayv1.PaymentType_REFUND, Amount: 30, Currency: "EUR",
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
		{"received where the issuer applied it: behind", auth, rec(cellside.StateReceived, card, "", 100, "EUR", ""), effectBehind},
		{"deciding", auth, rec(cellside.StateDeciding, card, "", 100, "EUR", ""), effectUnresolved},
		{"sending", auth, rec(cellside.StateSending, card, "", 100, "EUR", ""), effectUnresolved},
		{"abandoned where the issuer applied it: differs (Check asks the directory)", auth, rec(cellside.StateAbandoned, card, "", 100, "EUR", ""), effectDiffers},
		{"abandoned where the issuer declined it: differs", declined, rec(cellside.StateAbandoned, card, "", 101, "EUR", ""), effectDiffers},
		{"behind, whatever its amount (not compared)", auth, rec(cellside.StateReceived, card, "", 104, "GBP", ""), effectBehind},
		{"a capture received: behind (Compare alone; no follow-up is ever received)", capture, rec(cellside.StateReceived, cellpayv1.PaymentType_CAPTURE, "a0", 40, "EUR", ""), effectBehind},
		{"a capture abandoned: differs", capture, rec(cellside.StateAbandoned, cellpayv1.PaymentType_CAPTURE, "a0", 40, "EUR", ""), effectDiffers},
		{"abandoned, another kind: differs", capture, rec(cellside.StateAbandoned, cellpayv1.PaymentType_REFUND, "a0", 40, "EUR", ""), effectDiffers},
		{"received, another original: differs first", capture, rec(cellside.StateReceived, cellpayv1.PaymentType_CAPTURE, "a1", 40, "EUR", ""), effectDiffers},
		{"a capture received as an authorization: differs first", capture, rec(cellside.StateReceived, card, "", 40, "EUR", ""), effectDiffers},
		{"a follow-up's ID abandoned as a payment: differs", capture, rec(cellside.StateAbandoned, card, "", 100, "EUR", ""), effectDiffers},
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

// TestJudgeEffect holds judgeEffect, the model's copy of
// issuercheck.Check's finding with an Owner, to the code's on a table:
// Compare's finding, and an abandoned record's Differs asked of the
// directory's owner of its key, Elsewhere for another cell, Behind for
// this cell when the record is a payment's (no original), in Check's
// order (after Compare's payment type and original: a follow-up's effect
// on a payment's abandoned record under this cell's entry is Behind too);
// with no directory (Rules.NoDirectory, Check with no Owner) Compare's
// alone.
func TestJudgeEffect(t *testing.T) {
	const self, other = 1, 2
	card, capture := cellpayv1.PaymentType_CARD_AUTHORIZATION, cellpayv1.PaymentType_CAPTURE
	auth := issued{id: "x", cell: self, kind: card, approved: true, amount: 100, currency: "EUR", auth: "A-x"}
	capt := issued{id: "x", cell: self, kind: capture, orig: "a0", approved: true, amount: 40, currency: "EUR", auth: "A-x"}
	none := -1
	for _, tt := range []struct {
		name    string
		rules   Rules
		e       issued
		st      cellside.State
		fu      bool // the record a follow-up's (a capture of a0), else a payment's
		owner   int  // the directory's owner of x; none: no entry
		fuEntry bool // the entry a follow-up's, else a payment's
		want    effectKind
	}{
		{"a payment abandoned under this cell's entry: behind", Rules{}, auth, cellside.StateAbandoned, false, self, false, effectBehind},
		{"a payment abandoned under another cell's entry: elsewhere", Rules{}, auth, cellside.StateAbandoned, false, other, false, effectElsewhere},
		{"a payment abandoned, no entry: differs", Rules{}, auth, cellside.StateAbandoned, false, none, false, effectDiffers},
		{"a payment abandoned, no directory: differs", Rules{NoDirectory: true}, auth, cellside.StateAbandoned, false, self, false, effectDiffers},
		{"a payment abandoned under this cell's follow-up's entry (one key space): behind", Rules{}, auth, cellside.StateAbandoned, false, self, true, effectBehind},
		{"a follow-up abandoned under this cell's entry: differs", Rules{}, capt, cellside.StateAbandoned, true, self, true, effectDiffers},
		{"a follow-up abandoned under another cell's entry: elsewhere", Rules{}, capt, cellside.StateAbandoned, true, other, true, effectElsewhere},
		{"a follow-up's effect on a payment abandoned under this cell's entry: behind (Check's order)", Rules{}, capt, cellside.StateAbandoned, false, self, false, effectBehind},
		{"a payment received under another cell's entry: behind (Compare's)", Rules{}, auth, cellside.StateReceived, false, other, false, effectBehind},
		{"a payment approved under another cell's entry: agrees", Rules{}, auth, cellside.StateApproved, false, other, false, effectAgrees},
		{"a payment sending under another cell's entry: unresolved", Rules{}, auth, cellside.StateSending, false, other, false, effectUnresolved},
		{"a payment failed under another cell's entry: differs", Rules{}, auth, cellside.StateFailed, false, other, false, effectDiffers},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := newModel(tt.rules)
			if tt.fu {
				m.cells[self].fdb["x"] = &fuRecord{p: fuPayload{kind: capture, orig: "a0", amount: 40}, rec: &cellside.Record{
					TransactionID: "x", PartnerID: partner, State: tt.st, PaymentType: capture, Original: "a0", Amount: 40, Currency: "EUR"}}
			} else {
				m.cells[self].db["x"] = &record{state: state(tt.st), auth: map[bool]string{true: "A-x"}[tt.st == cellside.StateApproved]}
			}
			switch {
			case tt.owner == none:
			case tt.fuEntry:
				m.fdir["x"] = &fuEntry{rev: 1, owner: tt.owner, state: entryFinal}
			default:
				m.dir["x"] = &entry{rev: 1, owner: tt.owner, state: entryFinal}
			}
			if got := m.judgeEffect(self, tt.e, m.recordOf(self, "x")); got != tt.want {
				t.Errorf("%s, want %s", got, tt.want)
			}
		})
	}
}

// TestCaughtUpRecord holds caughtUpRecord, the model's copy of
// issuercheck.CaughtUp, to the code's: for each effect and the record
// Check found behind it (received, or a payment's abandoned under the
// cell's own entry; store.CatchUp writes a payment's only), the record CaughtUp writes over it, field by
// field as its code sets them (the state, the authorization code and the
// decline reason the issuer's, updated now; every other field the
// record's, its fingerprint, payload and amount included), and Compare
// then finds it agrees. A change to CaughtUp must change this table, and
// the copy.
func TestCaughtUpRecord(t *testing.T) {
	now := modelTime.Add(time.Hour + 1500*time.Nanosecond) // truncated to the microsecond
	upd := now.UTC().Truncate(time.Microsecond)
	fp := fingerprint("a0", 3)
	behind := func(st cellside.State, kind cellpayv1.PaymentType, orig string, amount int64, code, reason string) cellside.Record {
		return cellside.Record{TransactionID: "x", PartnerID: partner, Fingerprint: fp, FingerprintKeyID: "k1", State: st,
			AuthCode: code, DeclineReason: reason, PaymentType: kind, Original: orig, Market: "GB", Amount: amount, Currency: "EUR",
			SettlementAmount: amount, SettlementCurrency: "EUR", RiskAmount: amount, Attempt: 2, CellID: "cell-1",
			CreatedAt: modelTime, UpdatedAt: modelTime}
	}
	card := cellpayv1.PaymentType_CARD_AUTHORIZATION
	for _, tt := range []struct {
		name string
		e    issued
		r    cellside.Record
		want func(r cellside.Record) cellside.Record
	}{
		{"an authorization received, approved by the issuer",
			issued{id: "x", cell: 1, kind: card, approved: true, amount: 103, currency: "EUR", auth: "A-x"},
			behind(cellside.StateReceived, card, "", 103, "", ""),
			func(r cellside.Record) cellside.Record {
				r.State, r.AuthCode, r.UpdatedAt = cellside.StateApproved, "A-x", upd
				return r
			}},
		{"an authorization abandoned, declined by the issuer",
			issued{id: "x", cell: 1, kind: card, reason: "do_not_honor"},
			behind(cellside.StateAbandoned, card, "", 104, "", ""),
			func(r cellside.Record) cellside.Record {
				r.State, r.DeclineReason, r.UpdatedAt = cellside.StateDeclined, "do_not_honor", upd
				return r
			}},
		{"an abandoned record's leftover reason and code replaced",
			issued{id: "x", cell: 1, kind: card, approved: true, amount: 103, currency: "EUR", auth: "A-x"},
			behind(cellside.StateAbandoned, card, "", 103, "stale", "caller_gone"),
			func(r cellside.Record) cellside.Record {
				r.State, r.AuthCode, r.DeclineReason, r.UpdatedAt = cellside.StateApproved, "A-x", "", upd
				return r
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.r
			// Behind: received (Compare), or a payment's abandoned, which
			// Check finds behind under this cell's own entry.
			if k := compareEffect(tt.e, &r); k != effectBehind && (k != effectDiffers || r.State != cellside.StateAbandoned || r.Original != "") {
				t.Fatalf("the table's record is %s, not behind", k)
			}
			got := caughtUpRecord(tt.e, &r, now)
			if want := tt.want(tt.r); !reflect.DeepEqual(*got, want) {
				t.Errorf("caughtUpRecord:\n got %+v\nwant %+v", *got, want)
			}
			if !reflect.DeepEqual(r, tt.r) {
				t.Errorf("caughtUpRecord changed the record it was given: %+v", r)
			}
			if got.Recovered() || !got.State.Terminal() {
				t.Errorf("not a final record of its own payload: %+v", *got)
			}
			if k := compareEffect(tt.e, got); k != effectAgrees {
				t.Errorf("the caught-up record of an effect %s with it", k)
			}
		})
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
// record does not carry one). A payment the copy holds received is
// abandoned at the start and caught up (behind under its own entry); one
// abandoned under another cell's entry is held elsewhere, not written; an
// abandoned follow-up is never caught up (the effect not held: for a
// person). A follow-up the copy holds sending is resolved by the start's
// reconciler round before the check, so that a later one lost whole is
// recorded over no hold. One thing the model shows of the code as
// built, kept here so that a change to it is seen: a recovered decline
// of a follow-up answers a retry of another amount with its decline (the
// issuer's record of a decline holds no amount, so MatchesRecovered
// matches any), which breaks the model's rule of one answer per
// follow-up ID and payload.
func TestLossScripted(t *testing.T) {
	home := ranking("a0")[0]
	other := ranking("a0")[1]
	capture := func(amount int64) fuPayload {
		return fuPayload{kind: cellpayv1.PaymentType_CAPTURE, orig: "a0", amount: amount}
	}
	refund := func(amount int64) fuPayload {
		return fuPayload{kind: cellpayv1.PaymentType_REFUND, orig: "a0", amount: amount}
	}
	// wantLogged: the trace holds each of lines' parts, in order.
	wantLogged := func(t *testing.T, m *model, parts ...string) {
		t.Helper()
		n := 0
		for _, l := range m.log {
			if n < len(parts) && strings.Contains(l, parts[n]) {
				n++
			}
		}
		if n < len(parts) {
			t.Errorf("the trace lacks %q (in order)", parts[n])
		}
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
	// lose loses home's commits back to image to, and restarts it: the
	// restart recovers before the cell serves (-recover-at-start).
	lose := func(m *model, to int) {
		m.loseCommitsTo(home, to)
		m.restart(home)
		if m.lost[home] || !m.cells[home].up {
			panic("the restart did not recover")
		}
	}
	// behindAt inserts before home's last image a copy of it in which
	// edit has set some records back (as a copy behind its primary holds
	// them), and returns its index.
	behindAt := func(m *model, edit func(img storeImage)) int {
		imgs := m.images[home]
		last := imgs[len(imgs)-1]
		img := storeImage{db: maps.Clone(last.db), fdb: maps.Clone(last.fdb)}
		edit(img)
		m.images[home] = append(imgs[:len(imgs)-1:len(imgs)-1], img, last)
		return len(imgs) - 1
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
		{"a payment received in the copy, approved at the issuer: abandoned at the start, behind under its own entry, caught up, its payload kept; a retry answered", Rules{LossAnyPoint: true}, func(m *model) {
			start(m)
			to := behindAt(m, func(img storeImage) {
				r := img.db["a0"]
				r.state, r.auth = received, "" // its sending write lost
				img.db["a0"] = r
			})
			lose(m, to)
			m.submit(1, "a0", 0)
			m.drain()
		}, "", func(t *testing.T, m *model) {
			r := m.cells[home].db["a0"]
			if r == nil || r.recovered != nil || r.state != approved || r.auth != "A-a0" || r.payload != 0 {
				t.Fatalf("a0 in cell %d: %+v, want caught up approved, payload 0, not recovered", home, r)
			}
			wantLogged(t, m, "a0 abandoned->approved")
			if as := m.answers["a0"]; len(as) != 2 || as[1].res != as[0].res {
				t.Errorf("a0 answered %v", as)
			}
			if err := m.effectsHeld(true); err != nil {
				t.Error(err)
			}
		}},
		{"a payment abandoned in the copy under another cell's entry, which holds it: held elsewhere, not written", Rules{}, func(m *model) {
			start(m)
			to := behindAt(m, func(img storeImage) {
				r := img.db["a0"]
				r.state, r.auth = abandoned, "" // a released cell's record
				img.db["a0"] = r
			})
			// Another cell took a0 over and holds the issuer's outcome
			// (as after a release): its record and its entry.
			a := *m.cells[home].db["a0"]
			m.cells[other].db["a0"] = &a
			m.dir["a0"].owner = other
			lose(m, to)
		}, "", func(t *testing.T, m *model) {
			if r := m.cells[home].db["a0"]; r == nil || r.state != abandoned || r.auth != "" {
				t.Fatalf("a0 in cell %d: %+v, want abandoned, not written", home, r)
			}
			wantLogged(t, m, "a0 (abandoned) held elsewhere")
			e := m.journal[0]
			if k := m.judgeEffect(home, e, m.recordOf(home, "a0")); k != effectElsewhere {
				t.Errorf("a0 in cell %d is %s, want elsewhere", home, k)
			}
			if err := m.effectsHeld(true); err != nil {
				t.Error(err)
			}
		}},
		{"a capture abandoned in the copy under its own entry: not caught up (a follow-up's), for a person", Rules{}, func(m *model) {
			start(m)
			m.followUp(0, "f0", capture(10))
			m.drain()
			m.snapshot() // image 2: f0 approved, a0 captured 10
			to := behindAt(m, func(img storeImage) {
				f := img.fdb["f0"]
				rec := *f.rec
				rec.State, rec.AuthCode = cellside.StateAbandoned, "" // its hold released
				f.rec = &rec
				img.fdb["f0"] = f
				a := img.db["a0"]
				a.ledger.Captured = 0
				img.db["a0"] = a
			})
			lose(m, to)
		}, "every issuer effect is held by the cell that sent it: f0", func(t *testing.T, m *model) {
			f := m.cells[home].fdb["f0"]
			if f == nil || f.rec.State != cellside.StateAbandoned || f.rec.AuthCode != "" {
				t.Fatalf("f0 in cell %d: %+v, want abandoned, not written", home, f)
			}
			if l := m.cells[home].db["a0"].ledger; l.Captured != 0 {
				t.Errorf("a0's ledger %+v, want captured 0: no sums moved", l)
			}
			if k := m.judgeEffect(home, m.journal[1], f.rec); k != effectDiffers {
				t.Errorf("f0 in cell %d is %s, want differs", home, k)
			}
		}},
		{"a capture sending in the copy, a refund of it lost whole: the start's reconciler round resolves the capture, then the check records the refund", Rules{}, func(m *model) {
			start(m)
			m.followUp(0, "f0", capture(10))
			m.drain()
			m.followUp(0, "f1", refund(10))
			m.drain()
			m.snapshot() // image 2: f0 and f1 approved, a0 captured 10, refunded 10
			to := behindAt(m, func(img storeImage) {
				f := img.fdb["f0"]
				rec := *f.rec
				rec.State, rec.AuthCode = cellside.StateSending, "" // its settle lost
				f.rec = &rec
				img.fdb["f0"] = f
				delete(img.fdb, "f1")
				a := img.db["a0"]
				a.ledger.Captured, a.ledger.HeldCapture, a.ledger.Refunded = 0, 10, 0
				img.db["a0"] = a
			})
			lose(m, to)
		}, "", func(t *testing.T, m *model) {
			if f := m.cells[home].fdb["f0"]; f == nil || f.rec.Recovered() || f.rec.State != cellside.StateApproved {
				t.Fatalf("f0 in cell %d: %+v, want resolved approved by the reconciler", home, f)
			}
			if f := m.cells[home].fdb["f1"]; f == nil || !f.rec.Recovered() || f.rec.State != cellside.StateApproved {
				t.Fatalf("f1 in cell %d: %+v, want recovered approved", home, f)
			}
			if l := m.cells[home].db["a0"].ledger; l.Captured != 10 || l.Refunded != 10 || l.HeldCapture != 0 {
				t.Errorf("a0's ledger %+v, want captured 10, refunded 10", l)
			}
			wantLogged(t, m, "follow-up f0 -> approved", "f1 approved]")
			if err := m.effectsHeld(true); err != nil {
				t.Error(err)
			}
		}},
		{"a retry answered from a recovered record leaves its entry unfiled, the cell's", Rules{}, func(m *model) {
			start(m)
			e := m.dir["a0"]
			e.state, e.res = entryOwned, result{} // its Finalize lost
			lose(m, 0)
			m.submit(1, "a0", 0)
			m.drain()
		}, "", func(t *testing.T, m *model) {
			if r := m.cells[home].db["a0"]; r == nil || r.recovered == nil {
				t.Fatalf("a0 in cell %d: %+v, want recovered", home, r)
			}
			if as := m.answers["a0"]; len(as) != 2 || as[1].res != as[0].res {
				t.Errorf("a0 answered %v", as)
			}
			if e := m.dir["a0"]; e.state == entryFinal || e.owner != home {
				t.Errorf("a0's entry %+v, want cell %d's, not final", *e, home)
			}
		}},
		{"a follow-up's decline lost whole: recovered with the amount asked; a retry of another amount is refused", Rules{}, func(m *model) {
			start(m)
			m.followUp(0, "f0", capture(13)) // a multiple of 13: declined do_not_honor
			m.drain()
			m.snapshot()
			lose(m, 1)
			m.followUp(1, "f0", capture(14))
			m.drain()
		}, "", func(t *testing.T, m *model) {
			if r := fuAnswer(t, m, "f0", 1); r.status != "ALREADY_EXISTS" {
				t.Errorf("the retry of another amount: %+v, want ALREADY_EXISTS", r)
			}
		}},
	})
}
