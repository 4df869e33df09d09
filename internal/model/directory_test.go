package model

import "fmt"

// The transaction directory (docs/design/transaction-directory.md): one
// entry per ID, shared by all cells, each write a compare-and-set at the
// revision read. The model's directory is a map, and its operations are
// atomic steps: a JetStream KV bucket is linearizable per key, and the
// model assumes NATS is always reachable (the design note's NATS-outage
// fallback, natural homes going on without a claim, is not modelled).

type entryState string

const (
	entryOwned     entryState = "owned"
	entryAbandoned entryState = "abandoned"
	entryFinal     entryState = "final"
)

// entry is one directory entry.
type entry struct {
	rev     int // bumped by every write; 0 is no revision
	owner   int
	by      attemptKey // the attempt that claimed it (created, took over or reclaimed)
	payload payload
	state   entryState
	res     result // the owner's answer, once final
	// pinned: the owner answered PENDING from its sending record while no
	// attempt in its process worked on it (a leftover of a crash, whose
	// attempt the GTR may have given up before Proceed). The answer is a
	// promise that the owner resolves the record, so a later attempt of
	// the claiming call no longer takes the entry over.
	pinned bool
}

// claimed is what the claim step tells the cell.
type claimed int

const (
	// replied: the claim answered the attempt itself (ALREADY_EXISTS, a
	// final entry's answer, or re-routable to the owner).
	replied claimed = iota
	// owns: the entry is this cell's (new, taken over, or already), so
	// the cell's own idempotency rules go on, and a reclaim of its
	// abandoned record writes the entry.
	owns
	// unclaimed: the local rules of the protocol before the directory
	// (NoDirectory, or IgnoreOwner processing another cell's entry).
	unclaimed
)

// claim is the directory step of a cell starting an attempt, before any
// durable write. It returns how the cell goes on and, when it wrote the
// entry (Create, or a takeover's Update), the revision it holds.
func (m *model) claim(x msg) (claimed, int) {
	if m.rules.NoDirectory {
		return unclaimed, 0
	}
	e := m.dir[x.id]
	switch {
	case e == nil:
		return owns, m.own(x, "created")
	case e.owner == x.cell:
		return owns, 0
	case e.payload != x.payload && !(m.rules.AnswerEntryAnyPayload && e.state == entryFinal):
		m.reply(x, mResult, result{status: "ALREADY_EXISTS"}, x.payload)
	case e.state == entryFinal:
		m.logf("cell %d: %s answered from the directory (owner cell %d)", x.cell, x.id, e.owner)
		m.reply(x, mResult, e.res, e.payload)
	case e.state == entryAbandoned, !e.pinned && e.by.call == x.call && e.by.attempt < x.attempt, m.rules.TakeoverAnyCall:
		// The GTR moves a call on only before it sent Proceed to the
		// earlier attempt, and an abandoned entry's owner stepped back
		// before its PNR: the owner will never call the issuer for it.
		if m.proceeded[e.by] {
			m.violate("takeover only from an attempt without Proceed: cell %d took %s (call %d attempt %d) from cell %d, whose call %d attempt %d was confirmed",
				x.cell, x.id, x.call, x.attempt, e.owner, e.by.call, e.by.attempt)
		}
		return owns, m.own(x, fmt.Sprintf("taken over from cell %d (%s)", e.owner, e.state))
	case m.rules.IgnoreOwner:
		return unclaimed, 0
	default:
		m.logf("cell %d: %s owned by cell %d (call %d attempt %d): re-routable to it", x.cell, x.id, e.owner, e.by.call, e.by.attempt)
		m.send(msg{kind: mReroutable, call: x.call, attempt: x.attempt, cell: x.cell, id: x.id, owner: e.owner, redirect: true})
	}
	return replied, 0
}

// own writes the entry of x.id as x's: owner x.cell, claimed by x's
// attempt, state owned (a Create, or an Update at the revision just read).
func (m *model) own(x msg, how string) int {
	e := m.dir[x.id]
	if e == nil {
		e = &entry{payload: x.payload}
		m.dir[x.id] = e
	}
	e.rev++
	e.owner, e.by, e.state, e.res, e.pinned = x.cell, x.key(), entryOwned, result{}, false
	m.logf("directory: %s %s by cell %d (call %d attempt %d), rev %d", x.id, how, x.cell, x.call, x.attempt, e.rev)
	return e.rev
}

// update is a best-effort entry update by the owner, sent as a message:
// it may be delayed, reordered, lost, or never delivered, and applies
// only at the revision rev of the owner's claim (a CAS), so a stale one
// changes nothing. Nothing relies on it arriving.
func (m *model) update(cl int, id string, rev int, s entryState, r result) {
	if m.rules.NoDirectory || rev == 0 {
		return
	}
	m.send(msg{kind: mDirUpdate, cell: cl, id: id, rev: rev, dirState: s, res: r})
}

func (m *model) applyUpdate(x msg) {
	e := m.dir[x.id]
	if e == nil || e.rev != x.rev || e.owner != x.cell {
		m.logf("directory: %s update to %s by cell %d at rev %d refused", x.id, x.dirState, x.cell, x.rev)
		return
	}
	e.rev++
	e.state, e.res = x.dirState, x.res
	m.logf("directory: %s %s (%v), rev %d", x.id, e.state, e.res, e.rev)
}

// entryRev is the revision a record's attempt holds of its entry: 0 when
// the entry is not this cell's.
func (m *model) entryRev(cl int, id string) int {
	if e := m.dir[id]; e != nil && e.owner == cl {
		return e.rev
	}
	return 0
}

// pin is the owner's Update before it answers PENDING from a sending
// record no attempt in its process works on (see entry.pinned).
func (m *model) pin(x msg, rec *record) {
	e := m.dir[x.id]
	if e.pinned {
		return
	}
	e.rev++
	e.pinned = true
	rec.rev = e.rev
	m.logf("directory: %s pinned by cell %d answering call %d, rev %d", x.id, x.cell, x.call, e.rev)
}
