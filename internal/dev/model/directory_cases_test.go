package model

import "testing"

// TestDirectory replays the ways one ID got two answers before the
// transaction directory (the former TestKnownGaps: cross-cell ID reuse,
// FAILED issuer_not_reached contradicted by another call, and a drained
// home), and checks that every invariant now holds on them; then one
// script per directory knob, showing what the broken rule costs.
func TestDirectory(t *testing.T) {
	r := ranking("t0")
	home, next, last := r[0], r[1], r[2]
	// awayThenOther completes payload 2 of t0 away from its home (down),
	// then sends payload 0 to the restarted home through gtr, evicting
	// the remembered cell first if evict.
	awayThenOther := func(gtr int, evict bool) func(m *model) {
		return func(m *model) {
			m.crash(home)
			m.submit(0, "t0", 2)
			m.drain() // home down: re-routed, declined before the PNR on next
			if evict {
				for _, id := range []string{"t1", "t3"} { // two more re-routed IDs
					m.crash(ranking(id)[0])
					m.submit(0, id, 2)
					m.drain()
					m.restart(ranking(id)[0])
				}
			}
			m.restart(home)
			m.submit(gtr, "t0", 0) // another payload
		}
	}
	alreadyExists := func(t *testing.T, m *model) {
		if a := m.calls[len(m.calls)-1].answer; a.status != "ALREADY_EXISTS" {
			t.Errorf("other payload answered %v", a)
		}
	}
	// failedAtHome leaves t0 FAILED issuer_not_reached at home, its entry
	// final, with home down again and next up.
	failedBeforePNR := func(m *model) {
		m.crash(next)
		m.crash(last)
		m.submit(0, "t0", 0)
		m.deliverKind(mProcess)
		m.deliverKind(mMarkSend) // home: sending, PNR on its way
		m.crash(home)            // before the GTR saw the PNR: re-routed
		m.drain()                // next, last down: UNAVAILABLE
		m.restart(home)
		m.reconcile(home) // NOT_FOUND, nothing of call 0 can arrive: FAILED, in the entry first
		m.crash(home)
		m.restart(next)
	}
	answered := func(n int, status string, cell int) func(t *testing.T, m *model) {
		return func(t *testing.T, m *model) {
			t.Helper()
			c := m.calls[n]
			if c.answer.status != status || (cell >= 0 && c.cell != cell) {
				t.Errorf("call %d answered %v on cell %d, want %s on cell %d", n, c.answer, c.cell, status, cell)
			}
		}
	}
	runScripts(t, []scripted{
		// Gap 1: same ID, other payload, after the first completed away.
		{"other payload at the restarted home, same replica (remembers)", Rules{}, awayThenOther(0, false), "", alreadyExists},
		{"other payload at the restarted home, other replica", Rules{}, awayThenOther(1, false), "", alreadyExists},
		{"other payload at the restarted home, same replica, cache evicted", Rules{}, awayThenOther(0, true), "", alreadyExists},

		// Gap 2: FAILED issuer_not_reached, then another call elsewhere.
		{"FAILED before the PNR, then a retry while home is down: the entry answers FAILED", Rules{}, func(m *model) {
			failedBeforePNR(m)
			m.submit(1, "t0", 0) // home down: next reads the final entry
			m.drain()
		}, "", func(t *testing.T, m *model) {
			answered(1, "FAILED", next)(t, m)
			wantState(t, m, next, "t0", "")
		}},
		{"FAILED after Proceed, then a replay while home is down: the entry answers FAILED", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.deliverKind(mPNR)
			m.crash(home) // Proceed sent: PENDING, never re-routed
			m.drain()
			m.restart(home)
			m.reconcile(home) // FAILED issuer_not_reached
			m.crash(home)
			m.submit(1, "t0", 0)
			m.drain()
		}, "", answered(1, "FAILED", next)},
		{"a retry before the reconciler, home down: redirected to the owner, UNAVAILABLE", Rules{}, func(m *model) {
			m.crash(next)
			m.crash(last)
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.crash(home)
			m.drain() // UNAVAILABLE; the entry is home's, owned by call 0
			m.restart(next)
			m.submit(1, "t0", 0) // home down, next: owned by home for another call
			m.drain()
		}, "", func(t *testing.T, m *model) {
			answered(1, "UNAVAILABLE", -1)(t, m)
			wantState(t, m, next, "t0", "")
			wantState(t, m, home, "t0", failed) // healed: home's reconciler
		}},
		{"lost issuer request on a re-route target, then a replay at home: the entry answers FAILED", Rules{}, func(m *model) {
			m.crash(home)
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess) // home down: re-routed to next
			m.deliverKind(mProcess) // next creates the entry
			m.deliverKind(mMarkSend)
			m.deliverKind(mPNR)
			m.deliverKind(mProceed)
			m.loseKind(mIssuerReq)
			m.issuerTimeout(next, attemptKey{0, 1})
			m.drain()         // PENDING
			m.reconcile(next) // FAILED issuer_not_reached, in the entry first
			m.restart(home)
			m.submit(1, "t0", 0) // another replica, which does not remember next
			m.drain()
		}, "", func(t *testing.T, m *model) {
			answered(1, "FAILED", home)(t, m)
			wantState(t, m, home, "t0", "")
			if m.effects["t0"] != 0 {
				t.Errorf("effects %d", m.effects["t0"])
			}
		}},
		{"lost issuer request on a re-route target, replay at home before the reconciler: redirected to the owner", Rules{}, func(m *model) {
			m.crash(home)
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.deliverKind(mPNR)
			m.deliverKind(mProceed)
			m.loseKind(mIssuerReq)
			m.issuerTimeout(next, attemptKey{0, 1})
			m.drain()
			m.restart(home)
			m.submit(1, "t0", 0) // home: owned by next for call 0: redirected, PENDING from next's record
			m.drain()
		}, "", func(t *testing.T, m *model) {
			answered(1, "PENDING", next)(t, m)
			wantState(t, m, next, "t0", failed)
		}},

		// Gap 3: home first, then away (drained).
		{"drained home, then a replay: redirected to the owner", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.deliverKind(mPNR)
			m.deliverKind(mProceed)
			m.deliverKind(mIssuerReq)
			m.deliverKind(mIssuerResp)
			m.loseKind(mDirUpdate) // the entry still says owned by home
			m.drain()
			m.submitDrained(1, "t0", 0, home) // next: owned by home, re-routable to it
			m.drain()
		}, "", func(t *testing.T, m *model) {
			answered(1, "APPROVED", home)(t, m)
			wantState(t, m, next, "t0", "")
		}},
		{"drained home, then another payload: ALREADY_EXISTS", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.drain()
			m.submitDrained(1, "t0", 3, home)
			m.drain()
		}, "", alreadyExists},

		// The directory's own paths.
		{"the reconciler finds the entry taken over: abandoned, then reclaimed by the next call", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.crash(home)           // PNR lost: re-routed to next
			m.deliverKind(mProcess) // next takes over (an earlier attempt of the same call)
			m.deadline(m.calls[0])  // DEADLINE_EXCEEDED: next's stream cancelled
			m.deliverKind(mCancel)
			m.deliverKind(mMarkSend) // next does not go on to sending, and steps back: abandoned, in the entry too
			m.drain()
			m.restart(home)
			m.reconcile(home) // not reached, but the entry is next's: abandoned
			if s := m.cells[home].db["t0"].state; s != abandoned {
				panic("reconciled to " + s)
			}
			m.submit(1, "t0", 0) // home: abandoned entry, taken back; the record reclaimed
			m.drain()
		}, "", func(t *testing.T, m *model) {
			answered(1, "APPROVED", home)(t, m)
			wantState(t, m, next, "t0", abandoned)
		}},
		{"PENDING from a leftover sending record pins the entry: the leftover's call no longer takes it over", Rules{}, noPinScript, "", func(t *testing.T, m *model) {
			answered(1, "PENDING", home)(t, m)
			wantState(t, m, next, "t0", "") // re-routable to home: nothing inserted
			wantState(t, m, home, "t0", failed)
		}},

		// One per knob: the invariants each broken rule breaks.
		{"no directory: other payload at the restarted home", Rules{NoDirectory: true}, awayThenOther(1, false), "same ID, other payload", nil},
		// (The next two close nothing at the issuer, as before the close
		// existed: with it, the request that lands later is refused.)
		{"no directory: FAILED, then a retry while home is down", Rules{NoDirectory: true, ReconcilerNoClose: true}, func(m *model) {
			failedBeforePNR(m)
			m.submit(1, "t0", 0) // next approves
			m.drain()
		}, "issuer_not_reached is final", nil},
		{"no directory: drained home, then another payload", Rules{NoDirectory: true}, func(m *model) {
			m.submit(0, "t0", 0)
			m.drain()
			m.submitDrained(1, "t0", 3, home)
			m.drain()
		}, "same ID, other payload", nil},
		{"reconciler without the claim: FAILED, then a takeover of the abandoned entry", Rules{ReconcilerNoClaim: true, ReconcilerNoClose: true}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.crash(home)
			m.deliverKind(mProcess) // next takes over
			m.deadline(m.calls[0])
			m.deliverKind(mCancel)
			m.deliverKind(mMarkSend) // next steps back: the entry is abandoned
			m.drain()
			m.restart(home)
			m.reconcile(home) // FAILED, though the entry is next's
			m.crash(home)
			m.crash(next)
			m.submit(1, "t0", 0) // last takes the abandoned entry over and approves
			m.drain()
		}, "issuer_not_reached is final", nil},
		{"takeover of any call: the earlier call's request lands after the FAILED", Rules{TakeoverAnyCall: true}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.deliverKind(mPNR)
			m.deliverKind(mProceed) // home's issuer request in flight
			m.crash(home)           // PENDING
			m.submit(1, "t0", 0)    // home down: next takes over call 0's entry
			m.deliverOf(mProcess, 1)
			m.deliverOf(mProcess, 1)
			m.violations = nil // past the rule break, to its consequence
			m.deliverOf(mMarkSend, 1)
			m.deliverOf(mPNR, 1)
			m.deliverOf(mProceed, 1)
			m.loseOf(mIssuerReq, 1)
			m.issuerTimeout(next, attemptKey{1, 1})
			m.deliverOf(mResult, 1) // PENDING
			m.reconcile(next)       // call 1 can no longer reach the issuer: FAILED
			m.deliverOf(mIssuerReq, 0)
		}, "the reconciler abandons only an unconfirmed record", nil},
		{"owner ignored: another call processed away from the owner lands after its FAILED", Rules{IgnoreOwner: true}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.deliverKind(mPNR)
			m.deliverKind(mProceed)
			m.crash(home) // PENDING
			m.loseOf(mIssuerReq, 0)
			m.submit(1, "t0", 0) // home down: next processes it, the entry home's
			m.deliverOf(mProcess, 1)
			m.deliverOf(mProcess, 1)
			m.deliverOf(mMarkSend, 1)
			m.deliverOf(mPNR, 1)
			m.deliverOf(mProceed, 1)
			m.violations = nil // past the rule break, to its consequence
			m.restart(home)
			m.reconcile(home) // call 0 can no longer reach the issuer: FAILED
			m.deliverOf(mIssuerReq, 1)
		}, "the reconciler abandons only an unconfirmed record", nil},
		{"final entry answered for any payload", Rules{AnswerEntryAnyPayload: true}, func(m *model) {
			m.submit(0, "t0", 0)
			m.drain()
			m.submitDrained(1, "t0", 3, home)
			m.drain()
		}, "ALREADY_EXISTS", nil},
		{"PENDING from a leftover sending record without a pin: never resolved", Rules{NoPin: true}, noPinScript, "lost", nil},
	})
}

// noPinScript leaves a sending record at t0's home whose attempt the GTR
// gave up before Proceed, has the home answer another call PENDING from
// it, and then lets the first call's next attempt reach next and step
// back there.
func noPinScript(m *model) {
	home := ranking("t0")[0]
	m.submit(0, "t0", 0)
	m.deliverKind(mProcess)
	m.deliverKind(mMarkSend) // sending, PNR on its way
	m.crash(home)            // PNR lost: call 0 re-routed to next
	m.restart(home)
	m.submit(1, "t0", 0)
	m.deliverOf(mProcess, 1) // home: the entry is home's, the record sending and idle: PENDING
	m.deliverOf(mProcess, 0) // next: an earlier attempt of call 0 holds the entry
	m.deadline(m.calls[0])   // if next took it over, it steps back
	m.drain()
}
