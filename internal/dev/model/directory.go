package model

import (
	"errors"
	"time"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
)

// The transaction directory (docs/design/transaction-directory.md): one
// entry per ID, shared by all cells, the store of
// cmd/cell/internal/directory written by hand: Claim (a Create) and Take
// (an Update at the revision read), and the best-effort Finalize and
// Abandon, which check the entry's owner and claim rather than a
// revision. The model's directory is a map, and its operations are atomic
// steps: a JetStream KV bucket is linearizable per key, and the model
// assumes NATS is always reachable (the design note's NATS-outage
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

// claim performs a directory claim or takeover for r, as server.claim:
// Create when a.Revision is zero, else Update at that revision; the entry
// is the cell's when it wrote it, or when the entry that holds the key is
// this cell's already (a lost takeover included).
func (m *model) claim(r *run, a cellside.Claim) cellside.Event {
	r.claims++
	if m.rules.NoPin && a.Entry.Pinned {
		m.logf("cell %d: %s answered PENDING without the pin", r.x.cell, r.x.id)
		e := a.Entry
		e.Revision = a.Revision
		return cellside.Claimed{Entry: e, Active: m.active(r)}
	}
	if m.rules.NoDecisionEntry && a.Entry.State == cellside.EntryFinal {
		m.logf("cell %d: %s decided without the entry", r.x.cell, r.x.id)
		e := a.Entry
		e.Revision = a.Revision
		return cellside.Claimed{Entry: e, Active: m.active(r)}
	}
	var (
		e    cellside.Entry
		ours bool
	)
	if a.Revision == 0 {
		e, ours = m.create(r, a.Entry)
	} else {
		e, ours = m.take(r, a.Entry, a.Revision)
		ours = ours || e.Owner == r.in.CellID
	}
	if ours {
		if m.rules.IgnorePayload && m.fuEntryOf(r.x.id) == nil {
			e.Fingerprint = r.in.Fingerprint // the cell does not compare payloads (of a payment's entry)
		}
		return cellside.Claimed{Entry: e, Active: m.active(r)}
	}
	return m.held(r, e)
}

// held is the Held answer with e, another cell's entry, perturbed by the
// directory's knobs.
func (m *model) held(r *run, e cellside.Entry) cellside.Event {
	sameFP := e.Fingerprint == r.in.Fingerprint
	switch {
	case m.rules.AnswerEntryAnyPayload && e.State == cellside.EntryFinal && !sameFP && m.fuEntryOf(r.x.id) == nil:
		r.truePayload[r.in.Fingerprint] = payloadOf(r.x.id, e.Fingerprint)
		e.Fingerprint = r.in.Fingerprint
	case m.rules.TakeoverAnyCall && e.State == cellside.EntryOwned && sameFP:
		e.Call, e.Attempt, e.Pinned = r.in.Call, -1, false // seen as an earlier attempt of this call
	case m.rules.IgnoreOwner && r.claims == 1:
		// The machine's own answer to Held, from a probe: re-routable to
		// the owner is ignored, and the attempt goes on without a claim
		// (as the natural home does when the directory is unavailable).
		p := cellside.New(r.in, modelPolicy, modelRef{}, func() time.Time { return modelTime })
		p.Start()
		if rr, ok := p.Step(cellside.Held{Entry: e}).(cellside.Reroute); ok && rr.Owner != "" {
			m.logf("cell %d: %s owned by %s, processed all the same", r.x.cell, r.x.id, e.Owner)
			return cellside.ClaimFailed{Err: errors.New("owner ignored"), Outage: true}
		}
	}
	return cellside.Held{Entry: e}
}

// create is the directory's Claim: Create of e, or the entry that holds
// the key and whether it is e.Owner's.
func (m *model) create(r *run, e cellside.Entry) (cellside.Entry, bool) {
	cur := m.dir[r.x.id]
	if fe := m.fuEntryOf(r.x.id); cur == nil && fe != nil {
		// A follow-up's entry holds the key (one key space).
		return fuToEntry(r.x.id, fe), cellName(fe.owner) == e.Owner
	}
	if cur == nil {
		cur = fromEntry(r.x.id, e)
		cur.rev = 1
		m.dir[r.x.id] = cur
		m.logf("directory: %s created by cell %d (call %d attempt %d), rev %d", r.x.id, r.x.cell, r.x.call, r.x.attempt, cur.rev)
		return toEntry(r.x.id, cur), true
	}
	return toEntry(r.x.id, cur), cellName(cur.owner) == e.Owner
}

