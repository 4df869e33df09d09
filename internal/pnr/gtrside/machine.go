// Package gtrside decides what the GTR does with a partner's call: Call,
// the call across cells (admission, the ranking, re-routes, the answer),
// and Machine, one attempt at the transaction on one cell: the GTR's half
// of the point-of-no-return handshake, the twin of the cell's
// (internal/pnr/cellside). Both are deterministic state machines
// with no I/O: the driver (cmd/gtr/internal/payments) asks it for an
// Action, performs it on the cell's Process stream, its timers or the
// caller's context, and feeds what happened back as an Event. Time comes
// in with the events and goes out as deadlines; the machine never reads a
// clock, so every path can be tested, and replayed as a transcript,
// without a network or a timer, and a model of the protocol can drive
// this code rather than a copy of it.
//
// The rule it exists to keep: Proceed is sent only for an attempt that is
// still ours (its attempt timer has not fired, its caller is still there,
// and the standing orders that would cancel its stream were stopped before
// they fired); before Proceed, every way the attempt ends may re-route the
// transaction; after it, only the cell's own Reroutable does (it stepped
// back without calling the issuer: the Proceed came too late), and the
// stream is never cancelled while it may still carry the transaction's
// outcome. Once the cell said Proceeding, the cell owns the transaction,
// and the caller is answered PENDING if its answer is not there; a stream
// that ends between Proceed and Proceeding leaves the outcome unknown
// (Answer.Unknown), never a PENDING that no one may resolve.
//
// It must never block, read the clock or perform I/O.
package gtrside

