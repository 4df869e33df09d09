package model

import (
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// testTimeout bounds each property run.
const testTimeout = 2 * time.Minute

// A scope is what a property run drives: the payments' protocol alone,
// or with the follow-ups of approved authorizations and the reuse of IDs
// across the two kinds.
type scope int

const (
	paymentsOnly scope = iota
	withFollowUps
)

// drawer makes a simulator step's choices (sim.go's chooser) with rapid's
// draws, so that the property test drives the simulator's own steps.
type drawer struct{ t *rapid.T }

func (d drawer) IntN(n int) int       { return rapid.IntRange(0, n-1).Draw(d.t, "choice") }
func (d drawer) Int64N(n int64) int64 { return rapid.Int64Range(0, n-1).Draw(d.t, "choice") }

// simSteps are the simulator's steps the property takes with follow-ups:
// a partner's captures, voids and refunds (some over the limits), the
// same IDs again (retries at either replica, other payloads), the reuse
// of IDs across the two kinds; and, in place of the property's own
// payment-only faults of the same names, the simulator's, which hit the
// follow-ups' messages, waits, callers and runs too (a payment's first).
var simSteps = map[string]stepKind{
	"capture": stCapture, "void": stVoid, "refund": stRefund, "followUpAgain": stFollowUpAgain,
	"reusePaymentID": stReusePaymentID, "reuseFollowUpID": stReuseFollowUpID,
	"lose": stLose, "issuerTimeout": stIssuerTimeout, "deadline": stDeadline, "crashBusy": stCrashBusy,
}

// property drives a model with rules through rapid's choice of actions
// in scope, checking the invariants after every step (check) and once
// faults heal (converged: the simulator's checks, the checker's
// included). With follow-ups, a run starts as the simulator's do, with
// the calm start's approved authorizations (drawn by rapid) for them to
// act on. reached, unless nil, counts the runs that reached each of the
// simulator's interesting states.
func property(rules Rules, sc scope, reached *[numCov]int) func(*rapid.T) {
	return func(t *rapid.T) {
		m := newModel(rules)
		if reached != nil {
			defer func() {
				for c, n := range m.covered {
					if n > 0 {
						reached[c]++
					}
				}
			}()
		}
		fail := func(err error) {
			t.Fatalf("%v\ntrace:\n  %s", err, strings.Join(m.log, "\n  "))
		}
		deliver := func(t *rapid.T) {
			d := m.deliverable()
			if len(d) == 0 {
				t.Skip("nothing in flight")
			}
			m.deliver(rapid.SampledFrom(d).Draw(t, "message"))
		}
		if sc == withFollowUps {
			m.calmStart(drawer{t})
		}
		actions := map[string]func(*rapid.T){
			"submit": func(t *rapid.T) {
				m.submit(rapid.IntRange(0, numReplicas-1).Draw(t, "gtr"), rapid.SampledFrom(ids).Draw(t, "id"),
					payload(rapid.IntRange(0, 5).Draw(t, "payload")))
			},
			// submitDrained is a submit while the GTR drains one cell: the
			// call's ranking skips it (docs/design/README.md's weight 0).
			"submitDrained": func(t *rapid.T) {
				m.submitDrained(rapid.IntRange(0, numReplicas-1).Draw(t, "gtr"), rapid.SampledFrom(ids).Draw(t, "id"),
					payload(rapid.IntRange(0, 5).Draw(t, "payload")), rapid.IntRange(0, numCells-1).Draw(t, "drained"))
			},
			// Of the calls after the calm start's, as the simulator's
			// duplicates: its authorizations are never sent again.
			"duplicate": func(t *rapid.T) {
				calls := m.calls[m.calm:]
				if len(calls) == 0 {
					t.Skip("nothing to duplicate")
				}
				c := calls[rapid.IntRange(0, len(calls)-1).Draw(t, "call")]
				m.submit(rapid.IntRange(0, numReplicas-1).Draw(t, "gtr"), c.id, c.payload)
			},
			// Delivery has three entries of the action table: rapid picks
			// actions evenly, and a run must deliver often to get past
			// the handshake before the next fault.
			"deliver":   deliver,
			"deliver ":  deliver,
			"deliver  ": deliver,
			"crash": func(t *rapid.T) {
				i := rapid.IntRange(0, numCells-1).Draw(t, "cell")
				if !m.cells[i].up {
					t.Skip("already down")
				}
				m.crash(i)
			},
			// crashBusy crashes a cell in the middle of a live attempt: the
			// crashes that matter, more often than a blind pick gives them.
			"crashBusy": func(t *rapid.T) {
				var busy []int
				for _, c := range m.live(func(*call) bool { return true }) {
					if i := c.cell; m.cells[i].up && !m.processPending(c) && !slices.Contains(busy, i) {
						busy = append(busy, i)
					}
				}
				if len(busy) == 0 {
					t.Skip("no live attempt on a cell that is up")
				}
				m.crash(rapid.SampledFrom(busy).Draw(t, "busy cell"))
			},
			"restart": func(t *rapid.T) {
				i := rapid.IntRange(0, numCells-1).Draw(t, "cell")
				if m.cells[i].up {
					t.Skip("already up")
				}
				m.restart(i)
			},
			"issuerTimeout": func(t *rapid.T) {
				ws := m.waits(func(cl *cell) map[attemptKey]string { return cl.issuerWait })
				if len(ws) == 0 {
					t.Skip("no cell waits for the issuer")
				}
				w := rapid.SampledFrom(ws).Draw(t, "wait")
				m.issuerTimeout(w.cell, w.k)
			},
			// lose drops an issuer message, or a best-effort directory
			// update (lost, or its cell gave up on it).
			"lose": func(t *rapid.T) {
				var lossy []int
				for i, x := range m.pool {
					if x.kind == mIssuerReq || x.kind == mIssuerResp || x.kind == mDirUpdate {
						lossy = append(lossy, i)
					}
				}
				if len(lossy) == 0 {
					t.Skip("no issuer message or directory update in flight")
				}
				m.lose(rapid.SampledFrom(lossy).Draw(t, "message"))
			},
			"attemptTimeout": func(t *rapid.T) {
				live := m.live(func(c *call) bool { return !c.pnr })
				if len(live) == 0 {
					t.Skip("no attempt timer running")
				}
				m.attemptTimeout(rapid.SampledFrom(live).Draw(t, "call"))
			},
			"deadline": func(t *rapid.T) {
				live := m.live(func(*call) bool { return true })
				if len(live) == 0 {
					t.Skip("no call in flight")
				}
				m.deadline(rapid.SampledFrom(live).Draw(t, "call"))
			},
			// deadlinePNR is the caller's deadline passing while the GTR
			// waits on a cell past its PNR: the case the stream must
			// outlive, more often than a blind pick gives it.
			"deadlinePNR": func(t *rapid.T) {
				live := m.live(func(c *call) bool { return c.pnr })
				if len(live) == 0 {
					t.Skip("no call past its PNR")
				}
				m.deadline(rapid.SampledFrom(live).Draw(t, "call"))
			},
			"proceedTimeout": func(t *rapid.T) {
				ws := m.waits(func(cl *cell) map[attemptKey]string { return cl.awaiting })
				if len(ws) == 0 {
					t.Skip("no cell waits for Proceed")
				}
				w := rapid.SampledFrom(ws).Draw(t, "wait")
				m.proceedTimeout(w.cell, w.k)
			},
			"reconcile": func(t *rapid.T) {
				m.reconcile(rapid.IntRange(0, numCells-1).Draw(t, "cell"))
			},
			"": func(t *rapid.T) {
				if err := m.check(); err != nil {
					fail(err)
				}
			},
		}
		if sc == withFollowUps {
			for name, k := range simSteps {
				actions[name] = func(t *rapid.T) {
					if !m.step(drawer{t}, k) {
						t.Skip("nothing to do for " + stepNames[k])
					}
				}
			}
			// Follow-ups have more messages to deliver than payments.
			actions["deliver   "], actions["deliver    "] = deliver, deliver
		}
		t.Repeat(actions)
		m.heal()
		m.logf("healed")
		if err := m.converged(); err != nil {
			fail(err)
		}
	}
}

// TestProtocol is the model check: protocolChecks cases from a fixed seed,
// so that go test is deterministic. To explore further, give a seed and a
// number of cases: -rapid.seed=N -rapid.checks=M. With the directory,
// 300,000 cases from the random seed 1397413795 pass (-run 'TestProtocol$'
// -rapid.checks=300000, about a minute), and 100,000 each from seeds 777
// and 4242; seed 777 found, within 16,000 cases, the leftover PENDING
// that the entry's pin now covers (knob NoPin). Those were of payments
// alone; with follow-ups (and the reuse of IDs across the kinds), 30,000
// cases from seed 777 pass here and in TestProtocolAsyncInsert (about 15
// and 25 s). The run logs how many cases reached each interesting state.
func TestProtocol(t *testing.T) {
	pinSearch(t, protocolChecks)
	done := withTimeout(t)
	defer done()
	checkProtocol(t, Rules{})
}

// TestProtocolGroupCommit is TestProtocol with the cell's group commit:
// every durable write after the claim waits for its shared commit, which
// other steps, other writes' commits and crashes may come before.
func TestProtocolGroupCommit(t *testing.T) {
	pinSearch(t, protocolChecks)
	done := withTimeout(t)
	defer done()
	checkProtocol(t, Rules{GroupCommit: true})
}

// TestProtocolAsyncInsert is TestProtocolGroupCommit with the insert and
// the reclaim queued for their commits too, as every durable write of the
// cell's group commit is: the window between a claim and its record's
// write is open to every other step (see Rules.AsyncInsert for the two
// races rapid found there before the machine was fixed).
func TestProtocolAsyncInsert(t *testing.T) {
	pinSearch(t, protocolChecks)
	done := withTimeout(t)
	defer done()
	checkProtocol(t, Rules{GroupCommit: true, AsyncInsert: true})
}

// protocolReaches are the follow-ups' states each TestProtocol run must
// reach in some case, so that its follow-ups are not vacuous: the hold
// lost or cut short by a crash, the reconciler's resolve, the limits'
// refusals, the replays, the ways to the original's cell, and both
// directions of an ID's reuse refused.
var protocolReaches = []cov{covFuHeldCrash, covFuHoldLost, covFuReconciled, covFuOverLimit, covFuReplayed,
	covFuRedirect, covFuFanOut, covReuseFollowUp, covReusePayment}

// checkProtocol runs the property with rules and follow-ups, logs how
// many cases reached each interesting state, and requires those of
// protocolReaches.
func checkProtocol(t *testing.T, rules Rules) {
	var reached [numCov]int
	rapid.Check(t, property(rules, withFollowUps, &reached))
	var b strings.Builder
	for c, n := range reached {
		fmt.Fprintf(&b, "  %-48s %5d cases\n", covNames[c], n)
	}
	t.Logf("interesting states reached:\n%s", b.String())
	for _, c := range protocolReaches {
		if reached[c] == 0 {
			t.Errorf("no case reached %q", covNames[c])
		}
	}
}

// TestInvariantsCatchBrokenRules checks that the model can fail: with each
// knob breaking one rule, rapid must find a counterexample, and it must be
// the invariant that rule protects.
func TestInvariantsCatchBrokenRules(t *testing.T) {
	tests := []struct {
		name  string
		rules Rules
		want  string // a regular expression
		scope scope  // the payments' knobs are searched for without follow-ups
	}{
		{"re-route after PNR", Rules{RerouteAfterPNR: true}, "no re-route after a PNR", paymentsOnly},
		{"Proceed after the attempt timed out", Rules{ProceedAfterTimeout: true}, "no Proceed for an attempt given up", paymentsOnly},
		{"issuer called without Proceed", Rules{IssuerWithoutProceed: true}, "no issuer call without Proceed", paymentsOnly},
		{"reconciler resends", Rules{ReconcilerResends: true}, "no issuer call without Proceed: the reconciler", paymentsOnly},
		// With the directory, one attempt per ID calls the issuer: the
		// issuer's dedupe shows only without it, where the gaps the
		// directory closes show too, and shrinking may end on either
		// (TestScripted's "issuer without dedupe" pins the effect).
		{"issuer without dedupe", Rules{IssuerNoDedupe: true, NoDirectory: true}, "at most one issuer effect|same ID, other payload|issuer_not_reached is final", paymentsOnly},
		{"payload ignored", Rules{IgnorePayload: true}, "ALREADY_EXISTS", paymentsOnly},
		{"PENDING without Proceeding", Rules{PendingWithoutProceeding: true}, "lost", paymentsOnly},
		// ReconcilerNoClose, ReconcilerNoClaim and NoStepBackAfterLostCommit
		// are not here: the first is rare in rapid's uniform choice of steps
		// (TestSimulatorBites and TestScripted catch it); the issuer's close
		// makes the other two break nothing partners see (a send after the
		// FAILED is refused), and TestDirectory's scripts pin them with
		// ReconcilerNoClose.
		{"no wait on a sending record", Rules{NoWaitOnSending: true}, "no PENDING from an unconfirmed sending record", paymentsOnly},
		{"no directory", Rules{NoDirectory: true}, "same ID, other payload|issuer_not_reached is final", paymentsOnly},
		{"takeover of any call", Rules{TakeoverAnyCall: true}, "takeover only from an attempt without Proceed|the issuer is called by the owner only", paymentsOnly},
		{"owner ignored", Rules{IgnoreOwner: true}, "the issuer is called by the owner only", paymentsOnly},
		{"final entry answered for any payload", Rules{AnswerEntryAnyPayload: true}, "ALREADY_EXISTS", paymentsOnly},
		{"PENDING from a leftover without a pin", Rules{NoPin: true}, "lost|every accepted transaction is final", paymentsOnly},
		// The follow-ups' knobs, and the one key space of the two kinds'
		// IDs (reuse.go), with follow-ups.
		// Rapid's first find ends its run before the hold, which heal
		// delivers with the settle that then releases what was never
		// held.
		{"follow-up not held", Rules{NoHold: true}, "a follow-up in flight is held on its authorization|ledger is valid", withFollowUps},
		{"follow-up settled twice", Rules{SettleTwice: true}, "ledger is valid|captured ≤ authorized|refunded ≤ captured|held on its authorization", withFollowUps},
		{"kinds' IDs apart", Rules{KindsApart: true}, "one transaction per ID|under a (payment|follow-up)'s ID is refused|keeps its answer", withFollowUps},
	}
	noFailFile(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := withTimeout(t)
			defer done()
			rec := &recorder{TB: t}
			rapid.Check(rec, property(tt.rules, tt.scope, nil))
			if !rec.failed {
				t.Fatalf("rapid found no counterexample with %+v", tt.rules)
			}
			t.Log(firstLines(rec.out.String(), 1))
			if !regexp.MustCompile(tt.want).MatchString(rec.out.String()) {
				t.Errorf("counterexample does not break %q:\n%s", tt.want, rec.out.String())
			}
		})
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// TestScripted replays hand-written sequences: the failover paths the
// protocol is for, and one per knob, so a broken rule is caught without
// depending on rapid's search.
func TestScripted(t *testing.T) {
	home := ranking("t0")[0]
	next := ranking("t0")[1]
	last := ranking("t0")[2]
	runScripts(t, []scripted{
		{"crash before the PNR re-routes", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.crash(home)
		}, "", func(t *testing.T, m *model) {
			wantAnswer(t, m, "t0", "APPROVED")
			wantState(t, m, home, "t0", abandoned)
			wantState(t, m, next, "t0", approved)
		}},
		// The reconciler finds the issuer's effect of the other cell's
		// attempt, which took the entry over: it is that cell's, and
		// the home's record is abandoned rather than adopting it (two
		// cells past the PNR otherwise; TestCellInstances found it).
		{"crash while waiting for Proceed re-routes; the reconciler abandons the orphaned record", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.crash(home) // sending recorded, PNR lost
		}, "", func(t *testing.T, m *model) {
			wantAnswer(t, m, "t0", "APPROVED")
			wantState(t, m, home, "t0", abandoned)
			wantState(t, m, next, "t0", approved)
		}},
		// The write to sending commits and its answer is lost (the primary
		// died with the commit on its way; the promoted standby has it):
		// the attempt steps back before the re-route, and the record
		// does not stay past its PNR in the home while next completes
		// the transaction (TestCellInstances found it).
		{"sending committed with its answer lost: the attempt steps back, then re-routes", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSendLost)
			if s := m.cells[home].db["t0"].state; s != abandoned {
				panic("after the lost commit: " + s)
			}
			m.drain()
		}, "", func(t *testing.T, m *model) {
			wantAnswer(t, m, "t0", "APPROVED")
			wantState(t, m, home, "t0", abandoned)
			wantState(t, m, next, "t0", approved)
		}},
		{"crash with the Proceed on its way: outcome unknown (UNAVAILABLE), then FAILED not reached", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.deliverKind(mPNR)
			m.crash(home)
		}, "", func(t *testing.T, m *model) {
			wantAnswer(t, m, "t0", "UNAVAILABLE")
			wantState(t, m, home, "t0", failed)
			wantState(t, m, next, "t0", "")
		}},
		{"attempt timer fires with the PNR in flight: no Proceed, abandoned, re-routed", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.attemptTimeout(m.calls[0])
			m.deliverKind(mPNR) // no Proceed
			m.deliverKind(mCancel)
		}, "", func(t *testing.T, m *model) {
			wantAnswer(t, m, "t0", "APPROVED")
			wantState(t, m, home, "t0", abandoned)
			wantState(t, m, next, "t0", approved)
		}},
		{"issuer timeout after the effect, replay while pending", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.deliverKind(mPNR)
			m.deliverKind(mProceed)
			m.deliverKind(mIssuerReq)
			m.issuerTimeout(home, attemptKey{0, 0})
			m.submit(0, "t0", 0) // replay while pending
		}, "", nil},
		{"lost issuer request: FAILED issuer_not_reached", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.deliverKind(mPNR)
			m.deliverKind(mProceed)
			m.loseKind(mIssuerReq)
		}, "", func(t *testing.T, m *model) {
			wantAnswer(t, m, "t0", "PENDING")
			wantState(t, m, home, "t0", failed)
		}},
		{"abandoned at home, completed elsewhere: the replay is answered from the directory", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.crash(home) // before the PNR: re-routed to next, which takes the entry over and approves
			m.drain()
			m.restart(home)      // received -> abandoned
			m.submit(1, "t0", 0) // the other replica does not remember next
			m.drain()
		}, "", func(t *testing.T, m *model) {
			wantState(t, m, home, "t0", abandoned)
			wantState(t, m, next, "t0", approved)
			if m.effects["t0"] != 1 || m.calls[1].answer.status != "APPROVED" || m.calls[1].attempt != 0 {
				t.Errorf("effects %d, replay %v on attempt %d", m.effects["t0"], m.calls[1].answer, m.calls[1].attempt)
			}
		}},
		{"abandoned at home, completed elsewhere, the final update lost: the replay is redirected to the owner", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.crash(home)
			m.deliverKind(mProcess)  // next takes the entry over
			m.deliverKind(mMarkSend) // home's, in the memory of its old process: gone
			m.deliverKind(mMarkSend)
			m.deliverKind(mPNR)
			m.deliverKind(mProceed)
			m.deliverKind(mIssuerReq)
			m.deliverKind(mIssuerResp) // approved
			m.loseKind(mDirUpdate)     // the entry still says owned by next
			m.drain()
			m.restart(home)
			m.submit(1, "t0", 0)
			m.drain()
		}, "", func(t *testing.T, m *model) {
			wantState(t, m, home, "t0", abandoned)
			if c := m.calls[1]; c.answer.status != "APPROVED" || c.cell != next {
				t.Errorf("replay %v on cell %d", c.answer, c.cell)
			}
		}},
		{"abandoned, the entry the cell's: reclaimed, not re-routed", Rules{}, func(m *model) {
			m.crash(next)
			m.crash(last)
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess) // home: received
			m.crash(home)           // before the PNR: next and last down, UNAVAILABLE
			m.drain()
			m.restart(home) // received -> abandoned
			m.restart(next)
			m.restart(last)
			m.submit(1, "t0", 0) // home reclaims it, though other cells are up
			m.drain()
		}, "", func(t *testing.T, m *model) {
			wantState(t, m, home, "t0", approved)
			wantState(t, m, next, "t0", "")
			if c := m.calls[1]; c.attempt != 0 {
				t.Errorf("replay on attempt %d", c.attempt)
			}
		}},
		{"abandoned, no directory: reclaimed as last resort", Rules{NoDirectory: true}, func(m *model) {
			id := lastAt(home)
			r := ranking(id)
			m.crash(r[0])
			m.crash(r[1])
			m.submit(0, id, 0)
			m.deliverKind(mProcess) // r[0] down
			m.deliverKind(mProcess) // r[1] down
			m.deliverKind(mProcess) // home, last resort: received
			m.crash(home)           // before the PNR: UNAVAILABLE
			m.restart(home)         // received -> abandoned
			m.submit(1, id, 0)      // r[0], r[1] still down: home reclaims
			m.drain()
		}, "", func(t *testing.T, m *model) {
			if !slices.ContainsFunc(m.log, func(l string) bool { return strings.Contains(l, "reclaimed (last resort)") }) {
				t.Error("no reclaim")
			}
			wantState(t, m, home, lastAt(home), approved)
		}},
		{"remembered cell: a replay goes straight to where it completed", Rules{}, func(m *model) {
			m.crash(home)
			m.submit(0, "t0", 0)
			m.drain()
			m.restart(home)
			m.submit(0, "t0", 0)
			if m.calls[1].ranking[0] != next {
				panic(fmt.Sprintf("replay ranking %v, want %d first", m.calls[1].ranking, next))
			}
			m.submit(1, "t0", 0) // the other replica asks home: no record there, the entry answers
		}, "", func(t *testing.T, m *model) {
			wantState(t, m, home, "t0", "")
			if m.effects["t0"] != 1 || m.calls[2].answer.status != "APPROVED" {
				t.Errorf("effects %d, other replica answered %v", m.effects["t0"], m.calls[2].answer)
			}
		}},
		{"duplicate waits while the handshake is open; the first caller leaves: abandoned, the duplicate reclaims it", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend) // sending, waiting for Proceed
			m.submit(1, "t0", 0)     // the same transaction at another replica
			m.deliverKind(mProcess)  // waits: another attempt here runs
			m.deadline(m.calls[0])   // DEADLINE_EXCEEDED, before Proceed: the stream is cancelled
			m.deliverKind(mCancel)   // refused: abandoned
			m.deliverKind(mWait)     // abandoned, the entry home's: reclaimed
		}, "", func(t *testing.T, m *model) {
			wantState(t, m, home, "t0", approved)
			wantState(t, m, next, "t0", "")
			if a := m.calls[1].answer; a.status != "APPROVED" {
				t.Errorf("duplicate answered %v", a)
			}
		}},
		{"duplicate waits while the handshake is open; Proceed and the issuer settle it", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.submit(1, "t0", 0)
			m.deliverKind(mProcess) // waits
			m.deliverKind(mPNR)
			m.deliverKind(mProceed)
			m.deliverKind(mIssuerReq)
			m.deliverKind(mIssuerResp) // approved
			m.deliverKind(mWait)       // settled: the duplicate answers from the record
		}, "", func(t *testing.T, m *model) {
			if a := m.calls[1].answer; a.status != "APPROVED" {
				t.Errorf("duplicate answered %v", a)
			}
		}},
		{"duplicate's wait times out while the other attempt runs: ABORTED", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.submit(1, "t0", 0)
			m.deliverKind(mProcess) // waits
			m.deliverKind(mPNR)
			m.deliverKind(mProceed) // the first attempt calls the issuer: still running
			m.deliverKind(mWait)    // the wait ends with the record still sending
		}, "", func(t *testing.T, m *model) {
			if a := m.calls[1].answer; a.status != "ABORTED" {
				t.Errorf("duplicate answered %v", a)
			}
			wantState(t, m, home, "t0", approved)
		}},
		{"duplicate after the attempt ended: PENDING from sending, resolved by the reconciler", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.deliverKind(mPNR)
			m.deliverKind(mProceed)
			m.deliverKind(mIssuerReq)
			m.issuerTimeout(home, attemptKey{0, 0}) // PENDING; no attempt here runs now
			m.submit(1, "t0", 0)
			m.deliverKind(mProcess) // PENDING from the record, at once
			if len(m.pool) > 0 && slices.ContainsFunc(m.pool, func(x msg) bool { return x.kind == mWait }) {
				panic("waited with no other attempt running")
			}
		}, "", func(t *testing.T, m *model) {
			wantState(t, m, home, "t0", approved)
		}},
		{"caller's deadline after Proceed: PENDING, the stream lives on, the cell completes", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.deliverKind(mPNR) // Proceed sent
			m.deliverKind(mProceed)
			m.deliverKind(mProceeding) // taken
			m.deadline(m.calls[0])     // PENDING
			if slices.ContainsFunc(m.pool, func(x msg) bool { return x.kind == mCancel }) {
				panic("the stream was cancelled after Proceed")
			}
		}, "", func(t *testing.T, m *model) {
			wantAnswer(t, m, "t0", "PENDING")
			wantState(t, m, home, "t0", approved)
		}},
		{"crash after sending, re-routed after the reconciler closed the ID: FAILED everywhere", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.crash(home) // PNR lost: re-routed to next
			m.restart(home)
			m.reconcile(home)       // NOT_FOUND: closed at the issuer, FAILED in the entry
			m.deliverKind(mProcess) // next finds the final entry
		}, "", func(t *testing.T, m *model) {
			wantAnswer(t, m, "t0", "FAILED")
			wantState(t, m, home, "t0", failed)
			wantState(t, m, next, "t0", "")
		}},
		{"re-route after PNR", Rules{RerouteAfterPNR: true}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.deliverKind(mPNR)
			m.deliverKind(mProceed)
			m.deliverKind(mProceeding)
			m.crash(home)
		}, "no re-route after a PNR", nil},
		{"Proceed after the attempt timed out", Rules{ProceedAfterTimeout: true}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.attemptTimeout(m.calls[0])
			m.deliverKind(mPNR)
		}, "no Proceed for an attempt given up", nil},
		{"issuer called without Proceed", Rules{IssuerWithoutProceed: true}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
		}, "no issuer call without Proceed", nil},
		{"reconciler resends", Rules{ReconcilerResends: true}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.crash(home)
			m.restart(home)
			m.reconcile(home)
		}, "no issuer call without Proceed: the reconciler", nil},
		// With the directory one attempt per ID calls the issuer, so its
		// dedupe is only the last line (for the NATS outage the model
		// leaves out): it shows without the directory.
		{"issuer without dedupe", Rules{IssuerNoDedupe: true, NoDirectory: true}, func(m *model) {
			m.crash(home)
			m.crash(next)
			m.submit(0, "t0", 0)
			m.drain() // completed on the last cell
			m.restart(home)
			m.submit(1, "t0", 0) // the other replica: home has no record
			m.drain()
			_ = last
		}, "at most one issuer effect", nil},
		// The cell stops waiting for Proceed while it is on its way (a
		// stalled connection): it steps back, and the GTR, Proceed sent
		// but never taken, re-routes; the late Proceed finds nothing.
		{"late Proceed", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.deliverKind(mPNR) // Proceed sent
			m.proceedTimeout(home, attemptKey{0, 0})
			m.deliverKind(mReroutable) // re-routed to the next cell
			m.deliverKind(mProceed)    // too late
			m.drain()
		}, "", func(t *testing.T, m *model) {
			wantAnswer(t, m, "t0", "APPROVED")
			wantState(t, m, home, "t0", abandoned)
			wantState(t, m, next, "t0", approved)
		}},
		// The same before the fix: the GTR answered PENDING for it, and
		// the record it promised was abandoned (issue 38's first bug).
		{"late Proceed, PENDING without Proceeding", Rules{PendingWithoutProceeding: true}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.deliverKind(mPNR)
			m.proceedTimeout(home, attemptKey{0, 0})
			m.deliverKind(mReroutable)
		}, "lost", nil},
		// The issuer request stalls past the cell's wait and the
		// reconciler's inquiry: the inquiry closes the ID, and the request,
		// delivered late, is refused (issue 38's second bug, fixed)...
		{"late issuer request", Rules{}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.deliverKind(mPNR)
			m.deliverKind(mProceed)
			m.deliverKind(mProceeding)
			m.issuerTimeout(home, attemptKey{0, 0}) // PENDING
			m.deliverKind(mResult)
			m.reconcile(home) // nothing found: closed, FAILED
			m.drain()         // the request arrives: refused
		}, "", func(t *testing.T, m *model) {
			wantState(t, m, home, "t0", failed)
			if m.effects["t0"] != 0 {
				t.Fatalf("the issuer applied a request of a closed ID")
			}
		}},
		// ...and without the close, applied after the FAILED.
		{"late issuer request, no close", Rules{ReconcilerNoClose: true}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.deliverKind(mPNR)
			m.deliverKind(mProceed)
			m.deliverKind(mProceeding)
			m.issuerTimeout(home, attemptKey{0, 0})
			m.deliverKind(mResult)
			m.reconcile(home)
			m.drain()
		}, "issuer_not_reached is final", nil},
		{"no wait on a sending record", Rules{NoWaitOnSending: true}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend) // sending, waiting for Proceed
			m.submit(1, "t0", 0)     // the same transaction at another replica
			m.deliverKind(mProcess)  // PENDING from the record
		}, "no PENDING from an unconfirmed sending record", nil},
		{"no wait on a sending record: the PENDING is lost", Rules{NoWaitOnSending: true}, func(m *model) {
			m.submit(0, "t0", 0)
			m.deliverKind(mProcess)
			m.deliverKind(mMarkSend)
			m.submit(1, "t0", 0)
			m.deliverKind(mProcess)
			m.deadline(m.calls[0]) // the first caller gives up: DEADLINE_EXCEEDED
			m.deliverKind(mCancel) // refused: abandoned
			m.violations = nil     // past the rule break, to its consequence
		}, "lost", nil},
		{"payload ignored", Rules{IgnorePayload: true}, func(m *model) {
			m.submit(0, "t0", 0)
			m.heal()
			m.submit(0, "t0", 3)
		}, "ALREADY_EXISTS", nil},
	})
}

