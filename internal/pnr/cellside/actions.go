package cellside

import (
	"time"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// Action is what the machine asks its driver to do next. Reply, Reject and
// Reroute end the attempt; every other action must be answered with one of
// the events its comment lists.
type Action interface{ isAction() }

// Claim makes this cell the transaction's owner in the transaction
// directory, before anything is written: Create of Entry, or, when Revision
// is set, a takeover of the entry read at that revision. Answer: Claimed
// when the entry is this cell's (new, taken over, or already its own);
// Held with the entry when another cell holds it; ClaimFailed when the
// directory did not answer.
type Claim struct {
	Key   idempotency.Key
	Entry Entry
	// Revision, when not zero, makes the claim a takeover of the entry at
	// that revision.
	Revision uint64
}

// Insert records a new transaction in state received. Answer: Inserted;
// Existing when its Key (partner and transaction ID) is already recorded;
// StoreFailed.
type Insert struct{ Record *Record }

// Reclaim takes over an abandoned record for a new attempt, only if it is
// still abandoned. Answer as for Insert.
type Reclaim struct{ Record *Record }

// Wait waits until another attempt at the same transaction (Key) in this
// cell settles: its record leaves state received, and is not in sending
// while that attempt still runs (it may step back). Answer: Existing with
// the record as it now is; StoreFailed when it does not settle in time.
type Wait struct{ Key idempotency.Key }

// CheckVelocity sums this card's transactions since Since that were not
// declined, failed or abandoned, leaving the transaction Exclude out. A card
// is counted across partners, and under every key of the cell: a row
// counts when its (key ID, hash) pair is one of PANHashes (the current key
// first). Answer: Velocity; StoreFailed.
type CheckVelocity struct {
	PANHashes []card.KeyedHash
	Since     time.Time
	Exclude   idempotency.Key
}

// Persist durably writes Record, only if the stored state is still From.
// Answer: Persisted; StoreFailed (including when the state was not From).
//
// OrFrom, when set, is the state the record may be in instead of From:
// the write that was to bring it from OrFrom to From failed, and may have
// committed all the same (a connection lost with its commit on the way,
// as when the database fails over: the standby had it). The state alone
// then no longer tells this attempt's row from another's, so the write
// applies only to the row this attempt wrote (its instance, attempt and
// creation time).
//
// Decided: the transaction directory holds this outcome already (a
// decision before the point of no return, recorded there first): the
// write is made whatever became of the caller, and tried again if it
// fails, since the directory answers with it from now on.
type Persist struct {
	Record  *Record
	From    State
	OrFrom  State
	Decided bool
}

// EmitPNR asks the GTR to confirm the point of no return: the sending
// state is durable, and the issuer is next. Answer: PNRConfirmed when the
// GTR answers Proceed (it will never re-route the transaction); PNRRefused
// when it does not (it gave up on this attempt or went away), and the
// issuer must not be called.
type EmitPNR struct{ Key idempotency.Key }

// Authorize sends the transaction to the issuer. Answer: IssuerAnswered;
// IssuerUnknown when the outcome is unknown (timeout, lost connection).
type Authorize struct {
	Request *cellpayv1.SubmitTransactionRequest
	Record  *Record
}

// Reply ends the attempt with Record's outcome.
type Reply struct{ Record *Record }

// ReplyEntry ends the attempt with the answer another cell, the
// transaction's owner, recorded in the directory.
type ReplyEntry struct{ Entry Entry }

// Reject ends the attempt with an error for the caller: a
// *validate.FieldError, idempotency.ErrConflict or ErrInProgress.
type Reject struct{ Err error }

// Reroute ends an attempt that stopped before the point of no return: the
// GTR may restart it on another cell.
type Reroute struct {
	Reason string
	// CellHealthy: nothing is wrong with this cell; the transaction belongs
	// elsewhere.
	CellHealthy bool
	// Owner, when set, is the cell that owns the transaction: the GTR's
	// next attempt goes there.
	Owner string
}

func (Claim) isAction()         {}
func (ReplyEntry) isAction()    {}
func (Insert) isAction()        {}
func (Reclaim) isAction()       {}
func (Wait) isAction()          {}
func (CheckVelocity) isAction() {}
func (Persist) isAction()       {}
func (EmitPNR) isAction()       {}
func (Authorize) isAction()     {}
func (Reply) isAction()         {}
func (Reject) isAction()        {}
func (Reroute) isAction()       {}

// Done reports whether a ends the attempt.
func Done(a Action) bool {
	switch a.(type) {
	case Reply, ReplyEntry, Reject, Reroute:
		return true
	}
	return false
}

// Event is the outcome of an action, fed back through Machine.Step.
type Event interface{ isEvent() }

// Claimed: the directory entry is this cell's, as Entry (with its
// revision). Active is true when another attempt at the transaction is
// still running in this cell, in any of its instances; the machine does
// not read it (it reads Existing's), and a driver may leave it false.
type Claimed struct {
	Entry  Entry
	Active bool
}

// Held: another cell holds the transaction's directory entry, as Entry.
type Held struct{ Entry Entry }

// ClaimFailed: the directory did not answer; nothing is known of the
// entry. Outage: the directory has been unavailable to this cell for
// longer than one operation's bound (every operation the driver saw in
// that time failed); false for one slow or failed claim, which says
// nothing of whether another cell has claimed the transaction since.
type ClaimFailed struct {
	Err    error
	Outage bool
}

// Inserted: the record was written.
type Inserted struct{}

// Existing: the transaction's Key is already recorded, as Record. Active is
// true when another attempt at the transaction is still running in this
// cell, in this instance or a sibling sharing its database (its record in
// sending may yet step back to abandoned): the driver reads it from the
// durable state (the record's owner and the owner's lease), never from a
// process's memory, which a sibling's attempt is not in.
type Existing struct {
	Record *Record
	Active bool
}

// Velocity: the card's recent count and total in the limit currency.
type Velocity struct{ Count, Amount int64 }

// Persisted: the write is durable.
type Persisted struct{}

// PNRConfirmed: the GTR answered Proceed.
type PNRConfirmed struct{}

// PNRRefused: the GTR did not confirm the point of no return.
type PNRRefused struct{ Err error }

// IssuerAnswered: the issuer's decision.
type IssuerAnswered struct {
	Approved      bool
	AuthCode      string
	DeclineReason string
}

// IssuerUnknown: the issuer call ended without a decision.
type IssuerUnknown struct{ Err error }

// StoreFailed: a store action failed.
type StoreFailed struct{ Err error }

func (Claimed) isEvent()        {}
func (Held) isEvent()           {}
func (ClaimFailed) isEvent()    {}
func (Inserted) isEvent()       {}
func (Existing) isEvent()       {}
func (Velocity) isEvent()       {}
func (Persisted) isEvent()      {}
func (PNRConfirmed) isEvent()   {}
func (PNRRefused) isEvent()     {}
func (IssuerAnswered) isEvent() {}
func (IssuerUnknown) isEvent()  {}
func (StoreFailed) isEvent()    {}