import (
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Config configures the machine of one attempt.
type Config struct {
	// CellID names the cell in the reasons the machine gives.
	CellID string
	// AttemptTimeout bounds the attempt up to its point of no return,
	// from Start.
	AttemptTimeout time.Duration
}

type phase uint8

const (
	phaseStart   phase = iota
	phaseOpen          // Open performed, awaiting Opened
	phaseRead          // reading the stream (before or after Proceed)
	phaseDisarm        // a PNR arrived in time; Disarm performed
	phaseProceed       // SendProceed performed
	phaseRelease       // Proceed sent; ReleaseSlot performed
	phaseDone
)

var phaseNames = [...]string{"start", "open", "read", "disarm", "proceed", "release", "done"}

func (p phase) String() string { return phaseNames[p] }

// Machine runs one attempt on one cell. It is not safe for concurrent
// use; a driver owns it for the attempt's life.
type Machine struct {
	cfg      Config
	phase    phase
	deadline time.Time // the attempt timer's
	began    time.Time // the stream opened and the request sent
	// gone: the caller's context ended (CallerGone). proceeded: Proceed
	// was sent. taken: the cell said Proceeding; the transaction is the
	// cell's. released: the slots were given back at the PNR.
	gone, proceeded, taken, released bool
	ans                              Answer // once phaseDone
}

// New returns the machine of one attempt.
func New(cfg Config) *Machine { return &Machine{cfg: cfg} }

// Proceeded reports whether Proceed was sent: from then on the attempt is
// never re-routed.
func (m *Machine) Proceeded() bool { return m.proceeded }

// Done reports whether a ends the attempt.
func Done(a Action) bool {
	_, ok := a.(Answer)
	return ok
}

// errNoOutcome replaces the io.EOF of a stream the cell closed without a
// terminal message.
var errNoOutcome = errors.New("cell closed the stream without an outcome")

// Start begins the attempt at now and returns the first action.
func (m *Machine) Start(now time.Time) Action {
	if m.phase != phaseStart {
		return m.unexpected(fmt.Errorf("Start called in phase %v", m.phase))
	}
	m.deadline = now.Add(m.cfg.AttemptTimeout)
	m.phase = phaseOpen
	return Open{CancelAt: m.deadline}
}

// Step feeds what happened after the last action and returns the next
// one. After the attempt has ended, Step returns its Answer again.
func (m *Machine) Step(ev Event) Action {
	switch m.phase {
	case phaseOpen:
		switch ev := ev.(type) {
		case Opened:
			m.began = ev.Now
			m.phase = phaseRead
			return Read{}
		case OpenFailed:
			return m.answer(Answer{Reroute: ev.Err})
		}
	case phaseRead:
		return m.read(ev)
	case phaseDisarm:
		switch ev := ev.(type) {
		case Disarmed:
			m.phase = phaseProceed
			return SendProceed{}
		case DisarmFailed:
			// The timer or the caller's watch fired between the PNR and
			// now: the stream is being cancelled, the attempt is given up.
			if !ev.Timer {
				m.gone = true
			}
			return m.answer(m.givenUp())
		}
	case phaseProceed:
		switch ev := ev.(type) {
		case ProceedSent:
			// From here the transaction belongs to this cell.
			m.proceeded = true
			m.phase = phaseRelease
			return ReleaseSlot{Latency: ev.Now.Sub(m.began)}
		case ProceedFailed:
			// Not delivered: the cell cannot have gone past its PNR.
			return m.answer(Answer{Reroute: fmt.Errorf("cell %s: confirming the point of no return: %w", m.cfg.CellID, ev.Err)})
		}
	case phaseRelease:
		if _, ok := ev.(Released); ok {
			m.released = true
			m.phase = phaseRead
			return Read{}
		}
	case phaseDone:
		return m.ans
	}
	return m.unexpected(fmt.Errorf("unexpected event %s in phase %v", name(ev), m.phase))
}

// read handles what Read saw.
func (m *Machine) read(ev Event) Action {
	switch ev := ev.(type) {
	case PNR:
		if m.proceeded {
			return Read{} // a duplicate
		}
		// The handshake: confirm only if this attempt is still ours. A
		// timer that fired, or a caller that left, has given the attempt
		// up, and the cell, hearing nothing, will not call the issuer.
		if m.gone || !ev.Now.Before(m.deadline) {
			return m.answer(m.givenUp())
		}
		m.phase = phaseDisarm
		return Disarm{}
	case Proceeding:
		if m.proceeded {
			m.taken = true
		}
		return Read{}
	case Result:
		return m.answer(Answer{Txn: ev.Txn, Released: m.released})
	case Reroutable:
		if m.taken {
			// A cell must never say this after Proceeding; if one does,
			// trust the Proceeding and do not re-route.
			return m.pending(false)
		}
		// Before Proceeding, a cell that stepped back is believed, Proceed
		// sent or not: it stepped back without calling the issuer (its
		// wait for the Proceed ended first), and nothing of this attempt
		// can reach the issuer any more.
		return m.answer(Answer{Reroute: fmt.Errorf("cell %s: %s", m.cfg.CellID, ev.Reason), CellHealthy: ev.CellHealthy, Owner: ev.Owner,
			Released: m.released})
	case StreamEnded:
		return m.broken(ev)
	case CallerGone:
		m.gone = true
		if m.proceeded {
			// Never cancel a stream past Proceed: the cell may yet take the
			// Proceed and send the outcome, read on in the background.
			// Before Proceeding, the outcome is unknown to this caller.
			if !m.taken {
				return m.answer(Answer{Unknown: true, Released: m.released, Detach: true})
			}
			return m.pending(true)
		}
		return Read{} // the caller's watch cancels the stream
	}
	return m.unexpected(fmt.Errorf("unexpected event %s in phase %v", name(ev), m.phase))
}

// broken handles a stream that ended without a terminal message.
func (m *Machine) broken(ev StreamEnded) Action {
	if m.taken {
		return m.pending(false)
	}
	if m.proceeded {
		return m.answer(Answer{Unknown: true, Released: m.released})
	}
	err := ev.Err
	if err == nil || errors.Is(err, io.EOF) {
		err = errNoOutcome
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.AlreadyExists, codes.Aborted:
		// The cell's answer about the request itself: the same anywhere.
		return m.answer(Answer{Final: err})
	}
	// Slow: the attempt's own timer ended it, not the caller and not the
	// cell: the cell is slow, which its limit answers; whether it is dead,
	// health decides.
	slow := !m.gone && !ev.Now.Before(m.deadline)
	return m.answer(Answer{Reroute: fmt.Errorf("cell %s: %w", m.cfg.CellID, err), Slow: slow, Gone: m.gone})
}

// givenUp answers a PNR that came after the attempt was given up: by the
// caller (Gone), or else by the attempt timer (Slow: the cell reached its
// PNR, late; it did not fail).
func (m *Machine) givenUp() Answer {
	return Answer{Reroute: fmt.Errorf("cell %s: point of no return after the attempt was given up", m.cfg.CellID), Slow: !m.gone, Gone: m.gone}
}

// pending answers for a transaction past its point of no return whose
// outcome did not arrive.
func (m *Machine) pending(detach bool) Action {
	return m.answer(Answer{Pending: true, Released: m.released, Detach: detach})
}

func (m *Machine) answer(a Answer) Action {
	m.phase = phaseDone
	m.ans = a
	return a
}

// unexpected handles a driver bug: before Proceed may have been sent the
// attempt is given up as re-routable; after, its outcome is unknown (or,
// once the cell said Proceeding, PENDING), and its stream is left to end
// by itself.
func (m *Machine) unexpected(err error) Action {
	if m.phase == phaseDone {
		return m.ans
	}
	if m.taken {
		return m.pending(true)
	}
	if m.proceeded || m.phase == phaseProceed {
		return m.answer(Answer{Unknown: true, Released: m.released, Detach: true})
	}
	return m.answer(Answer{Reroute: fmt.Errorf("cell %s: gtrside: %w", m.cfg.CellID, err)})
}

// name names an event for the reason of an unexpected one (without
// fmt's %T, which would move every event to the heap).
func name(ev Event) string {
	switch ev.(type) {
	case Opened:
		return "Opened"
	case OpenFailed:
		return "OpenFailed"
	case PNR:
		return "PNR"
	case Result:
		return "Result"
	case Proceeding:
		return "Proceeding"
	case Reroutable:
		return "Reroutable"
	case StreamEnded:
		return "StreamEnded"
	case CallerGone:
		return "CallerGone"
	case Disarmed:
		return "Disarmed"
	case DisarmFailed:
		return "DisarmFailed"
	case ProceedSent:
		return "ProceedSent"
	case ProceedFailed:
		return "ProceedFailed"
	case Released:
		return "Released"
	case nil:
		return "nil"
	}
	return "unknown"
}
