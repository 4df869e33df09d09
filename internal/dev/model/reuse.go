package model

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// One key space: a transaction ID is unique per partner across payments
// and follow-ups. Nothing in the code compares the kinds: the key decides,
// in the three places that hold one per key, and the model keeps each of
// them one space although it stores the kinds apart (db and fdb, dir and
// fdir):
//
//   - a cell's store: one row per (partner, ID) (store.Insert and
//     HoldFollowUp insert a row only where the key has none). A
//     payment's insert over a follow-up's row finds it (Existing: the
//     machine's payload check answers ALREADY_EXISTS); a follow-up whose
//     ID has a payment's row here is answered by followUpReplay
//     (ALREADY_EXISTS for another payload), before the hold and again
//     inside it;
//   - the directory: one entry per key. A payment's claim that finds a
//     follow-up's entry gets it back (Claimed or Held: the payload check
//     again); a follow-up's claim that finds a payment's entry is
//     claimFollowUp's: ALREADY_EXISTS, this cell's entry too (a
//     payment's claim with no row here yet: Rules.ClaimAnyOwnEntry takes
//     it as the follow-up's own, as the code did before the simulator
//     found it). Finalize writes a kind's final answer over the other's
//     entry when that entry is the same cell's and not final; Abandon
//     names a claim (call and attempt) the other kind's never matches;
//   - the issuer: one record per key for Authorize and Adjust
//     (issuersim's doc: "Authorizations and adjustments share one key
//     space"), which the model's outcome map already is.
//
// Rules.KindsApart keeps the kinds apart in the store and the directory
// (the model as it was before reuse was modelled), so that a reuse is
// decided as a new transaction: the invariants below must catch it.

// followUpCall is the call a follow-up's claim names
// (server.followUpCall): a follow-up has one attempt, and no GTR call may
// take its entry over.
const followUpCall = "follow-up"

// fuEntryOf is the follow-up's entry that holds id's key in the
// directory, as a payment meets it; nil if none (or Rules.KindsApart).
func (m *model) fuEntryOf(id string) *fuEntry {
	if m.rules.KindsApart {
		return nil
	}
	return m.fdir[id]
}

// payEntryOf is the payment's entry that holds id's key, as a follow-up
// meets it; nil if none (or Rules.KindsApart).
func (m *model) payEntryOf(id string) *entry {
	if m.rules.KindsApart {
		return nil
	}
	return m.dir[id]
}

// fuRecordAt is the follow-up's row of id in cell i's store, as a
// payment's insert meets it; nil if none (or Rules.KindsApart).
func (m *model) fuRecordAt(i int, id string) *fuRecord {
	if m.rules.KindsApart {
		return nil
	}
	return m.cells[i].fdb[id]
}

// payRecordAt is the payment's row of id in cell i's store, as a
// follow-up's read meets it; nil if none (or Rules.KindsApart).
func (m *model) payRecordAt(i int, id string) *record {
	if m.rules.KindsApart {
		return nil
	}
	return m.cells[i].db[id]
}

// keyEntry is what a reader of id's directory entry learns, whichever
// kind's entry holds the key.
type keyEntry struct {
	found bool
	owner int
	state entryState
	res   result
}

// payKeyEntry is id's entry as the payments' side reads it: its own, or a
// follow-up's holding the key.
func (m *model) payKeyEntry(id string) keyEntry {
	if e := m.dir[id]; e != nil {
		return keyEntry{found: true, owner: e.owner, state: e.state, res: e.res}
	}
	if e := m.fuEntryOf(id); e != nil {
		return keyEntry{found: true, owner: e.owner, state: e.state, res: e.res}
	}
	return keyEntry{}
}

// fuKeyEntry is id's entry as the follow-ups' side reads it.
func (m *model) fuKeyEntry(id string) keyEntry {
	if e := m.fdir[id]; e != nil {
		return keyEntry{found: true, owner: e.owner, state: e.state, res: e.res}
	}
	if e := m.payEntryOf(id); e != nil {
		return keyEntry{found: true, owner: e.owner, state: e.state, res: e.res}
	}
	return keyEntry{}
}

// fuToEntry is a follow-up's entry as the directory hands it to a
// payment's claim.
func fuToEntry(id string, e *fuEntry) cellside.Entry {
	out := cellside.Entry{Owner: cellName(e.owner), Call: followUpCall, Attempt: 1, Fingerprint: e.fp,
		State: cellside.EntryState(e.state), Revision: uint64(e.rev)}
	if e.state == entryFinal {
		out.Answer = answerOf(id, e.res)
	}
	return out
}

