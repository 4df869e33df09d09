package model

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/pnr/gtrside"
)

// The GTR is the real machines: gtrside.Call, one per call (the call
// loop: the ranking, the redirect to the owner, the next cell, the answer),
// and gtrside.Machine, one per attempt; this file is their driver, as
// payments.go's submit and attempt are in the GTR, with each call's own
// fake clock, which only the attempt timer moves (to the attempt's
// deadline). The model has no admission limits and no retry budget: every
// call is admitted, no cell is ever busy, every re-route is allowed.

// attemptTimeout is payments.Config's AttemptTimeout; callDeadline its
// DefaultDeadline, minAttemptTime its MinAttemptTime and maxAttempts its
// MaxAttempts.
const (
	attemptTimeout = 2 * time.Second
	callDeadline   = 10 * time.Second
	minAttemptTime = 50 * time.Millisecond
	maxAttempts    = 3
)

// startCall starts c's call machine on ranking (cell indexes).
func (m *model) startCall(c *call, ranking []int) {
	c.cm = gtrside.NewCall(gtrside.CallConfig{MaxAttempts: maxAttempts, MinAttemptTime: minAttemptTime, Deadline: c.now.Add(callDeadline)})
	a := c.cm.Start()
	if _, ok := a.(gtrside.Admit); !ok {
		panic("the call did not ask to be admitted")
	}
	if _, ok := c.cm.Step(gtrside.Admitted{OK: true}).(gtrside.Route); !ok {
		panic("the call did not ask to be routed")
	}
	names := make([]string, len(ranking))
	for j, i := range ranking {
		names[j] = cellName(i)
	}
	m.callStep(c, c.cm.Step(gtrside.Routed{Now: c.now, Cells: names}))
}

// callStep performs the call machine's actions from a until an attempt
// starts or the call is answered.
func (m *model) callStep(c *call, a gtrside.CallAction) {
	for {
		switch act := a.(type) {
		case gtrside.AskRetry:
			a = c.cm.Step(gtrside.RetryAnswer{Now: c.now, OK: true})
		case gtrside.Try:
			c.attempt, c.cell, c.pnr = int(act.Attempt)-1, cellIndex(act.Cell), false
			m.startAttempt(c, act.LastResort)
			return
		case gtrside.Finish:
			m.callFinished(c, act)
			return
		default:
			panic(fmt.Sprintf("no GTR driver for call action %T", a))
		}
	}
}

// callFinished answers c as the call machine says.
func (m *model) callFinished(c *call, f gtrside.Finish) {
	if f.Remember {
		m.replicas[c.replica].remember(c.id, cellIndex(f.Cell))
	}
	switch {
	case f.Txn != nil:
		m.finish(c, resultOf(f.Txn))
	case f.Pending:
		m.finish(c, result{status: "PENDING"})
	case f.Err != nil:
		m.finish(c, result{status: codeNames[status.Code(f.Err)]})
	default:
		panic(fmt.Sprintf("call %d shed (%d) in a model without limits", c.n, f.Shed))
	}
}

// startAttempt opens the stream of c's current attempt: the process
// message is the request on its way; the stream is open at once (Opened),
// and the machine reads it.
func (m *model) startAttempt(c *call, lastResort bool) {
	c.gm = gtrside.New(gtrside.Config{CellID: cellName(c.cell), AttemptTimeout: attemptTimeout})
	c.deadlineAt = c.now.Add(attemptTimeout)
	if _, ok := c.gm.Start(c.now).(gtrside.Open); !ok {
		panic("the attempt did not open its stream")
	}
	m.send(msg{kind: mProcess, call: c.n, attempt: c.attempt, cell: c.cell, id: c.id, payload: c.payload,
		lastResort: lastResort})
	m.gtrStep(c, gtrside.Opened{Now: c.now})
}

// gtrStep feeds ev to the machine of c's current attempt and performs
// what follows, until it reads the stream again or answers.
func (m *model) gtrStep(c *call, ev gtrside.Event) {
	a := c.gm.Step(ev)
	for {
		switch act := a.(type) {
		case gtrside.Read:
			return
		case gtrside.Disarm:
			// The standing orders fire only with the model's own steps
			// (attemptTimeout, deadline), which end the attempt or the call
			// at once: a live attempt's are never fired here.
			a = c.gm.Step(gtrside.Disarmed{})
		case gtrside.SendProceed:
			m.sendProceed(c, c.key(), c.cell)
			a = c.gm.Step(gtrside.ProceedSent{Now: c.now})
		case gtrside.ReleaseSlot:
			a = c.gm.Step(gtrside.Released{})
		case gtrside.Answer:
			m.attemptAnswered(c, act)
			return
		default:
			panic(fmt.Sprintf("no GTR driver for action %T", a))
		}
	}
}

// sendProceed puts Proceed on the stream of attempt k at cell i.
func (m *model) sendProceed(c *call, k attemptKey, i int) {
	if k == c.key() && !c.done {
		c.pnr = true
	}
	// A call may send Proceed to a later attempt too, once the earlier
	// one stepped back from a Proceed that came too late: take checks that
	// at most one of them is taken.
	m.proceeded[k] = true
	m.send(msg{kind: mProceed, call: k.call, attempt: k.attempt, cell: i, epoch: m.cells[i].epoch, id: c.id})
}

