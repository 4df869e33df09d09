package model

import (
	"fmt"
	"testing"

	"github.com/cellpay/cellpay/internal/followup"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// TestReuseScripted replays the reuse of one kind's transaction ID by the
// other (reuse.go) where each cell decides it: a follow-up under its
// original's own ID (the original's row), under another cell's payment
// (the payment's entry), a payment under a follow-up's ID (the
// follow-up's entry, or its row without the directory); each retried at
// the other replica and after a crash, refused ALREADY_EXISTS every time
// with nothing applied. KindsApart, which keeps the kinds' IDs apart,
// must be caught; and the gap the simulator found (Rules.ClaimAnyOwnEntry,
// testdata/sim/claim-any-own-entry.txt) is walked through step by step,
// closed and as it was.
func TestReuseScripted(t *testing.T) {
	home := ranking("a0")[0]
	capture := func(orig string, amount int64) fuPayload {
		return fuPayload{kind: cellpayv1.PaymentType_CAPTURE, orig: orig, amount: amount}
	}
	void := fuPayload{kind: cellpayv1.PaymentType_VOID, orig: "a0"}
	other := idAt(ranking("a0")[1]) // a payment whose home is not a0's
	mine := idAt(home)              // an ID whose home is a0's
	approve := func(m *model, id string) {
		m.submit(0, id, 0)
		m.drain()
		if a := m.answers[id]; len(a) != 1 || a[0].res.status != "APPROVED" {
			panic(fmt.Sprintf("%s answered %v", id, a))
		}
	}
	theGap := func(taken bool) func(m *model) {
		return func(m *model) {
			approve(m, "a0")
			m.submit(0, mine, 0)
			m.deliverKind(mProcess) // claimed in a0's cell, the insert queued
			m.crash(home)           // the insert lost; the call moves on
			m.restart(home)
			m.followUp(1, mine, capture("a0", 10))
			m.deliverKind(mFollowUp) // the claim: this cell's entry
			if taken {
				m.deliverKind(mFuHold)
				m.deliverKind(mAdjustReq)
			}
			m.drain() // the payment's next attempt
		}
	}
	runScripts(t, []scripted{
		{"a follow-up under its original's own ID: ALREADY_EXISTS from the original's row", Rules{}, func(m *model) {
			approve(m, "a0")
			m.followUp(0, "a0", capture("a0", 10))
			m.drain()
			m.followUp(1, "a0", capture("a0", 10)) // the retry at the other access point
			m.crash(home)
			m.restart(home)
			m.followUp(0, "a0", void) // and another payload
			m.drain()
		}, "", func(t *testing.T, m *model) {
			wantReuseRefused(t, m, "a0", 3)
			wantNothingApplied(t, m, "a0")
		}},
		{"a follow-up under another cell's payment's ID: ALREADY_EXISTS from its entry", Rules{}, func(m *model) {
			approve(m, "a0")
			approve(m, other)
			m.followUp(0, other, capture("a0", 10))
			m.drain()
			m.followUp(1, other, capture("a0", 10))
			m.drain()
		}, "", func(t *testing.T, m *model) {
			wantReuseRefused(t, m, other, 2)
			wantNothingApplied(t, m, "a0")
			if m.covered[covReuseFollowUp] == 0 {
				t.Error("no refusal counted")
			}
		}},
		{"a payment under a follow-up's ID: ALREADY_EXISTS from its entry, in its cell and another", Rules{}, func(m *model) {
			approve(m, "a0")
			m.followUp(0, other, capture("a0", 10)) // other's home is not a0's: its entry is a0's cell's
			m.drain()
			m.submit(1, other, 0) // to other's home
			m.drain()
			m.submitDrained(0, other, 3, ranking(other)[0]) // to the next cell
			m.drain()
			m.submit(0, mine, 0) // not the follow-up's: a0's cell, free
			m.drain()
		}, "", func(t *testing.T, m *model) {
			if a := m.fuAnswers[other]; len(a) != 1 || a[0].res.status != "APPROVED" {
				t.Fatalf("the follow-up answered %v", a)
			}
			for _, a := range m.answers[other] {
				if a.res.status != "ALREADY_EXISTS" {
					t.Errorf("the payment under the follow-up's ID answered %v", a.res)
				}
			}
			if m.effects[other] != 1 || m.auths[other] != nil || m.covered[covReusePayment] != 2 {
				t.Errorf("issuer effects %d, authorization %v, refusals counted %d", m.effects[other], m.auths[other], m.covered[covReusePayment])
			}
		}},
		{"without the directory: a payment under a follow-up's ID meets its row", Rules{NoDirectory: true}, func(m *model) {
			approve(m, "a0")
			m.followUp(0, mine, capture("a0", 10))
			m.drain()
			m.submit(0, mine, 0) // mine's home is a0's cell, which holds the follow-up
			m.drain()
		}, "", func(t *testing.T, m *model) {
			if a := m.answers[mine]; len(a) != 1 || a[0].res.status != "ALREADY_EXISTS" {
				t.Errorf("the payment answered %v", a)
			}
		}},
		{"kinds apart: a follow-up under its original's own ID is applied", Rules{KindsApart: true}, func(m *model) {
			approve(m, "a0")
			m.followUp(0, "a0", capture("a0", 10))
			m.drain()
		}, "one transaction per ID", nil},
		// The gap the simulator found: payment X claims X in a0's cell,
		// whose insert waits for its commit; the cell crashes (the insert
		// lost) and the GTR moves the call on; the follow-up under X's ID
		// reaches a0's cell, whose entry of X is its own. Taken as the
		// follow-up's (Rules.ClaimAnyOwnEntry, the code as it was), the
		// capture is held and sent, and the call's next attempt takes the
		// entry over (an earlier attempt of its own call, never confirmed)
		// and is sent too, answered with the capture's outcome. As built,
		// the capture is refused ALREADY_EXISTS and nothing is applied.
		{"a follow-up meets its cell's entry of a payment not recorded there: ALREADY_EXISTS", Rules{GroupCommit: true, AsyncInsert: true}, theGap(false), "",
			func(t *testing.T, m *model) {
				wantReuseRefused(t, m, mine, 1)
				wantNothingApplied(t, m, "a0")
			}},
		{"the gap as it was: the follow-up takes its cell's entry of the payment", Rules{GroupCommit: true, AsyncInsert: true, ClaimAnyOwnEntry: true}, theGap(true),
			"one transaction per ID", nil},
	})
}

// idAt returns an ID whose natural home is cell c.
func idAt(c int) string {
	for i := range 100 {
		if id := fmt.Sprintf("x%d", i); ranking(id)[0] == c {
			return id
		}
	}
	panic("no ID")
}

// wantReuseRefused: id's follow-up calls, n of them, were all answered
// ALREADY_EXISTS.
func wantReuseRefused(t *testing.T, m *model, id string, n int) {
	t.Helper()
	as := m.fuAnswers[id]
	if len(as) != n {
		t.Errorf("%s: %d follow-up answers, want %d: %v", id, len(as), n, as)
	}
	for _, a := range as {
		if a.res.status != "ALREADY_EXISTS" {
			t.Errorf("%s: follow-up %v answered %v", id, a.p, a.res)
		}
	}
}

// wantNothingApplied: no follow-up was recorded, no adjustment applied,
// and orig's ledger is untouched, in its cell and at the issuer.
func wantNothingApplied(t *testing.T, m *model, orig string) {
	t.Helper()
	for i, cl := range m.cells {
		if len(cl.fdb) > 0 {
			t.Errorf("cell %d recorded follow-ups: %v", i, cl.fdb)
		}
		if rec := cl.db[orig]; rec != nil && rec.ledger.Captured+rec.ledger.HeldCapture+rec.ledger.Refunded+rec.ledger.HeldRefund != 0 {
			t.Errorf("%s's ledger in cell %d: %+v", orig, i, rec.ledger)
		}
	}
	if len(m.applied) > 0 || *m.auths[orig] != (followup.Ledger{Authorized: amountOf(0)}) {
		t.Errorf("the issuer applied %v; its ledger of %s %+v", m.applied, orig, *m.auths[orig])
	}
}
