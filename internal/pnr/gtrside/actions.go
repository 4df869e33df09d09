package gtrside

import (
	"time"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// Action is what the machine asks its driver to do next. Answer ends the
// attempt; every other action must be answered with one of the events its
// comment lists.
type Action interface{ isAction() }

// Open opens the attempt's Process stream to the cell and sends it the
// request. It also places two standing orders, in force until Disarm
// stops them: cancel the stream at CancelAt (the attempt timer), and
// cancel it as soon as the caller's context ends. They are orders rather
// than events because they must act while the driver is blocked opening
// the stream, and because Disarm must be atomic with them (see Disarm).
// Answer: Opened; OpenFailed when the stream cannot be opened or the
// request not sent (an io.EOF on the send is not a failure: the stream's
// status then comes from reading it).
type Open struct{ CancelAt time.Time }

// Read waits for the next of: a message from the cell (PNR, Proceeding,
// Result, Reroutable; a message of a kind the driver does not know is skipped),
// the end of the stream (StreamEnded), and, once per attempt, the caller's
// context ending (CallerGone). CallerGone must come before any StreamEnded
// the driver sees after the caller's context has ended, so that the
// machine can tell a slow cell from a caller who left.
type Read struct{}

// Disarm stops both standing orders of Open, the attempt timer and the
// caller watch. Answer: Disarmed when both were stopped before they fired;
// DisarmFailed when either had fired (the stream is being cancelled, and
// the attempt is given up), saying which. After Disarmed nothing but the
// machine ends the stream.
type Disarm struct{}

// SendProceed confirms the cell's point of no return on the stream.
// Answer: ProceedSent; ProceedFailed when the send fails (the Proceed was
// not delivered, so the cell cannot have gone past its PNR).
type SendProceed struct{}

// ReleaseSlot gives back the attempt's slot in the cell's adaptive
// concurrency limit, where the cell's own work ends (what follows is the issuer's),
// with the latency from the stream's opening to the point of no return.
// Answer: Released.
type ReleaseSlot struct{ Latency time.Duration }

// Answer ends the attempt. Exactly one of Txn, Pending, Unknown, Final
// and Reroute is set.
type Answer struct {
	// Txn is the cell's answer for the transaction.
	Txn *cellpayv1.Transaction
	// Pending: the transaction is past its point of no return on this
	// cell and its outcome did not reach the GTR; answer PENDING for this
	// cell (GetTransaction reads it later).
	Pending bool
	// Unknown: Proceed was sent, but the stream ended before the cell
	// said Proceeding: the cell may be calling the issuer, or may have
	// stepped back (the Proceed reached it too late, or never). Neither
	// PENDING (a promise the cell may not keep: a record it stepped back
	// from is resolved by no one) nor a re-route (the cell may be calling
	// the issuer): the caller is told to retry with the same ID, which
	// reads the truth.
	Unknown bool
	// Final is an error for the caller: the cell's answer about the
	// request itself, the same on any cell.
	Final error
	// Reroute: the attempt ended before the point of no return; the
	// transaction may be restarted on the next cell.
	Reroute error
	// CellHealthy (with Reroute): the cell said nothing is wrong with it;
	// the transaction belongs elsewhere.
	CellHealthy bool
	// Owner (with Reroute): the cell that owns the transaction in the
	// transaction directory, to try next; "" when the cell named none.
	Owner string
	// Slow (with Reroute): the attempt timer ended the attempt, not the
	// caller and not the cell: the cell is slow (its adaptive limit's
	// business), not failed.
	Slow bool
	// Gone (with Reroute): the caller left before the point of no return.
	// The attempt says nothing of the cell, neither failure nor
	// slowness: a partner that cancels its calls must not get a cell
	// ejected, nor its limit lowered, for every other partner.
	Gone bool
	// Released: ReleaseSlot was performed; the slots are given back.
	Released bool
	// Detach: the stream is past Proceed and still open. The driver must
	// not cancel it; it reads it on to its end in the background, then
	// ends it. Without Detach, the driver ends the stream now.
	Detach bool
}

func (Open) isAction()        {}
func (Read) isAction()        {}
func (Disarm) isAction()      {}
func (SendProceed) isAction() {}
func (ReleaseSlot) isAction() {}
func (Answer) isAction()      {}

// Event is what happened, fed back through Machine.Step: the outcome of an
// action, or what Read saw. Events that carry Now were observed at that
// time, read from the driver's clock after the fact.
type Event interface{ isEvent() }

// Opened: the stream is open and the request sent.
type Opened struct{ Now time.Time }

// OpenFailed: the stream could not be opened or the request not sent.
type OpenFailed struct{ Err error }

// PNR: the cell announced its point of no return and waits for Proceed.
type PNR struct{ Now time.Time }

// Result: the cell's final answer for the transaction.
type Result struct {
	Now time.Time
	Txn *cellpayv1.Transaction
}

// Proceeding: the cell received Proceed and calls the issuer; from here
// the transaction is the cell's.
type Proceeding struct{}

// Reroutable: the cell stopped before its point of no return.
type Reroutable struct {
	Now         time.Time
	Reason      string
	CellHealthy bool
	Owner       string // the transaction's owner, when the cell named one
}

// StreamEnded: the stream ended without a terminal message; Err is what
// reading it returned (io.EOF when the cell closed it cleanly).
type StreamEnded struct {
	Now time.Time
	Err error
}

// CallerGone: the caller's context ended.
type CallerGone struct{}

// Disarmed: both standing orders were stopped before they fired.
type Disarmed struct{}

// DisarmFailed: a standing order had already fired. Timer: it was the
// attempt timer (the cell was slow); otherwise the caller's watch (the
// caller left).
type DisarmFailed struct{ Timer bool }

// ProceedSent: Proceed was sent.
type ProceedSent struct{ Now time.Time }

// ProceedFailed: sending Proceed failed.
type ProceedFailed struct{ Err error }

// Released: the slots were given back.
type Released struct{}

func (Opened) isEvent()        {}
func (OpenFailed) isEvent()    {}
func (PNR) isEvent()           {}
func (Result) isEvent()        {}
func (Proceeding) isEvent()    {}
func (Reroutable) isEvent()    {}
func (StreamEnded) isEvent()   {}
func (CallerGone) isEvent()    {}
func (Disarmed) isEvent()      {}
func (DisarmFailed) isEvent()  {}
func (ProceedSent) isEvent()   {}
func (ProceedFailed) isEvent() {}
func (Released) isEvent()      {}
