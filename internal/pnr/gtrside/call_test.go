package gtrside

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

var t0 = time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)

// callScript drives a Call: Admitted and Routed as given, then for each
// Try the next of tries (an Answer, or busy), every RetryAnswer ok unless
// budget runs out. It returns the Tries in order and the Finish.
type callScript struct {
	cfg      CallConfig
	admitted bool
	routed   []string
	routeErr error
	budget   int // re-routes the retry budget allows
	tries    []tryAnswer
	step     time.Duration // the clock moves this much per event
}

type tryAnswer struct {
	busy       time.Duration // > 0: the cell is at its limit, with this hint
	ans        Answer
	ownerKnown bool
	ownerDown  bool // the owner is known and down (ejected); else known is up
	ownerUp    bool
}

func (sc callScript) run(t *testing.T) ([]Try, Finish) {
	t.Helper()
	if sc.cfg.MaxAttempts == 0 {
		sc.cfg.MaxAttempts = 3
	}
	if sc.cfg.Deadline.IsZero() {
		sc.cfg.Deadline = t0.Add(10 * time.Second)
	}
	c := NewCall(sc.cfg)
	now := t0
	var tries []Try
	a := c.Start()
	for range 100 {
		now = now.Add(sc.step)
		switch act := a.(type) {
		case Admit:
			a = c.Step(Admitted{OK: sc.admitted, RetryAfter: 7 * time.Millisecond})
		case Route:
			a = c.Step(Routed{Now: now, Cells: sc.routed, Err: sc.routeErr})
		case AskRetry:
			sc.budget--
			a = c.Step(RetryAnswer{Now: now, OK: sc.budget >= 0})
		case Try:
			tries = append(tries, act)
			if len(sc.tries) == 0 {
				t.Fatalf("an attempt more than the script has: %+v", act)
			}
			ta := sc.tries[0]
			ta.ownerUp = ta.ownerUp || ta.ownerKnown && !ta.ownerDown
			sc.tries = sc.tries[1:]
			if ta.busy > 0 {
				a = c.Step(Busy{Now: now, RetryAfter: ta.busy})
			} else {
				a = c.Step(Attempted{Now: now, Answer: ta.ans, OwnerKnown: ta.ownerKnown, OwnerUp: ta.ownerUp})
			}
		case Finish:
			return tries, act
		}
	}
	t.Fatal("the call did not finish in 100 steps")
	return nil, Finish{}
}

func approved(cell string) Answer {
	return Answer{Txn: &cellpayv1.Transaction{Status: cellpayv1.TransactionStatus_APPROVED, CellId: cell}}
}

func reroute(why string) Answer { return Answer{Reroute: errors.New(why)} }

func cellsOf(tries []Try) string {
	var b strings.Builder
	for _, t := range tries {
		fmt.Fprintf(&b, "%s#%d", t.Cell, t.Attempt)
		if t.LastResort {
			b.WriteString("!")
		}
		b.WriteString(" ")
	}
	return strings.TrimSpace(b.String())
}