// scripted is one hand-written sequence: with rules, after script (and,
// if no invariant broke yet, healing), the first invariant broken must
// contain wantErr (empty: none may break); after checks the end state.
type scripted struct {
	name    string
	rules   Rules
	script  func(m *model)
	wantErr string
	after   func(t *testing.T, m *model)
}

func runScripts(t *testing.T, tests []scripted) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newModel(tt.rules)
			tt.script(m)
			err := m.check()
			if err == nil {
				m.heal()
				err = m.checkHealed()
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("%v\ntrace:\n  %s", err, strings.Join(m.log, "\n  "))
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("got %v, want %q\ntrace:\n  %s", err, tt.wantErr, strings.Join(m.log, "\n  "))
			}
			if tt.after != nil {
				tt.after(t, m)
				if t.Failed() {
					t.Logf("trace:\n  %s", strings.Join(m.log, "\n  "))
				}
			}
		})
	}
}

// lastAt returns an ID of ids ranked last at cell c.
func lastAt(c int) string {
	for _, id := range []string{"t0", "t1", "t2", "t3", "t4", "t5"} {
		if ranking(id)[numCells-1] == c {
			return id
		}
	}
	panic("no ID")
}

func wantAnswer(t *testing.T, m *model, id, status string) {
	t.Helper()
	as := m.answers[id]
	if len(as) == 0 || as[0].res.status != status {
		t.Errorf("%s: first answer %v, want %s", id, as, status)
	}
}