// attemptAnswered hands the attempt machine's answer to the call machine,
// after the knobs that perturb it: RerouteAfterPNR takes a PENDING of a
// stream that ended after Proceeding for a re-routable failure;
// PendingWithoutProceeding answers PENDING for every attempt sent
// Proceed, as the GTR did before the cell said Proceeding.
func (m *model) attemptAnswered(c *call, a gtrside.Answer) {
	if a.Pending && m.rules.RerouteAfterPNR && !a.Detach {
		a = gtrside.Answer{Reroute: errors.New("stream ended after Proceed")}
	}
	if m.rules.PendingWithoutProceeding && c.pnr && (a.Unknown || a.Reroute != nil) {
		a = gtrside.Answer{Pending: true, Released: a.Released, Detach: a.Detach}
	}
	if a.Unknown {
		m.cover(covUnknown)
	}
	if a.Reroute != nil {
		if m.taken[c.key()] {
			m.violate("no re-route after a PNR: call %d (%s) re-routed after its cell took Proceed (%s)", c.n, c.id, a.Reroute)
		}
		if a.Owner != "" {
			m.cover(covRedirect)
		}
		if c.pnr {
			m.cover(covRerouteLateProceed)
		} else {
			m.cover(covReroute)
		}
		m.logf("call %d (%s) attempt %d on cell %d re-routable: %v (owner %q)", c.n, c.id, c.attempt, c.cell, a.Reroute, a.Owner)
	}
	m.callStep(c, c.cm.Step(gtrside.Attempted{Now: c.now, Answer: a, OwnerKnown: a.Owner != "", OwnerUp: a.Owner != ""}))
}

// streamEnded is the end of the stream of c's current attempt without a
// terminal message: the cell went away, or answered with an error.
func (m *model) streamEnded(c *call, err error) {
	m.gtrStep(c, gtrside.StreamEnded{Now: c.now, Err: err})
}

// broken is a stream of c's current attempt that broke (its cell is down
// or crashed).
func (m *model) broken(c *call, why string) {
	m.streamEnded(c, status.Error(codes.Unavailable, why))
}

// cancel cancels the stream of c's current attempt.
func (m *model) cancel(c *call) {
	m.send(msg{kind: mCancel, call: c.n, attempt: c.attempt, cell: c.cell, id: c.id})
}

// attemptTimeout fires the attempt timer of a live call that has not sent
// Proceed (Disarm stops it): its clock reaches the deadline, the stream is
// cancelled, and the machine reads the stream's end.
func (m *model) attemptTimeout(c *call) {
	c.now = c.deadlineAt
	m.cancel(c)
	m.streamEnded(c, status.Error(codes.Canceled, "attempt timeout"))
}

// deadline is the caller's deadline passing for a live call: CallerGone.
// Before Proceed the caller's watch cancels the stream and the call ends
// DEADLINE_EXCEEDED (the cell stops short of its PNR; a PNR still on its
// way gets no Proceed). After Proceed the machine answers PENDING and the
// stream is left alone, read to its result in the background.
func (m *model) deadline(c *call) {
	if !c.pnr {
		m.cancel(c)
		m.gtrStep(c, gtrside.CallerGone{})
		m.streamEnded(c, status.Error(codes.Canceled, "the caller left"))
		return
	}
	m.gtrStep(c, gtrside.CallerGone{})
}

// onPNR is a PNR arriving at the GTR: the machine of the live attempt
// decides. ProceedAfterTimeout: the driver confirms a PNR of an attempt
// it has given up all the same.
func (m *model) onPNR(x msg) {
	c, ok := m.current(x)
	switch {
	case ok:
		m.gtrStep(c, gtrside.PNR{Now: c.now})
	case !m.rules.ProceedAfterTimeout:
		m.logf("call %d: PNR of an attempt given up, no Proceed", x.call)
	default:
		m.violate("no Proceed for an attempt given up: call %d (%s) attempt %d at cell %d confirmed after the GTR gave it up",
			x.call, x.id, x.attempt, x.cell)
		m.sendProceed(m.calls[x.call], x.key(), x.cell)
	}
}

// onResult is a cell's answer on the stream of x's attempt: a
// transaction (Result), or an error status ending the stream.
func (m *model) onResult(c *call, x msg) {
	switch x.res.status {
	case "ALREADY_EXISTS":
		m.streamEnded(c, status.Error(codes.AlreadyExists, "already used with a different payload"))
	case "ABORTED":
		m.streamEnded(c, status.Error(codes.Aborted, "in progress"))
	case "INVALID_ARGUMENT":
		m.streamEnded(c, status.Error(codes.InvalidArgument, "invalid"))
	default:
		m.gtrStep(c, gtrside.Result{Now: c.now, Txn: answerOf(c.id, x.res)})
	}
}

// codeNames are the gRPC codes' names as partners see them.
var codeNames = map[codes.Code]string{
	codes.Unavailable:      "UNAVAILABLE",
	codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
	codes.AlreadyExists:    "ALREADY_EXISTS",
	codes.Aborted:          "ABORTED",
	codes.InvalidArgument:  "INVALID_ARGUMENT",
	// A follow-up's refusals (followup.go).
	codes.FailedPrecondition: "FAILED_PRECONDITION",
	codes.NotFound:           "NOT_FOUND",
}