// payOver makes id's key a payment's entry of cell i, written over the
// follow-up's entry that held it (a Finalize of the owner's): the caller
// writes its state, and bumps its revision.
func (m *model) payOver(id string, i int, p payload) *entry {
	fe := m.fdir[id]
	delete(m.fdir, id)
	e := &entry{rev: fe.rev, owner: i, by: noAttempt, payload: p, state: entryOwned}
	m.dir[id] = e
	m.logf("directory: %s, a follow-up's entry (%s), written over by cell %d's payment", id, fe.state, i)
	return e
}

// fuOver is payOver the other way: id's key a follow-up's entry of cell
// i, written over the payment's entry that held it.
func (m *model) fuOver(id string, i int, p fuPayload) *fuEntry {
	pe := m.dir[id]
	delete(m.dir, id)
	e := &fuEntry{rev: pe.rev, owner: i, p: p, fp: fuFingerprint(id, p), state: entryOwned}
	m.fdir[id] = e
	m.logf("directory: %s, a payment's entry (%s), written over by cell %d's follow-up", id, pe.state, i)
	return e
}

// fuFingerprint is the fingerprint of follow-up id with payload p.
func fuFingerprint(id string, p fuPayload) idempotency.Fingerprint {
	return fingerprints.Of(cellside.AsRequest(fuRequest(id, p)))
}

// --- the partner ---

// reuseByFollowUp is a partner's capture, void or refund under a
// payment's transaction ID, of an authorization it knows approved: mostly
// the original's own ID, now and then another payment's; false when it
// knows none approved. The ID and its payload go to the follow-ups' pool,
// so that follow-up-again sends it again, at either replica, or with
// another payload. Another payment's ID is any the partner used, one in
// flight included.
func (m *model) reuseByFollowUp(r chooser) bool {
	approvedIDs := m.approvedKnown()
	if len(approvedIDs) == 0 {
		return false
	}
	orig := approvedIDs[r.IntN(len(approvedIDs))]
	id := orig
	if r.IntN(3) == 0 {
		others := slices.Sorted(maps.Keys(m.answers))
		for _, c := range m.calls {
			if !slices.Contains(others, c.id) {
				others = append(others, c.id) // in flight, not answered yet
			}
		}
		id = others[r.IntN(len(others))]
	}
	p := fuPayload{kind: []cellpayv1.PaymentType{cellpayv1.PaymentType_CAPTURE, cellpayv1.PaymentType_VOID, cellpayv1.PaymentType_REFUND}[r.IntN(3)], orig: orig}
	if p.kind != cellpayv1.PaymentType_VOID {
		p.amount = 1 + r.Int64N(amountOf(0)) // within the authorization's limits
	}
	m.logf("partner: follow-up under payment %s's ID", id)
	m.fuSent = append(m.fuSent, fuSent{id: id, p: p, reuse: true})
	m.followUp(r.IntN(numReplicas), id, p)
	return true
}

// reuseByPayment is a partner's payment, of any payload, under the ID of
// any follow-up it sent, one not yet claimed included; false when there
// is none. Its call joins the payments', so that duplicate and
// other-payload send it again.
func (m *model) reuseByPayment(r chooser) bool {
	var fuIDs []string
	for _, s := range m.fuSent {
		if !s.reuse && !slices.Contains(fuIDs, s.id) {
			fuIDs = append(fuIDs, s.id)
		}
	}
	if len(fuIDs) == 0 {
		return false
	}
	id := fuIDs[r.IntN(len(fuIDs))]
	m.logf("partner: payment under follow-up %s's ID", id)
	m.submit(r.IntN(numReplicas), id, payload(r.IntN(6)))
	return true
}

// followUpID reports whether id is one the partner made up for a
// follow-up.
func (m *model) followUpID(id string) bool {
	return slices.ContainsFunc(m.fuSent, func(s fuSent) bool { return s.id == id && !s.reuse })
}

// approvedKnown lists, sorted, the payments the partner knows approved:
// answered APPROVED, or read so (a record approved in a cell).
func (m *model) approvedKnown() []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(m.answers)) {
		if slices.ContainsFunc(m.answers[id], func(a answered) bool { return a.res.status == "APPROVED" }) ||
			slices.ContainsFunc(m.cells[:], func(cl *cell) bool { return cl.db[id] != nil && cl.db[id].state == approved }) {
			out = append(out, id)
		}
	}
	return out
}

// --- invariants ---