func wantState(t *testing.T, m *model, cell int, id string, s state) {
	t.Helper()
	var got state
	if rec := m.cells[cell].db[id]; rec != nil {
		got = rec.state
	}
	if got != s {
		t.Errorf("%s in cell %d: %q, want %q", id, cell, got, s)
	}
}

// drain delivers every message in flight, oldest deliverable first.
func (m *model) drain() {
	for len(m.pool) > 0 {
		m.deliver(m.deliverable()[0])
	}
}

// deliverOf delivers the oldest deliverable message of kind k of GTR call
// n, after a Proceeding ahead of it on its stream (scripts name the
// handshake's other steps).
func (m *model) deliverOf(k msgKind, n int) {
	for _, i := range m.deliverable() {
		if x := m.pool[i]; x.kind == mProceeding && x.call == n && k != mProceeding {
			m.deliver(i)
			m.deliverOf(k, n)
			return
		}
		if x := m.pool[i]; x.kind == k && x.call == n {
			m.deliver(i)
			return
		}
	}
	panic(fmt.Sprintf("no %s message of call %d in flight; pool %v", kindNames[k], n, m.pool))
}

// loseOf loses the oldest message of kind k of GTR call n.
func (m *model) loseOf(k msgKind, n int) {
	for i, x := range m.pool {
		if x.kind == k && x.call == n {
			m.lose(i)
			return
		}
	}
	panic(fmt.Sprintf("no %s message of call %d in flight", kindNames[k], n))
}