// take is the directory's Take: Update of the entry read at rev with e,
// or on a lost race the entry that won.
func (m *model) take(r *run, e cellside.Entry, rev uint64) (cellside.Entry, bool) {
	cur := m.dir[r.x.id]
	switch {
	case cur == nil && m.fuEntryOf(r.x.id) != nil:
		return fuToEntry(r.x.id, m.fuEntryOf(r.x.id)), false // a follow-up's entry holds the key
	case cur == nil:
		return m.create(r, e)
	case uint64(cur.rev) != rev:
		return toEntry(r.x.id, cur), false
	}
	next := fromEntry(r.x.id, e)
	if cur.owner != next.owner && cur.state == entryOwned && m.taken[cur.by] {
		m.violate("takeover only from an attempt without Proceed: cell %d took %s (call %d attempt %d) from cell %d, whose call %d attempt %d was confirmed",
			r.x.cell, r.x.id, r.x.call, r.x.attempt, cur.owner, cur.by.call, cur.by.attempt)
	}
	if cur.owner != next.owner {
		m.cover(covTakeover)
	}
	next.rev = cur.rev + 1
	m.dir[r.x.id] = next
	m.logf("directory: %s taken by cell %d (call %d attempt %d) from cell %d (%s, call %d attempt %d), pinned %v, rev %d",
		r.x.id, r.x.cell, r.x.call, r.x.attempt, cur.owner, cur.state, cur.by.call, cur.by.attempt, next.pinned, next.rev)
	return toEntry(r.x.id, next), true
}

func toEntry(id string, e *entry) cellside.Entry {
	out := cellside.Entry{Owner: cellName(e.owner), Call: callName(e.by.call), Attempt: int32(e.by.attempt),
		Fingerprint: fingerprint(id, e.payload), State: cellside.EntryState(e.state), Pinned: e.pinned, Revision: uint64(e.rev)}
	if e.state == entryFinal {
		out.Answer = answerOf(id, e.res)
	}
	return out
}

func fromEntry(id string, e cellside.Entry) *entry {
	out := &entry{owner: cellIndex(e.Owner), by: attemptKey{callIndex(e.Call), int(e.Attempt)}, payload: payloadOf(id, e.Fingerprint),
		state: entryState(e.State), pinned: e.Pinned, rev: int(e.Revision)}
	if e.Call == "" {
		out.by = noAttempt
	}
	if e.State == cellside.EntryFinal {
		out.res = resultOf(e.Answer)
	}
	return out
}

// applyUpdate is a best-effort update arriving at the directory:
// directory.Finalize (the cell's answer, if the entry is the cell's or
// missing, and not final yet) or directory.Abandon (if the entry is still
// the claim of the attempt that stepped back).
func (m *model) applyUpdate(x msg) {
	e := m.dir[x.id]
	if fe := m.fuEntryOf(x.id); fe != nil {
		// A follow-up's entry holds the key: Finalize writes over it if it
		// is this cell's and not final; Abandon names this attempt's
		// claim, which it is not.
		if x.dirState != entryFinal || fe.owner != x.cell || fe.state == entryFinal {
			m.logf("directory: %s %s by cell %d refused (a follow-up's entry)", x.id, x.dirState, x.cell)
			return
		}
		e = m.payOver(x.id, x.cell, x.payload)
	}
	switch x.dirState {
	case entryFinal:
		switch {
		case e == nil:
			e = &entry{}
			m.dir[x.id] = e
		case e.owner != x.cell || e.state == entryFinal:
			m.logf("directory: %s final by cell %d refused", x.id, x.cell)
			return
		}
		e.rev++
		e.owner, e.by, e.payload, e.state, e.res, e.pinned = x.cell, noAttempt, x.payload, entryFinal, x.res, false
	case entryAbandoned:
		if e == nil || e.owner != x.cell || e.state != entryOwned || e.by != x.key() {
			m.logf("directory: %s abandoned by cell %d (call %d attempt %d) refused", x.id, x.cell, x.call, x.attempt)
			return
		}
		e.rev++
		e.state = entryAbandoned
	}
	m.logf("directory: %s %s (%v), rev %d", x.id, e.state, e.res, e.rev)
}