func TestCall(t *testing.T) {
	three := []string{"a", "b", "c"}
	for _, tc := range []struct {
		name  string
		sc    callScript
		tries string // the cells tried, with their attempt numbers (! last resort)
		check func(t *testing.T, f Finish)
	}{{
		name: "router busy: shed before routing, no slot to give back",
		sc:   callScript{admitted: false},
		check: func(t *testing.T, f Finish) {
			if f.Shed != ShedRouter || f.RetryAfter != 7*time.Millisecond || f.GTRSample != SampleNone || f.Tried != 0 {
				t.Fatalf("%+v", f)
			}
		},
	}, {
		name: "no rule: the routing error, served",
		sc:   callScript{admitted: true, routeErr: status.Error(codes.Unavailable, "no routing rule")},
		check: func(t *testing.T, f Finish) {
			if status.Code(f.Err) != codes.Unavailable || f.GTRSample != SampleServed {
				t.Fatalf("%+v", f)
			}
		},
	}, {
		name:  "first cell answers",
		sc:    callScript{admitted: true, routed: three, tries: []tryAnswer{{ans: approved("a")}}},
		tries: "a#1",
		check: func(t *testing.T, f Finish) {
			if f.Txn == nil || f.Err != nil || f.Remember || f.Tried != 1 || f.Cell != "a" || f.GTRSample != SampleServed {
				t.Fatalf("%+v", f)
			}
		},
	}, {
		name:  "re-routed once: the second cell answers and is remembered",
		sc:    callScript{admitted: true, routed: three, budget: 1, tries: []tryAnswer{{ans: reroute("down")}, {ans: approved("b")}}},
		tries: "a#1 b#2",
		check: func(t *testing.T, f Finish) {
			if f.Txn == nil || !f.Remember || f.Cell != "b" || f.Tried != 2 {
				t.Fatalf("%+v", f)
			}
		},
	}, {
		name:  "pending on a re-routed cell is remembered too",
		sc:    callScript{admitted: true, routed: three, budget: 1, tries: []tryAnswer{{ans: reroute("down")}, {ans: Answer{Pending: true}}}},
		tries: "a#1 b#2",
		check: func(t *testing.T, f Finish) {
			if !f.Pending || !f.Remember || f.Cell != "b" {
				t.Fatalf("%+v", f)
			}
		},
	}, {
		name:  "a final error is the caller's, not re-routed",
		sc:    callScript{admitted: true, routed: three, tries: []tryAnswer{{ans: Answer{Final: status.Error(codes.AlreadyExists, "reused")}}}},
		tries: "a#1",
		check: func(t *testing.T, f Finish) {
			if status.Code(f.Err) != codes.AlreadyExists || f.Remember {
				t.Fatalf("%+v", f)
			}
		},
	}, {
		name:  "retry budget exhausted: UNAVAILABLE naming the first reason",
		sc:    callScript{admitted: true, routed: three, budget: 0, tries: []tryAnswer{{ans: reroute("cell a down")}}},
		tries: "a#1",
		check: func(t *testing.T, f Finish) {
			if status.Code(f.Err) != codes.Unavailable || !strings.Contains(f.Err.Error(), "retry budget exhausted") ||
				!strings.Contains(f.Err.Error(), "cell a down") {
				t.Fatalf("%+v", f)
			}
		},
	}, {
		name:  "every cell re-routes: UNAVAILABLE, the last attempt a last resort",
		sc:    callScript{admitted: true, routed: three, budget: 5, tries: []tryAnswer{{ans: reroute("1")}, {ans: reroute("2")}, {ans: reroute("3")}}},
		tries: "a#1 b#2 c#3!",
		check: func(t *testing.T, f Finish) {
			if status.Code(f.Err) != codes.Unavailable || !strings.Contains(f.Err.Error(), "no cell could take") || f.Tried != 3 {
				t.Fatalf("%+v", f)
			}
		},
	}, {
		name:  "MaxAttempts bounds the cells tried",
		sc:    callScript{cfg: CallConfig{MaxAttempts: 2}, admitted: true, routed: three, budget: 5, tries: []tryAnswer{{ans: reroute("1")}, {ans: reroute("2")}}},
		tries: "a#1 b#2!",
		check: func(t *testing.T, f Finish) {
			if status.Code(f.Err) != codes.Unavailable {
				t.Fatalf("%+v", f)
			}
		},
	}, {
		name:  "a busy cell is skipped without spending the budget",
		sc:    callScript{admitted: true, routed: three, budget: 0, tries: []tryAnswer{{busy: time.Second}, {ans: approved("b")}}},
		tries: "a#1 b#2",
		check: func(t *testing.T, f Finish) {
			if f.Txn == nil || f.Tried != 2 || !f.Remember {
				t.Fatalf("%+v", f)
			}
		},
	}, {
		name:  "every cell busy: shed with the soonest hint, nothing sent",
		sc:    callScript{admitted: true, routed: three, tries: []tryAnswer{{busy: 300 * time.Millisecond}, {busy: 100 * time.Millisecond}, {busy: 200 * time.Millisecond}}},
		tries: "a#1 b#2 c#3!",
		check: func(t *testing.T, f Finish) {
			if f.Shed != ShedCells || f.RetryAfter != 100*time.Millisecond || f.Sent || f.Tried != 0 || f.GTRSample != SampleServed {
				t.Fatalf("%+v", f)
			}
		},
	}, {
		name:  "re-routed, then the rest busy: shed, and says a cell refused it first",
		sc:    callScript{admitted: true, routed: three, budget: 5, tries: []tryAnswer{{ans: reroute("1")}, {busy: time.Second}, {busy: time.Second}}},
		tries: "a#1 b#2 c#3!",
		check: func(t *testing.T, f Finish) {
			if f.Shed != ShedCells || !f.Sent || f.Tried != 1 {
				t.Fatalf("%+v", f)
			}
		},
	}, {
		name: "re-routed, budget gone while a cell was busy: shed",
		sc: callScript{admitted: true, routed: []string{"a", "b", "c", "d"}, cfg: CallConfig{MaxAttempts: 4}, budget: 0,
			tries: []tryAnswer{{busy: time.Second}, {ans: reroute("1")}}},
		tries: "a#1 b#2",
		check: func(t *testing.T, f Finish) {
			if f.Shed != ShedCells || !f.Sent {
				t.Fatalf("%+v", f)
			}
		},
	}, {
		name: "the owner named by the directory is tried next, once, past MaxAttempts",
		sc: callScript{cfg: CallConfig{MaxAttempts: 2}, admitted: true, routed: three, budget: 5,
			tries: []tryAnswer{{ans: Answer{Reroute: errors.New("owned elsewhere"), CellHealthy: true, Owner: "c"}, ownerKnown: true}, {ans: approved("c")}}},
		tries: "a#1 c#2",
		check: func(t *testing.T, f Finish) {
			if f.Txn == nil || f.Cell != "c" || !f.Remember {
				t.Fatalf("%+v", f)
			}
		},
	}, {
		name: "the redirect to the owner spends no retry budget; a re-route after it does",
		sc: callScript{admitted: true, routed: three, budget: 0,
			tries: []tryAnswer{{ans: Answer{Reroute: errors.New("owned elsewhere"), CellHealthy: true, Owner: "c"}, ownerKnown: true}, {ans: reroute("c down")}}},
		tries: "a#1 c#2",
		check: func(t *testing.T, f Finish) {
			if status.Code(f.Err) != codes.Unavailable || !strings.Contains(f.Err.Error(), "retry budget exhausted") || !strings.Contains(f.Err.Error(), "c down") {
				t.Fatalf("%+v", f)
			}
		},
	}, {
		name: "the redirect to an owner that is down spends the budget: a spent one answers at once",
		sc: callScript{admitted: true, routed: three, budget: 0,
			tries: []tryAnswer{{ans: Answer{Reroute: errors.New("owned elsewhere"), CellHealthy: true, Owner: "c"}, ownerKnown: true, ownerDown: true}}},
		tries: "a#1",
		check: func(t *testing.T, f Finish) {
			if status.Code(f.Err) != codes.Unavailable || !strings.Contains(f.Err.Error(), "retry budget exhausted") {
				t.Fatalf("%+v", f)
			}
		},
	}, {
		name: "after the owner, the ranking goes on without it",
		sc: callScript{cfg: CallConfig{MaxAttempts: 2}, admitted: true, routed: three, budget: 5,
			tries: []tryAnswer{{ans: Answer{Reroute: errors.New("owned elsewhere"), CellHealthy: true, Owner: "c"}, ownerKnown: true}, {ans: reroute("c down")}, {ans: approved("b")}}},
		tries: "a#1 c#2 b#3!",
	}, {
		name: "an owner unknown to the table is not redirected to",
		sc: callScript{admitted: true, routed: three, budget: 5,
			tries: []tryAnswer{{ans: Answer{Reroute: errors.New("owned elsewhere"), Owner: "z"}}, {ans: approved("b")}}},
		tries: "a#1 b#2",
	}, {
		name: "a redirect happens once per call",
		sc: callScript{admitted: true, routed: []string{"a", "b", "c", "d"}, cfg: CallConfig{MaxAttempts: 4}, budget: 5,
			tries: []tryAnswer{
				{ans: Answer{Reroute: errors.New("x"), Owner: "d"}, ownerKnown: true},
				{ans: Answer{Reroute: errors.New("y"), Owner: "a"}, ownerKnown: true},
				{ans: approved("b")}}},
		tries: "a#1 d#2 b#3",
	}, {
		name:  "not enough time left for another attempt: DEADLINE_EXCEEDED, a dropped sample",
		sc:    callScript{cfg: CallConfig{MinAttemptTime: 30 * time.Millisecond, Deadline: t0.Add(130 * time.Millisecond)}, admitted: true, routed: three, budget: 5, step: 30 * time.Millisecond, tries: []tryAnswer{{ans: reroute("1")}}},
		tries: "a#1",
		check: func(t *testing.T, f Finish) {
			if status.Code(f.Err) != codes.DeadlineExceeded || !strings.Contains(f.Err.Error(), "not enough time left") || f.GTRSample != SampleDropped {
				t.Fatalf("%+v", f)
			}
		},
	}, {
		name:  "the deadline passed during a re-routed attempt: DEADLINE_EXCEEDED with its reason",
		sc:    callScript{cfg: CallConfig{MinAttemptTime: time.Millisecond, Deadline: t0.Add(50 * time.Millisecond)}, admitted: true, routed: three, budget: 5, step: 20 * time.Millisecond, tries: []tryAnswer{{ans: reroute("slow cell")}}},
		tries: "a#1",
		check: func(t *testing.T, f Finish) {
			if status.Code(f.Err) != codes.DeadlineExceeded || !strings.Contains(f.Err.Error(), "deadline passed") || !strings.Contains(f.Err.Error(), "slow cell") {
				t.Fatalf("%+v", f)
			}
		},
	}, {
		name:  "the caller left before the PNR: nothing learned",
		sc:    callScript{admitted: true, routed: three, tries: []tryAnswer{{ans: Answer{Reroute: errors.New("gone"), Gone: true}}}},
		tries: "a#1",
		check: func(t *testing.T, f Finish) {
			if status.Code(f.Err) != codes.DeadlineExceeded || f.GTRSample != SampleIgnored || f.Tried != 1 {
				t.Fatalf("%+v", f)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tries, f := tc.sc.run(t)
			if got := cellsOf(tries); got != tc.tries {
				t.Errorf("tried %q, want %q", got, tc.tries)
			}
			if tc.check != nil {
				tc.check(t, f)
			}
		})
	}
}

// TestCallOutOfTurn: an event that does not answer the last action is a
// driver bug, and says so.
func TestCallOutOfTurn(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Attempted out of turn") {
			t.Fatalf("recovered %v", r)
		}
	}()
	c := NewCall(CallConfig{MaxAttempts: 1})
	c.Start()
	c.Step(Attempted{Answer: approved("a")})
}