// deliverKind delivers the oldest deliverable message of kind k; scripts
// use it to say which step happens next.
func (m *model) deliverKind(k msgKind) {
	for _, i := range m.deliverable() {
		if x := m.pool[i]; x.kind == mProceeding && x.stream() && k != mProceeding && k.stream() {
			m.deliver(i)
			m.deliverKind(k)
			return
		}
		if m.pool[i].kind == k {
			m.deliver(i)
			return
		}
	}
	panic(fmt.Sprintf("no %s message in flight; pool %v", kindNames[k], m.pool))
}

func (m *model) loseKind(k msgKind) {
	for i, x := range m.pool {
		if x.kind == k {
			m.lose(i)
			return
		}
	}
	panic(fmt.Sprintf("no %s message in flight", kindNames[k]))
}

// recorder is a rapid.TB that records a failure instead of failing the
// test, so a test can assert that rapid finds one.
type recorder struct {
	rapid.TB
	mu     sync.Mutex
	failed bool
	out    strings.Builder
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	fmt.Fprintf(&r.out, format+"\n", args...)
}
func (r *recorder) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }

// Fatalf, Fail and FailNow record and return: rapid calls FailNow as its
// last act, and the test goes on to inspect what was recorded.
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...) }
func (r *recorder) Fatal(args ...any)                 { r.Errorf("%s", fmt.Sprint(args...)) }
func (r *recorder) Fail()                             { r.setFailed() }
func (r *recorder) FailNow()                          { r.setFailed() }
func (r *recorder) setFailed() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}
func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(&r.out, format+"\n", args...)
}
func (r *recorder) Log(args ...any) { r.Logf("%s", fmt.Sprint(args...)) }

