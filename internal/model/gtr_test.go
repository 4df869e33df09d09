package model

import (
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/gtrattempt"
)

// The GTR's half of the handshake is the real machine, gtrattempt.Machine,
// one per attempt; this file is its driver, as payments.go's attempt is
// in the GTR, with each call's own fake clock, which only the attempt
// timer moves (to the attempt's deadline). The call loop around it
// (ranking, the redirect to the owner, the remembered cell) stays model
// code, mirroring payments.go's submit.

// attemptTimeout is payments.Config's AttemptTimeout.
const attemptTimeout = 2 * time.Second

// startAttempt opens the stream of c's current attempt: the process
// message is the request on its way; the stream is open at once (Opened),
// and the machine reads it.
func (m *model) startAttempt(c *call) {
	c.gm = gtrattempt.New(gtrattempt.Config{CellID: cellName(c.ranking[c.attempt]), AttemptTimeout: attemptTimeout})
	c.deadlineAt = c.now.Add(attemptTimeout)
	if _, ok := c.gm.Start(c.now).(gtrattempt.Open); !ok {
		panic("the attempt did not open its stream")
	}
	m.send(msg{kind: mProcess, call: c.n, attempt: c.attempt, cell: c.ranking[c.attempt], id: c.id, payload: c.payload,
		lastResort: c.attempt == len(c.ranking)-1})
	m.gtrStep(c, gtrattempt.Opened{Now: c.now})
}

// gtrStep feeds ev to the machine of c's current attempt and performs
// what follows, until it reads the stream again or answers.
func (m *model) gtrStep(c *call, ev gtrattempt.Event) {
	a := c.gm.Step(ev)
	for {
		switch act := a.(type) {
		case gtrattempt.Read:
			return
		case gtrattempt.Disarm:
			// The standing orders fire only with the model's own steps
			// (attemptTimeout, deadline), which end the attempt or the call
			// at once: a live attempt's are never fired here.
			a = c.gm.Step(gtrattempt.Disarmed{})
		case gtrattempt.SendProceed:
			m.sendProceed(c, c.key(), c.ranking[c.attempt])
			a = c.gm.Step(gtrattempt.ProceedSent{Now: c.now})
		case gtrattempt.ReleaseSlot:
			a = c.gm.Step(gtrattempt.Released{})
		case gtrattempt.Answer:
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
	for p := range m.proceeded {
		if p.call == k.call && p != k {
			m.violate("one Proceed per call: call %d (%s) confirmed attempts %d and %d", k.call, c.id, p.attempt, k.attempt)
		}
	}
	m.proceeded[k] = true
	m.send(msg{kind: mProceed, call: k.call, attempt: k.attempt, cell: i, epoch: m.cells[i].epoch, id: c.id})
}

// attemptAnswered is the call loop on the machine's answer (payments.go
// submit): a transaction, PENDING, a final error, or the next cell.
func (m *model) attemptAnswered(c *call, a gtrattempt.Answer) {
	i := c.ranking[c.attempt]
	switch {
	case a.Txn != nil:
		res := resultOf(a.Txn)
		if c.attempt > 0 {
			m.replicas[c.replica].remember(c.id, i)
		}
		m.finish(c, res)
	case a.Pending && m.rules.RerouteAfterPNR && !a.Detach:
		m.reroute(c, "stream ended after Proceed", -1)
	case a.Pending:
		if a.Detach && m.rules.CancelAfterProceed {
			m.cancel(c)
		}
		m.finish(c, result{status: "PENDING"})
	case a.Final != nil:
		m.finish(c, result{status: codeNames[status.Code(a.Final)]})
	default:
		owner := -1
		if a.Owner != "" {
			owner = cellIndex(a.Owner)
		}
		m.reroute(c, a.Reroute.Error(), owner)
	}
}

// streamEnded is the end of the stream of c's current attempt without a
// terminal message: the cell went away, or answered with an error.
func (m *model) streamEnded(c *call, err error) {
	m.gtrStep(c, gtrattempt.StreamEnded{Now: c.now, Err: err})
}

// broken is a stream of c's current attempt that broke (its cell is down
// or crashed).
func (m *model) broken(c *call, why string) {
	m.streamEnded(c, status.Error(codes.Unavailable, why))
}

// reroute is the call loop's next attempt: owner >= 0 is the cell a
// re-routable answer named as the owner of the ID's directory entry,
// tried next whatever its place in the ranking (or its weight); a call
// that already tried it ends UNAVAILABLE. A ranking never repeats a cell,
// so a call has at most numCells attempts.
func (m *model) reroute(c *call, why string, owner int) {
	if c.pnr {
		m.violate("no re-route after a PNR: call %d (%s) re-routed after Proceed (%s)", c.n, c.id, why)
	}
	if owner >= 0 {
		if slices.Contains(c.ranking[:c.attempt+1], owner) {
			m.logf("call %d (%s): owner cell %d already tried", c.n, c.id, owner)
			m.finish(c, result{status: "UNAVAILABLE"})
			return
		}
		rest := slices.DeleteFunc(slices.Clone(c.ranking[c.attempt+1:]), func(i int) bool { return i == owner })
		c.ranking = append(append(slices.Clone(c.ranking[:c.attempt+1]), owner), rest...)
		why += fmt.Sprintf(", redirected to owner cell %d", owner)
	}
	c.attempt++
	c.pnr = false
	if c.attempt == len(c.ranking) {
		m.finish(c, result{status: "UNAVAILABLE"})
		return
	}
	m.logf("call %d (%s) re-routed to cell %d: %s", c.n, c.id, c.ranking[c.attempt], why)
	m.startAttempt(c)
}

// cancel cancels the stream of c's current attempt.
func (m *model) cancel(c *call) {
	m.send(msg{kind: mCancel, call: c.n, attempt: c.attempt, cell: c.ranking[c.attempt], id: c.id})
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
		m.finish(c, result{status: "DEADLINE_EXCEEDED"})
		c.gm.Step(gtrattempt.CallerGone{})
		return
	}
	m.gtrStep(c, gtrattempt.CallerGone{})
}

// onPNR is a PNR arriving at the GTR: the machine of the live attempt
// decides. ProceedAfterTimeout: the driver confirms a PNR of an attempt
// it has given up all the same.
func (m *model) onPNR(x msg) {
	c, ok := m.current(x)
	switch {
	case ok:
		m.gtrStep(c, gtrattempt.PNR{Now: c.now})
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
		m.gtrStep(c, gtrattempt.Result{Now: c.now, Txn: answerOf(c.id, x.res)})
	}
}

// codeNames are the gRPC codes' names as partners see them.
var codeNames = map[codes.Code]string{
	codes.AlreadyExists:   "ALREADY_EXISTS",
	codes.Aborted:         "ABORTED",
	codes.InvalidArgument: "INVALID_ARGUMENT",
}
