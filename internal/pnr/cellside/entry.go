package cellside

import (
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// EntryState is where a transaction's directory entry stands (see
// docs/design/transaction-directory.md).
type EntryState string

const (
	// EntryOwned: the owner may be working on the transaction, past its
	// point of no return included. Only the owner decides it.
	EntryOwned EntryState = "owned"
	// EntryAbandoned: the owner stopped before its point of no return and
	// will never call the issuer for this claim; another cell may take it
	// over.
	EntryAbandoned EntryState = "abandoned"
	// EntryFinal: the owner recorded an outcome; Answer holds it.
	EntryFinal EntryState = "final"
)

// Entry is a transaction's entry in the transaction directory: which cell
// owns it and, once final, its answer.
type Entry struct {
	// Owner is the cell that owns the transaction.
	Owner string
	// Call and Attempt name the GTR call and attempt that claimed it: a
	// later attempt of the same call may take over an entry still owned,
	// since the GTR moves on only before it confirmed the earlier one.
	Call    string
	Attempt int32
	// Fingerprint is the payload's, under the key FingerprintKeyID names
	// (every cell derives the same fingerprint keys from the same master,
	// so that fingerprints compare across cells).
	Fingerprint      idempotency.Fingerprint
	FingerprintKeyID string
	State            EntryState
	// Answer is the owner's recorded answer when final: the transaction as
	// partners see it (masked card, no PAN).
	Answer *cellpayv1.Transaction
	// Pinned: the owner answered PENDING from a sending record that no
	// attempt of its was working on (a crash's leftover, whose attempt the
	// GTR may have given up). That answer promises the owner resolves it,
	// so a later attempt of Call no longer takes the entry over. A new
	// claim of the entry clears it.
	Pinned bool
	// Revision is the entry's revision in the directory; a takeover is
	// conditional on it.
	Revision uint64
	// Released: an operator declared Owner lost for good after it wrote
	// this entry (gtrctl release), and the entry is not final: any
	// cell may take it over, and resolves it by inquiry at the issuer
	// (the owner may have sent it), never by deciding it again. Read from
	// the directory, never written in an entry.
	Released bool
}

// SameAttempt reports whether e was claimed by call's attempt.
func (e Entry) SameAttempt(call string, attempt int32) bool {
	return e.Call == call && e.Attempt == attempt
}

// MayTakeOver reports whether an attempt of call, numbered attempt, may
// take over e, another cell's entry: the owner abandoned it, or it is the
// claim of an earlier attempt of the same GTR call, which the GTR gave up
// before confirming its point of no return (it moves a call on only then),
// so that its cell never calls the issuer for it.
func (e Entry) MayTakeOver(call string, attempt int32) bool {
	switch e.State {
	case EntryAbandoned:
		return true
	case EntryOwned:
		return !e.Pinned && call != "" && e.Call == call && e.Attempt < attempt
	}
	return false
}