// noFailFile stops rapid writing testdata/rapid fail files for failures
// the test expects, and makes the search for them deterministic and
// thorough: a fixed seed (unless -rapid.seed or RAPID_SEED gives one), and
// up to expectedFailureChecks cases (a search stops at its first failure;
// a run of the model takes microseconds). Over 10 random seeds, with the
// directory, the hardest searches needed at most 24,714 cases (NoPin, and
// one seed found nothing in 30,000), 19,797 (ReconcilerNoClaim) and 2,869
// (CancelAfterProceed), the others at most 450; the fixed seed finds every
// one, and TestDirectory's scripts pin the directory's knobs without
// rapid.
func noFailFile(t *testing.T) {
	t.Helper()
	setFlag(t, "rapid.nofailfile", "true")
	pinSearch(t, expectedFailureChecks)
	// No minimizing: the counterexample judged is the first the fixed
	// seed finds. A minimization bounded in time (it was 250 ms) ended
	// wherever the machine's speed let it, and rapid's minimizer keeps
	// any failure of the same check, another invariant's included: under
	// -race, "owner ignored" ended on a PENDING lost rather than the
	// issuer called by another cell's claim it first broke.
	setFlag(t, "rapid.shrinktime", "0s")
}

const (
	expectedFailureChecks = 30000
	protocolChecks        = 2000
	// seed is rapid's seed unless -rapid.seed or RAPID_SEED gives one.
	seed = 20261129
)

// pinSearch makes the package's rapid runs deterministic: the fixed seed
// unless one is given, and at least checks cases.
func pinSearch(t *testing.T, checks int) {
	t.Helper()
	if f := flag.Lookup("rapid.checks"); f != nil {
		if n, err := strconv.Atoi(f.Value.String()); err == nil && n < checks {
			setFlag(t, "rapid.checks", strconv.Itoa(checks))
		}
	}
	if f := flag.Lookup("rapid.seed"); f != nil && f.Value.String() == "0" {
		setFlag(t, "rapid.seed", strconv.FormatUint(seed, 10))
	}
}

func setFlag(t *testing.T, name, value string) {
	t.Helper()
	f := flag.Lookup(name)
	if f == nil {
		t.Fatalf("flag %s not registered", name)
	}
	old := f.Value.String()
	if err := f.Value.Set(value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Value.Set(old) })
}

// withTimeout fails the test if it outlives testTimeout; rapid's own
// deadline is the test binary's -timeout.
func withTimeout(t *testing.T) (done func()) {
	t.Helper()
	timer := time.AfterFunc(testTimeout, func() { panic(fmt.Sprintf("%s: timed out after %v", t.Name(), testTimeout)) })
	return func() { timer.Stop() }
}
