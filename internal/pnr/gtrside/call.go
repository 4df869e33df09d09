package gtrside

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// Call decides one partner call across cells: whether the GTR admits it,
// which cell each attempt goes to (the ranking, a redirect to the cell the
// transaction directory names as the owner, a cell skipped at its
// concurrency limit), when a re-route may be spent, and what the partner
// is told. Each attempt on a cell is a Machine of its own, which the
// driver runs between Try and Attempted.
//
// Like Machine it is deterministic and performs no I/O: the driver
// (cmd/gtr/internal/payments) performs each CallAction and feeds back a
// CallEvent; time comes in with the events. The model (internal/dev/model)
// drives the same code.
//
// The rule it keeps beside Machine's: an attempt is followed by another
// only when the Machine answered Reroute (before the point of no return);
// every other answer ends the call with it.
type Call struct {
	cfg      CallConfig
	step     callStep
	cells    []string // the ranking, as routed, then redirected
	buf      [8]string
	next     int // the ranking's next place to try
	attempts int // places that may be tried
	tried    int // attempts made (a busy cell is skipped, not tried)
	// failed: the last attempt re-routed (not to the owner the directory
	// named), so the next one spends from the retry budget. busy: a cell was skipped at its limit; retry is the
	// soonest of those cells' hints. sent: an attempt reached a cell.
	failed, busy, sent, redirected bool
	retry                          time.Duration
	last                           error // why the last place was not used
}

// CallConfig frames one call.
type CallConfig struct {
	// MaxAttempts bounds the cells tried; a redirect to the owner adds
	// one. It must be at least 1.
	MaxAttempts int
	// MinAttemptTime: no attempt starts with less than this left before
	// Deadline.
	MinAttemptTime time.Duration
	// Deadline is the caller's.
	Deadline time.Time
}

type callStep uint8

const (
	callAdmit callStep = iota // Admit performed, awaiting Admitted
	callRoute                 // Route performed, awaiting Routed
	callRetry                 // AskRetry performed, awaiting RetryAnswer
	callTry                   // Try performed, awaiting Busy or Attempted
	callDone
)

// NewCall returns the machine of one call; Start begins it.
func NewCall(cfg CallConfig) *Call { return &Call{cfg: cfg} }

// CallAction is what the call asks its driver to do next. Finish ends the
// call; every other action must be answered with one of the events its
// comment lists.
type CallAction interface{ isCallAction() }

// Admit takes the call's slot in the GTR-wide adaptive limit (the whole
// platform's concurrency, this partner's fair share of it). Answer:
// Admitted. The slot is held to the call's end and given back with
// Finish's GTRSample.
type Admit struct{}

// Route ranks the cells for the transaction (pkg/routing), with a cell
// that completed it before promoted first. Answer: Routed.
type Route struct{}

// AskRetry asks the retry budget for one re-route. Answer: RetryAnswer.
type AskRetry struct{}

// Try takes a slot in Cell's adaptive limit and, if one is free, runs
// attempt number Attempt on it (a Machine). Answer: Busy when the cell
// is at its limit (nothing was sent); Attempted with the Machine's Answer
// otherwise. LastResort: no cell will be tried after this one.
type Try struct {
	Cell       string
	Attempt    int32
	LastResort bool
}

// Shed is why a call was refused for load, before reaching any cell that
// took it.
type Shed uint8

const (
	NotShed    Shed = iota
	ShedRouter      // the GTR-wide limit: the platform as a whole is full
	ShedCells       // every cell that could take it is at its limit
)

// Finish ends the call. Exactly one of Txn, Pending, Err and Shed is set.
type Finish struct {
	// Txn is a cell's answer for the transaction.
	Txn *cellpayv1.Transaction
	// Pending: the transaction is past its point of no return on Cell and
	// its outcome did not reach the GTR: answer PENDING for Cell.
	Pending bool
	Cell    string
	// Err is the error the caller gets: a cell's answer about the request,
	// or a gRPC status saying why no cell answered.
	Err error
	// Shed: refused for load (RESOURCE_EXHAUSTED with RetryAfter).
	// Sent (with ShedCells): a cell refused the transaction before its
	// point of no return first, so nothing was charged.
	Shed       Shed
	RetryAfter time.Duration
	Sent       bool
	// Remember: a cell other than the ranking's first holds the
	// transaction; replays should go straight to Cell.
	Remember bool
	// Tried is the number of attempts made.
	Tried int
	// GTRSample is what the call tells the GTR-wide limit as it gives its
	// slot back (nothing when it was never admitted).
	GTRSample Sample
}