// TestAnswerVerdicts: what an attempt's answer tells the cell's health and
// its adaptive limit.
func TestAnswerVerdicts(t *testing.T) {
	err := errors.New("x")
	for _, tc := range []struct {
		name   string
		a      Answer
		health Health
		sample Sample
	}{
		{"approved", approved("a"), Answered, SampleServed},
		{"pending", Answer{Pending: true}, Answered, SampleIgnored},
		{"a PENDING from the cell", Answer{Txn: &cellpayv1.Transaction{Status: cellpayv1.TransactionStatus_PENDING}}, Answered, SampleIgnored},
		{"final", Answer{Final: err}, Answered, SampleIgnored},
		{"the cell failed", Answer{Reroute: err}, Failed, SampleDropped},
		{"healthy, not its transaction", Answer{Reroute: err, CellHealthy: true}, Answered, SampleIgnored},
		{"slow", Answer{Reroute: err, Slow: true, CellHealthy: true}, TimedOut, SampleDropped},
		{"the caller left", Answer{Reroute: err, Gone: true}, TimedOut, SampleIgnored},
	} {
		if h, s := tc.a.Health(), tc.a.Sample(); h != tc.health || s != tc.sample {
			t.Errorf("%s: health %d sample %d, want %d %d", tc.name, h, s, tc.health, tc.sample)
		}
	}
}