// reuseRefusal reports whether res may answer a transaction under an ID
// that is the other kind's: ALREADY_EXISTS, the cell's refusal, or an
// answer that says nothing of the transaction (the GTR or the cell out of
// reach, the caller gone; for a follow-up, its original found nowhere,
// FAILED_PRECONDITION ORIGINAL_NOT_FOUND, which is decided before its ID
// is looked at: only the original's cell decides a follow-up).
func reuseRefusal(res result, followUp bool) bool {
	switch res.status {
	case "ALREADY_EXISTS", "UNAVAILABLE", "DEADLINE_EXCEEDED":
		return true
	case "FAILED_PRECONDITION":
		return followUp && res.reason == "ORIGINAL_NOT_FOUND"
	}
	return false
}

// reuseCheck is what must hold of an ID that both kinds used (m.shared),
// after every step. One transaction per ID: no ID is both a payment past
// its point of no return and a follow-up held (a follow-up's record is
// written by its hold, its point of no return, and only then reaches the
// issuer). Once one kind holds the ID, every answer to the other is a
// refusal (ALREADY_EXISTS, or an answer that says nothing: reuseRefusal),
// never an outcome nor another refusal of the rules (FAILED_PRECONDITION
// with another reason: the reuse decided as if its ID were free). The
// transaction that holds the ID keeps its answer: never ALREADY_EXISTS for
// its own payload. sorted: as checkIn's.
func (m *model) reuseCheck(sorted bool) error {
	return each(sorted, m.shared, func(id string, _ bool) error {
		pc, rec := -1, (*record)(nil)
		fc, f := -1, (*fuRecord)(nil)
		for i, cl := range m.cells {
			if r := cl.db[id]; r != nil && r.pastPNR() && rec == nil {
				pc, rec = i, r
			}
			if r := cl.fdb[id]; r != nil && f == nil {
				fc, f = i, r
			}
		}
		switch {
		case rec != nil && f != nil:
			return fmt.Errorf("one transaction per ID: %s is a payment %s (payload %d) in cell %d and a %v %s in cell %d",
				id, rec.state, rec.payload, pc, f.p, f.rec.State, fc)
		case rec != nil:
			for _, a := range m.fuAnswers[id] {
				if !reuseRefusal(a.res, true) {
					return fmt.Errorf("a follow-up under a payment's ID is refused ALREADY_EXISTS: %s (%v) answered %v; the payment is %s in cell %d",
						id, a.p, a.res, rec.state, pc)
				}
			}
			for _, a := range m.answers[id] {
				if a.res.status == "ALREADY_EXISTS" && a.payload == rec.payload {
					return fmt.Errorf("a transaction keeps its answer: %s (payload %d) answered ALREADY_EXISTS, recorded %s in cell %d", id, a.payload, rec.state, pc)
				}
			}
		case f != nil:
			for _, a := range m.answers[id] {
				if !reuseRefusal(a.res, false) {
					return fmt.Errorf("a payment under a follow-up's ID is refused ALREADY_EXISTS: %s (payload %d) answered %v; the follow-up (%v) is %s in cell %d",
						id, a.payload, a.res, f.p, f.rec.State, fc)
				}
			}
			for _, a := range m.fuAnswers[id] {
				if a.res.status == "ALREADY_EXISTS" && a.p == f.p {
					return fmt.Errorf("a transaction keeps its answer: follow-up %s (%v) answered ALREADY_EXISTS, recorded %s in cell %d", id, a.p, f.rec.State, fc)
				}
			}
		}
		return nil
	})
}

// use records that a partner's call of one kind (a follow-up, or a
// payment) used id: an ID both kinds used is shared, reuseCheck's.
func (m *model) use(id string, followUp bool) {
	k := uint8(1)
	if followUp {
		k = 2
	}
	m.usedBy[id] |= k
	if m.usedBy[id] == 3 {
		m.shared[id] = true
	}
}

// reuseRefused counts a, the end of payment attempt r, when it is the
// machine's refusal of a payload conflict with a follow-up's entry or row
// of r's ID (Summary.Coverage).
func (m *model) reuseRefused(r *run, a cellside.Reject) {
	if errors.Is(a.Err, idempotency.ErrConflict) && (m.fuEntryOf(r.x.id) != nil || m.fuRecordAt(r.x.cell, r.x.id) != nil) {
		m.cover(covReusePayment)
		m.logf("cell %d: payment %s refused: the ID is a follow-up's", r.x.cell, r.x.id)
	}
}