func (Admit) isCallAction()    {}
func (Route) isCallAction()    {}
func (AskRetry) isCallAction() {}
func (Try) isCallAction()      {}
func (Finish) isCallAction()   {}

// CallEvent is what happened, fed back through Call.Step. Now is the
// driver's clock when it happened.
type CallEvent interface{ isCallEvent() }

// Admitted answers Admit: OK, or the limit's RetryAfter hint.
type Admitted struct {
	OK         bool
	RetryAfter time.Duration
}

// Routed answers Route: the ranking's cell IDs, best first (the call keeps
// a copy), or Err, a gRPC status for the caller (no rule, no cell).
type Routed struct {
	Now   time.Time
	Cells []string
	Err   error
}

// RetryAnswer answers AskRetry.
type RetryAnswer struct {
	Now time.Time
	OK  bool
}

// Busy answers Try: the cell is at its limit; RetryAfter is its hint.
type Busy struct {
	Now        time.Time
	RetryAfter time.Duration
}

// Attempted answers Try: the attempt's Answer. OwnerKnown: Answer.Owner
// names a cell of the routing table in force; OwnerUp: and that cell is
// up in it (not ejected).
type Attempted struct {
	Now        time.Time
	Answer     Answer
	OwnerKnown bool
	OwnerUp    bool
}

func (Admitted) isCallEvent()    {}
func (Routed) isCallEvent()      {}
func (RetryAnswer) isCallEvent() {}
func (Busy) isCallEvent()        {}
func (Attempted) isCallEvent()   {}

// Start begins the call: Admit.
func (c *Call) Start() CallAction {
	c.step = callAdmit
	return Admit{}
}

// Step feeds e, the answer to the last action, and returns the next
// action. An event that does not answer the last action is a driver bug:
// it panics.
func (c *Call) Step(e CallEvent) CallAction {
	switch e := e.(type) {
	case Admitted:
		c.expect(callAdmit, "Admitted")
		if !e.OK {
			return c.finish(Finish{Shed: ShedRouter, RetryAfter: e.RetryAfter, GTRSample: SampleNone})
		}
		c.step = callRoute
		return Route{}
	case Routed:
		c.expect(callRoute, "Routed")
		if e.Err != nil {
			return c.finish(Finish{Err: e.Err})
		}
		// A copy, in the call's own array for the usual few cells: a
		// redirect rewrites the call's ranking, never the driver's.
		c.cells = append(c.buf[:0], e.Cells...)
		c.attempts = min(len(c.cells), c.cfg.MaxAttempts)
		return c.advance(e.Now)
	case RetryAnswer:
		c.expect(callRetry, "RetryAnswer")
		if !e.OK {
			if c.busy {
				return c.shedCells()
			}
			return c.finish(Finish{Err: status.Errorf(codes.Unavailable, "retry budget exhausted; last attempt: %v", c.last)})
		}
		c.failed = false
		return c.try(e.Now)
	case Busy:
		c.expect(callTry, "Busy")
		c.busy = true
		if c.retry == 0 || e.RetryAfter < c.retry {
			c.retry = e.RetryAfter
		}
		c.last = fmt.Errorf("cell %s is at its concurrency limit", c.cells[c.next])
		c.next++
		return c.advance(e.Now)
	case Attempted:
		c.expect(callTry, "Attempted")
		return c.attempted(e)
	}
	panic("gtrside: unknown call event")
}

// expect panics unless the call awaits an answer of step s. It takes
// the event's name, not the event, so that Step's events stay off the heap.
func (c *Call) expect(s callStep, event string) {
	if c.step != s {
		panic("gtrside: call event " + event + " out of turn")
	}
}

// advance moves to the ranking's next place: the retry budget first after
// a re-route, then the attempt.
func (c *Call) advance(now time.Time) CallAction {
	if c.next >= c.attempts {
		if c.busy {
			return c.shedCells()
		}
		return c.finish(Finish{Err: status.Errorf(codes.Unavailable, "no cell could take the transaction: %v", c.last)})
	}
	if c.failed {
		c.step = callRetry
		return AskRetry{}
	}
	return c.try(now)
}

func (c *Call) try(now time.Time) CallAction {
	if c.cfg.Deadline.Sub(now) < c.cfg.MinAttemptTime {
		return c.finish(Finish{Err: status.Errorf(codes.DeadlineExceeded, "not enough time left for another attempt; last: %v", c.last)})
	}
	c.step = callTry
	return Try{Cell: c.cells[c.next], Attempt: int32(c.next + 1), LastResort: c.next == c.attempts-1}
}

func (c *Call) attempted(e Attempted) CallAction {
	a := e.Answer
	cell := c.cells[c.next]
	c.tried = c.next + 1
	c.sent = true
	switch {
	case a.Gone:
		// The caller left before the PNR: nothing to re-route, and nothing
		// learned of the cell, nor of the platform's load.
		return c.finish(Finish{Err: status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error()),
			GTRSample: SampleIgnored})
	case a.Unknown:
		// Proceed went out, and the stream ended before the cell said it
		// had it: the transaction may be there, so replays go there first.
		return c.finish(Finish{Err: status.Errorf(codes.Unavailable,
			"cell %s: the stream ended after the point of no return was confirmed and before the cell took it; the outcome is not known yet: retry with the same transaction ID", cell),
			Cell: cell, Remember: c.next > 0, GTRSample: SampleIgnored})
	case a.Reroute == nil:
		return c.finish(Finish{Txn: a.Txn, Pending: a.Pending, Cell: cell, Err: a.Final,
			Remember: c.next > 0 && (a.Txn != nil || a.Pending)})
	}
	c.last, c.failed = a.Reroute, true
	if a.Owner != "" && a.Owner != cell && !c.redirected && e.OwnerKnown {
		// The transaction directory names the cell that owns the
		// transaction: its state is there, so the next attempt goes there,
		// whatever its weight (a drained cell still answers for what it
		// owns). Once per call. To an owner that is up, not from the retry
		// budget: the cell asked answered, with where the transaction is,
		// so the attempt there is routing, not a retry of a failure (at
		// most one more per call); spending the budget on it would, when a
		// cell has just failed and its re-routes have spent the budget,
		// refuse the one attempt that can answer (the restarted owner's).
		// To an owner that is down, from the budget as any re-route: it is
		// load on a sick cell, and a spent budget answers UNAVAILABLE at
		// once (retry later) rather than wait on it.
		c.redirected = true
		c.failed = !e.OwnerUp
		c.cells = redirect(c.cells, c.next+1, a.Owner)
		c.attempts = min(len(c.cells), c.cfg.MaxAttempts+1)
	}
	if !e.Now.Before(c.cfg.Deadline) {
		return c.finish(Finish{Err: status.Errorf(codes.DeadlineExceeded, "deadline passed before the transaction started on a cell; last: %v", c.last)})
	}
	c.next++
	return c.advance(e.Now)
}

func (c *Call) shedCells() CallAction {
	return c.finish(Finish{Shed: ShedCells, RetryAfter: c.retry, Sent: c.sent})
}

// finish ends the call with f, filling in what the call knows. Every
// answer but the caller leaving and a deadline passing (Dropped) is
// Served to the GTR-wide limit, unless f says otherwise.
func (c *Call) finish(f Finish) CallAction {
	c.step = callDone
	f.Tried = c.tried
	if f.GTRSample == SampleServed && status.Code(f.Err) == codes.DeadlineExceeded {
		f.GTRSample = SampleDropped
	}
	return f
}

// redirect returns cells with owner as the place after the first next
// ones, and owner's place further down dropped, in a new slice.
func redirect(cells []string, next int, owner string) []string {
	out := make([]string, 0, len(cells)+1)
	out = append(out, cells[:next]...)
	out = append(out, owner)
	for _, c := range cells[next:] {
		if c != owner {
			out = append(out, c)
		}
	}
	return out
}
