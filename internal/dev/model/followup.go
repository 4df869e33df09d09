package model

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/cellpay/cellpay/internal/followup"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// Follow-ups: a partner's capture, void or refund of an approved card
// authorization (docs/partners/follow-ups.md). Each side is driven as the
// code does it:
//
//   - the GTR (cmd/gtr/internal/payments/followup.go, sendFollowUp): the
//     follow-up goes to its original's natural home (the first cell of
//     the original ID's ranking, whatever the drains); an owner_cell
//     answer sends it on to that cell once; a home out of reach (or one
//     that answers UNAVAILABLE), or one that knows no such original, has
//     the GTR ask every cell (a fan-out) and send it to the one that
//     holds the original; the cell it is sent on to answers finally, and
//     one out of reach is UNAVAILABLE (the partner retries the same ID).
//     Never a re-route. Each replica coalesces concurrent copies of one
//     ID and payload;
//   - the cell (cmd/cell/internal/server/followup.go, FollowUp), in the
//     driver's order: a follow-up recorded is answered from its record
//     (ALREADY_EXISTS for another payload); an original this cell does
//     not hold is answered with the directory's owner, or NOT_FOUND; the
//     follow-up's own ID is claimed in the directory (another cell's
//     entry: ALREADY_EXISTS, its final answer, or ABORTED); then the
//     store's HoldFollowUp, one transaction under the original's row
//     lock (mFuHold, a step of its own, whose commit may land with its
//     answer lost: UNAVAILABLE): the real cellside.FollowUpRecord and
//     cellside.HoldFollowUp on the original as the store reads it (its
//     ledger the real followup.Ledger), a refusal abandoning the claim;
//     the issuer's Adjust (mAdjustReq, lost, duplicated, held like any
//     issuer request); the outcome (cellside.FollowUpOutcome) persisted
//     from sending, settling the hold with followup.Ledger.Settle as
//     settleSQL does (mFuSettle, whose commit may land with its answer
//     lost: persistAfterIssuer's retry finds the record no longer
//     sending, and the answer is PENDING); the entry finalized in the
//     background. An issuer answer not known (a timeout, a closed ID)
//     answers PENDING, the record left sending;
//   - the reconciler (reconcile.resolve) resolves a sending follow-up no
//     run works on as a payment's: the entry another cell's, abandoned;
//     else the issuer's outcome, or the ID closed at the issuer and
//     FAILED issuer_not_reached; the entry first, then the record, whose
//     persist settles the ledger;
//   - the issuer (issuersim's Adjust): dedupe by ID, a closed ID refused;
//     an adjustment of an authorization it approved is held and settled
//     at once on its own followup.Ledger of it, or declined for the rule
//     it would break (and, the model's own rule, an amount that is a
//     multiple of 13 is declined do_not_honor, so that a decline's
//     release is exercised).
//
// Follow-ups' IDs (f0, f1, ...) are the partner's own for its follow-ups,
// and the payments' (t0, t1, t2, a0, a1, a2) theirs; but an ID is one key
// for both, in the cells' stores, the directory and the issuer, and the
// partner now and then uses one kind's ID for the other (reuse.go).

// fuPayload is a follow-up's content: its kind, original and amount (none
// for a void).
type fuPayload struct {
	kind   cellpayv1.PaymentType
	orig   string
	amount int64
}

func (p fuPayload) String() string {
	if p.kind == cellpayv1.PaymentType_VOID {
		return "VOID of " + p.orig
	}
	return fmt.Sprintf("%s %d of %s", p.kind, p.amount, p.orig)
}

// fuRequest is the FollowUpRequest of follow-up id with payload p.
func fuRequest(id string, p fuPayload) *cellproto.FollowUpRequest {
	req := &cellproto.FollowUpRequest{Kind: p.kind, PartnerId: partner, TransactionId: id, OriginalTransactionId: p.orig, Market: "GB"}
	if p.kind != cellpayv1.PaymentType_VOID {
		req.Amount = &cellpayv1.Money{MinorUnits: p.amount, Currency: "EUR"}
	}
	return req
}

// fuRecord is a follow-up's row: the record the real code built, and the
// payload it was built from.
type fuRecord struct {
	rec *cellside.Record
	p   fuPayload
}

// fuEntry is a follow-up's directory entry (its claim: call
// "follow-up", attempt 1); rev is its key's revision, as an entry's.
type fuEntry struct {
	rev   int
	owner int
	p     fuPayload
	fp    idempotency.Fingerprint
	state entryState
	res   result
}

// fuCall is one follow-up call at a GTR replica.
type fuCall struct {
	n, replica int
	id         string
	p          fuPayload
	// final: the cell asked is the one the home or a fan-out named
	// (finalAt), not the home.
	final bool
	cell  int
	// ask numbers the requests the call sent, so that an answer to an
	// earlier one is told apart.
	ask    int
	done   bool
	answer result
	joined int
}

// fuRun is one follow-up in a cell's process.
type fuRun struct {
	n  int
	x  msg // the request
	fp idempotency.Fingerprint
	// held is the record once held; out the issuer's outcome, to persist.
	held, out *cellside.Record
	phase     fuPhase
}

type fuPhase int

const (
	fuHolding fuPhase = iota
	fuAdjusting
	fuSettling
)

// fuAnswered is one answer a partner got for a follow-up.
type fuAnswered struct {
	p   fuPayload
	res result
}

// fuSent is a follow-up ID a partner used, and its first payload; reuse:
// the ID was a payment's (reuse.go).
type fuSent struct {
	id    string
	p     fuPayload
	reuse bool
}

// fuEffect is an adjustment the issuer applied: its payload and the
// amount applied (a void's is the authorization's).
type fuEffect struct {
	p      fuPayload
	amount int64
}

// fus is the model's follow-ups' part.
type fus struct {
	fuCalls   []*fuCall
	fuAnswers map[string][]fuAnswered
	// fuSent: every follow-up ID a partner used, with its first payload,
	// in order (the duplicates' pool).
	fuSent []fuSent
	// fdir: the follow-ups' entries in the directory (one key space with
	// the payments' dir: reuse.go).
	fdir map[string]*fuEntry
	// auths: the issuer's ledgers of the authorizations it approved;
	// applied: the adjustments it applied.
	auths   map[string]*followup.Ledger
	applied map[string]fuEffect
	nextRun int
	// usedBy: the kinds of call the partner made under each ID (1: a
	// payment, 2: a follow-up); shared: the IDs both kinds used
	// (reuse.go).
	usedBy map[string]uint8
	shared map[string]bool
}

func newFus() fus {
	return fus{fuAnswers: map[string][]fuAnswered{}, fdir: map[string]*fuEntry{}, auths: map[string]*followup.Ledger{},
		applied: map[string]fuEffect{}, usedBy: map[string]uint8{}, shared: map[string]bool{}}
}

// --- the partner ---

// newFollowUp is a partner's new follow-up of kind: of an authorization
// it knows approved (answered APPROVED, or read so: a record approved in
// a cell), now and then of any payment it submitted (which the cell may
// refuse; not one under a follow-up's ID: an original is a payment here,
// and HoldFollowUp's refusal of another kind's, ORIGINAL_NOT_APPROVED, is
// tested with it), for an amount around the authorization's (a refund's:
// around what the partner knows captured), over it now and then; false
// when the partner knows no transaction yet, and mostly when it knows
// none approved (a refund: none captured).
func (m *model) newFollowUp(r chooser, kind cellpayv1.PaymentType) bool {
	known := slices.DeleteFunc(slices.Sorted(maps.Keys(m.answers)), m.followUpID)
	approvedIDs := m.approvedKnown()
	if len(known) == 0 || len(approvedIDs) == 0 && r.IntN(6) > 0 {
		return false
	}
	// A refund mostly of what the partner knows captured.
	var captured []string
	if kind == cellpayv1.PaymentType_REFUND {
		captured = slices.DeleteFunc(slices.Clone(approvedIDs), func(id string) bool { return m.capturedKnown(id) == 0 })
		if len(captured) == 0 && r.IntN(4) > 0 {
			return false
		}
	}
	orig := known[r.IntN(len(known))]
	if len(approvedIDs) > 0 && r.IntN(6) > 0 {
		orig = approvedIDs[r.IntN(len(approvedIDs))]
		if kind == cellpayv1.PaymentType_REFUND && len(captured) > 0 && r.IntN(4) > 0 {
			orig = captured[r.IntN(len(captured))]
		}
	}
	// The amount the partner asked for, by the payload it was last
	// answered for (an original's amount is 100 to 103).
	authorized := amountOf(0)
	for _, a := range m.answers[orig] {
		if !a.res.isError() {
			authorized = amountOf(a.payload)
		}
	}
	p := fuPayload{kind: kind, orig: orig}
	if kind != cellpayv1.PaymentType_VOID {
		// Captures around the authorization; refunds around what the
		// partner knows captured, if anything.
		base := authorized
		if kind == cellpayv1.PaymentType_REFUND {
			if c := m.capturedKnown(orig); c > 0 {
				base = c
			}
		}
		switch r.IntN(4) {
		case 0:
			p.amount = base
		case 1:
			p.amount = 1 + r.Int64N(base/4+1)
		case 2:
			p.amount = 1 + r.Int64N(base/2+1)
		default:
			p.amount = base + 1 + r.Int64N(10) // over the limit
		}
	}
	id := fmt.Sprintf("f%d", len(m.fuSent))
	m.fuSent = append(m.fuSent, fuSent{id: id, p: p})
	m.followUp(r.IntN(numReplicas), id, p)
	return true
}

// capturedKnown is the sum of the captures of orig the partner knows
// approved: answered APPROVED, or read so (a record approved in a cell).
func (m *model) capturedKnown(orig string) int64 {
	var sum int64
	for _, s := range m.fuSent {
		if p, ok := m.knownApproved(s.id); ok && p.kind == cellpayv1.PaymentType_CAPTURE && p.orig == orig {
			sum += p.amount
		}
	}
	return sum
}

// knownApproved is the payload of follow-up id if the partner knows it
// approved.
func (m *model) knownApproved(id string) (fuPayload, bool) {
	for _, a := range m.fuAnswers[id] {
		if a.res.status == "APPROVED" {
			return a.p, true
		}
	}
	for _, cl := range m.cells {
		if f := cl.fdb[id]; f != nil && f.rec.State == cellside.StateApproved {
			return f.p, true
		}
	}
	return fuPayload{}, false
}

// dupFollowUp is a follow-up ID used again: the same payload (a retry, at
// either access point), or now and then another (another amount or kind).
func (m *model) dupFollowUp(r chooser) bool {
	if len(m.fuSent) == 0 {
		return false
	}
	s := m.fuSent[r.IntN(len(m.fuSent))]
	p := s.p
	if r.IntN(3) == 0 {
		if p.kind == cellpayv1.PaymentType_VOID || r.IntN(2) == 0 {
			p.kind = []cellpayv1.PaymentType{cellpayv1.PaymentType_CAPTURE, cellpayv1.PaymentType_REFUND}[r.IntN(2)]
		}
		p.amount += 1 + r.Int64N(20)
	}
	m.followUp(r.IntN(numReplicas), s.id, p)
	return true
}

// --- the GTR (payments/followup.go) ---

// followUp is a partner's capture, void or refund id at GTR replica g.
func (m *model) followUp(g int, id string, p fuPayload) {
	m.use(id, true)
	for _, c := range m.fuCalls {
		if c.replica == g && c.id == id && c.p == p && !c.done {
			c.joined++ // singleflight on ID and payload
			m.logf("follow-up %s (%v) at gtr %d: coalesced into call f%d", id, p, g, c.n)
			return
		}
	}
	c := &fuCall{n: len(m.fuCalls), replica: g, id: id, p: p}
	m.fuCalls = append(m.fuCalls, c)
	home := ranking(p.orig)[0]
	m.logf("follow-up %s (%v) at gtr %d: call f%d to the original's home, cell %d", id, p, g, c.n, home)
	m.fuAsk(c, home, false)
}

// fuAsk sends c's follow-up to cell.
func (m *model) fuAsk(c *fuCall, cell int, final bool) {
	c.cell, c.final = cell, final
	c.ask++
	m.send(msg{kind: mFollowUp, call: c.n, attempt: c.ask, cell: cell, id: c.id, fu: c.p})
}

// fuLive reports whether x answers the request c waits on.
func (m *model) fuLive(x msg) (*fuCall, bool) {
	c := m.fuCalls[x.call]
	return c, !c.done && c.ask == x.attempt
}

// fuResponse is a cell's answer reaching the GTR.
func (m *model) fuResponse(x msg) {
	c, ok := m.fuLive(x)
	if !ok {
		return
	}
	switch {
	case x.redirect && !c.final:
		m.cover(covFuRedirect)
		m.logf("call f%d (%s): the original is cell %d's", c.n, c.id, x.owner)
		m.fuAsk(c, x.owner, true)
	case x.redirect:
		m.fuFinish(c, result{status: "UNAVAILABLE"})
	case x.res.status == "UNAVAILABLE":
		m.fuUnreachable(c)
	case x.res.status == "NOT_FOUND" && !c.final:
		m.fuFanOut(c)
	default:
		m.fuFinish(c, x.res)
	}
}

// fuUnreachable: the cell asked did not answer (down, crashed, or
// UNAVAILABLE): from the home, a fan-out; from the cell that holds the
// original, UNAVAILABLE (never a re-route).
func (m *model) fuUnreachable(c *fuCall) {
	if !c.final {
		m.fuFanOut(c)
		return
	}
	m.fuFinish(c, result{status: "UNAVAILABLE"})
}

// fuFanOut asks every cell for the original (payments.fanOut, each
// cell's Get): the first that holds it is sent the follow-up; none, and
// one out of reach, UNAVAILABLE; none at all, NOT_FOUND.
func (m *model) fuFanOut(c *fuCall) {
	unreachable := 0
	for i, cl := range m.cells {
		if !cl.up || m.stalled[i] {
			unreachable++
			continue
		}
		if rec, ok := cl.db[c.p.orig]; ok && holds(rec) {
			m.cover(covFuFanOut)
			m.logf("call f%d (%s): a fan-out found the original in cell %d", c.n, c.id, i)
			m.fuAsk(c, i, true)
			return
		}
	}
	if unreachable > 0 {
		m.fuFinish(c, result{status: "UNAVAILABLE"})
		return
	}
	m.fuFinish(c, result{status: "NOT_FOUND", reason: "ORIGINAL_NOT_FOUND"})
}

func (m *model) fuFinish(c *fuCall, res result) {
	if res.status == "NOT_FOUND" && res.reason == "ORIGINAL_NOT_FOUND" {
		// payments.unknownOriginal: to the partner, a rule broken.
		res.status = "FAILED_PRECONDITION"
	}
	c.done, c.answer = true, res
	for range c.joined + 1 {
		m.fuAnswers[c.id] = append(m.fuAnswers[c.id], fuAnswered{p: c.p, res: res})
	}
	m.logf("call f%d (%s) answered %v", c.n, c.id, res)
}

// fuLiveCalls lists the follow-up calls in flight.
func (m *model) fuLiveCalls() []*fuCall {
	var out []*fuCall
	for _, c := range m.fuCalls {
		if !c.done {
			out = append(out, c)
		}
	}
	return out
}

// fuAsking reports whether c's request is still on its way.
func (m *model) fuAsking(c *fuCall) bool {
	return slices.ContainsFunc(m.pool, func(x msg) bool { return x.kind == mFollowUp && x.call == c.n && x.attempt == c.ask })
}

// fuCrashed is cell i's crash as the follow-ups see it: the answers it
// had not sent are gone, and the calls it was serving break.
func (m *model) fuCrashed(i int) {
	m.pool = slices.DeleteFunc(m.pool, func(x msg) bool { return x.kind == mFollowUpResp && x.cell == i })
	for _, c := range m.fuLiveCalls() {
		if c.cell == i && !m.fuAsking(c) {
			m.fuUnreachable(c)
		}
	}
}

// fuCrashGTR ends replica g's follow-up calls with its connections.
func (m *model) fuCrashGTR(g int) {
	for _, c := range m.fuLiveCalls() {
		if c.replica == g {
			c.joined = 0
			m.fuFinish(c, result{status: "UNAVAILABLE"})
		}
	}
}

// --- the cell (server/followup.go) ---

// fuDeliver is a follow-up request reaching its cell.
func (m *model) fuDeliver(x msg) {
	if !m.cells[x.cell].up {
		if c, ok := m.fuLive(x); ok {
			m.fuUnreachable(c)
		}
		return
	}
	m.fuProcess(x)
}

// holds is server.holds: a record the cell answers for.
func holds(r *record) bool {
	return r.state != abandoned && r.state != received && r.state != deciding
}

// fuProcess runs FollowUp's steps up to the hold.
func (m *model) fuProcess(x msg) {
	cl := m.cells[x.cell]
	fp := fuFingerprint(x.id, x.fu)
	if f, ok := cl.fdb[x.id]; ok {
		m.fuReply(x, m.fuReplay(x.cell, f, x.id, x.fu, fp), -1)
		return
	}
	if rec := m.payRecordAt(x.cell, x.id); rec != nil {
		m.fuReply(x, m.fuReplayPayment(x.cell, x.id, rec, x.fu, fp), -1)
		return
	}
	if orig, ok := cl.db[x.fu.orig]; !ok || !holds(orig) {
		m.fuLocate(x)
		return
	}
	if res, ok := m.fuClaim(x, fp); !ok {
		m.fuReply(x, res, -1)
		return
	}
	run := &fuRun{n: m.nextRun, x: x, fp: fp}
	m.nextRun++
	run.x.epoch = cl.epoch
	cl.fuRuns[run.n] = run
	// The hold's transaction: it commits (mFuHold), or commits with its
	// answer lost (mFuHoldLost); the first delivered decides.
	m.send(msg{kind: mFuHold, run: run.n, cell: x.cell, epoch: cl.epoch, id: x.id})
	m.send(msg{kind: mFuHoldLost, run: run.n, cell: x.cell, epoch: cl.epoch, id: x.id})
}

// fuReplay is followUpReplay of follow-up id with payload p (fingerprint
// fp): the record's answer, or ALREADY_EXISTS for another payload; a
// recovered record (loss.go), which has no fingerprint, is compared by
// cellside.MatchesRecovered with the request as AsRequest renders it.
func (m *model) fuReplay(i int, f *fuRecord, id string, p fuPayload, fp idempotency.Fingerprint) result {
	if f.rec.Recovered() {
		if !cellside.MatchesRecovered(f.rec, cellside.AsRequest(fuRequest(id, p))) {
			return result{status: "ALREADY_EXISTS"}
		}
	} else if idempotency.Check(f.rec.Fingerprint, fp) != nil {
		return result{status: "ALREADY_EXISTS"}
	}
	m.cover(covFuReplayed)
	m.logf("cell %d: follow-up %s answered from its record (%s)", i, f.rec.TransactionID, f.rec.State)
	return resultOf(f.rec.Transaction())
}

// fuReplayPayment is followUpReplay of a payment's row under the
// follow-up's ID (one key space): its payload is never a follow-up's,
// so ALREADY_EXISTS, by the same fingerprint check (a recovered row's by
// MatchesRecovered, whose payment types differ).
func (m *model) fuReplayPayment(i int, id string, rec *record, p fuPayload, fp idempotency.Fingerprint) result {
	if rec.recovered != nil {
		if cellside.MatchesRecovered(rec.recovered, cellside.AsRequest(fuRequest(id, p))) {
			return rec.result()
		}
	} else if idempotency.Check(fingerprint(id, rec.payload), fp) == nil {
		return rec.result()
	}
	m.cover(covReuseFollowUp)
	m.logf("cell %d: follow-up %s refused: the ID is a payment's (%s)", i, id, rec.state)
	return result{status: "ALREADY_EXISTS"}
}

// fuLocate is server.locate: the original's owner in the directory
// (another cell, its entry not abandoned), or NOT_FOUND.
func (m *model) fuLocate(x msg) {
	if e := m.dir[x.fu.orig]; !m.rules.NoDirectory && e != nil && e.owner != x.cell && e.state != entryAbandoned {
		m.fuReply(x, result{}, e.owner)
		return
	}
	m.fuReply(x, result{status: "NOT_FOUND", reason: "ORIGINAL_NOT_FOUND"}, -1)
}

// fuClaim is claimFollowUp: the follow-up's ID claimed for this cell (a
// new entry, or this follow-up's own that this cell owns already), or the
// answer for an entry of another transaction or another cell.
func (m *model) fuClaim(x msg, fp idempotency.Fingerprint) (result, bool) {
	if m.rules.NoDirectory {
		return result{}, true
	}
	if pe := m.payEntryOf(x.id); pe != nil {
		// A payment's entry holds the key, this cell's or another's (a
		// payment's claim whose record is not written yet): never this
		// follow-up's claim.
		if m.rules.ClaimAnyOwnEntry && pe.owner == x.cell {
			m.logf("directory: follow-up %s's claim finds cell %d's entry of a payment (%s): taken as its own", x.id, x.cell, pe.state)
			return result{}, true
		}
		m.cover(covReuseFollowUp)
		m.logf("cell %d: follow-up %s refused: the ID is a payment's, cell %d's", x.cell, x.id, pe.owner)
		return result{status: "ALREADY_EXISTS"}, false
	}
	e := m.fdir[x.id]
	switch {
	case e == nil:
		m.fdir[x.id] = &fuEntry{rev: 1, owner: x.cell, p: x.fu, fp: fp, state: entryOwned}
		m.logf("directory: follow-up %s claimed by cell %d", x.id, x.cell)
		return result{}, true
	case e.owner == x.cell && m.rules.ClaimAnyOwnEntry:
		return result{}, true
	case idempotency.Check(e.fp, fp) != nil:
		return result{status: "ALREADY_EXISTS"}, false
	case e.owner == x.cell:
		return result{}, true
	case e.state == entryFinal:
		return e.res, false
	}
	return result{status: "ABORTED"}, false
}

// fuReply is the cell's answer to x: res, or with owner >= 0 the
// original's owner.
func (m *model) fuReply(x msg, res result, owner int) {
	m.send(msg{kind: mFollowUpResp, call: x.call, attempt: x.attempt, cell: x.cell, id: x.id, fu: x.fu, res: res,
		owner: owner, redirect: owner >= 0})
}

// fuEnd ends run with its answer.
func (m *model) fuEnd(r *fuRun, res result, owner int) {
	cl := m.cells[r.x.cell]
	delete(cl.fuRuns, r.n)
	delete(cl.fuWait, r.n)
	m.fuReply(r.x, res, owner)
}

// fuInMemory delivers a message of a run in its cell's process (or the
// issuer's answer to it), if the run is still there.
func (m *model) fuInMemory(x msg) {
	cl := m.cells[x.cell]
	r, ok := cl.fuRuns[x.run]
	if !ok || !cl.up || cl.epoch != x.epoch {
		return // in the memory of a process that is gone
	}
	switch x.kind {
	case mFuHold, mFuHoldLost:
		m.fuHold(r, x.kind == mFuHoldLost)
	case mAdjustResp:
		m.fuAdjusted(r, x.res)
	case mFuSettle, mFuSettleLost:
		m.fuSettle(r, x.kind == mFuSettleLost)
	}
}

// limitReasons are the refusals of the ledger's limits.
var limitReasons = map[string]bool{followup.CaptureExceeds: true, followup.RefundExceeds: true,
	followup.RefundBeforeCapture: true, followup.VoidAfterCapture: true, followup.OriginalVoided: true}

// fuHold is store.HoldFollowUp, its transaction committed: under the
// original's row lock, a record of the follow-up already there is
// replayed; else the real FollowUpRecord and HoldFollowUp decide on the
// original as read, and the record is written sending with the hold on
// the original's ledger, or the claim is given up. lost: the commit
// landed and its answer did not (UNAVAILABLE, the record left sending for
// the reconciler).
func (m *model) fuHold(r *fuRun, lost bool) {
	if r.phase != fuHolding {
		return // the other of the pair came first
	}
	r.phase = fuAdjusting
	x := r.x
	cl := m.cells[x.cell]
	if f, ok := cl.fdb[x.id]; ok {
		m.fuEnd(r, m.fuReplay(x.cell, f, x.id, x.fu, r.fp), -1)
		return
	}
	if rec := m.payRecordAt(x.cell, x.id); rec != nil {
		m.fuEnd(r, m.fuReplayPayment(x.cell, x.id, rec, x.fu, r.fp), -1)
		return
	}
	orig := cl.db[x.fu.orig] // read before, and rows are never deleted
	o := orchestratorRecord(x.cell, x.fu.orig, orig)
	f := cellside.FollowUpRecord(fuRequest(x.id, x.fu), o, cellName(x.cell), r.fp, "", modelTime)
	decide := o
	if m.rules.NoHold {
		c := *o
		decide = &c // decided on a copy: nothing held
	}
	if err := cellside.HoldFollowUp(decide, f); err != nil {
		var refused *cellside.Refused
		if !errors.As(err, &refused) {
			panic(fmt.Sprintf("model: HoldFollowUp: %v", err))
		}
		if limitReasons[refused.Reason] {
			m.cover(covFuOverLimit)
		}
		m.logf("cell %d: follow-up %s (%v) refused: %s", x.cell, x.id, x.fu, refused.Reason)
		m.fuUnclaimLater(x)
		m.fuEnd(r, result{status: "FAILED_PRECONDITION", reason: refused.Reason}, -1)
		return
	}
	cl.fdb[x.id] = &fuRecord{rec: f, p: x.fu}
	orig.ledger.HeldCapture, orig.ledger.HeldRefund = o.Ledger.HeldCapture, o.Ledger.HeldRefund
	r.held = f
	m.logf("cell %d: follow-up %s (%v) held, ledger of %s %+v", x.cell, x.id, x.fu, x.fu.orig, orig.ledger)
	if lost {
		m.cover(covFuHoldLost)
		m.logf("cell %d: follow-up %s held, the commit's answer lost", x.cell, x.id)
		m.fuEnd(r, result{status: "UNAVAILABLE"}, -1)
		return
	}
	cl.fuWait[r.n] = x.id
	m.send(msg{kind: mAdjustReq, run: r.n, cell: x.cell, epoch: cl.epoch, id: x.id, fu: x.fu})
}

// fuUnclaimLater is unclaimLater: the claim abandoned, best effort.
func (m *model) fuUnclaimLater(x msg) {
	if !m.rules.NoDirectory {
		m.send(msg{kind: mFuDirUpdate, cell: x.cell, id: x.id, fu: x.fu, dirState: entryAbandoned})
	}
}

// fuAdjusted is the issuer's answer to r's Adjust: the outcome, to
// persist; a closed ID is an outcome unknown (PENDING).
func (m *model) fuAdjusted(r *fuRun, res result) {
	cl := m.cells[r.x.cell]
	if _, ok := cl.fuWait[r.n]; !ok {
		return // given up (issuer timeout)
	}
	delete(cl.fuWait, r.n)
	if res.status == "CLOSED" {
		m.fuPending(r)
		return
	}
	r.out = cellside.FollowUpOutcome(r.held, res.status == "APPROVED", res.auth, res.reason, modelTime)
	r.phase = fuSettling
	m.send(msg{kind: mFuSettle, run: r.n, cell: r.x.cell, epoch: cl.epoch, id: r.x.id})
	m.send(msg{kind: mFuSettleLost, run: r.n, cell: r.x.cell, epoch: cl.epoch, id: r.x.id})
}

// fuIssuerTimeout: cell i's run n stops waiting for the issuer.
func (m *model) fuIssuerTimeout(i, n int) {
	cl := m.cells[i]
	delete(cl.fuWait, n)
	m.logf("cell %d: issuer timeout for follow-up %s", i, cl.fuRuns[n].x.id)
	m.fuPending(cl.fuRuns[n])
}

// fuPending answers PENDING from the held record: the reconciler
// resolves it (the store's Release lets it).
func (m *model) fuPending(r *fuRun) {
	m.fuEnd(r, resultOf(r.held.Transaction()), -1)
}

// fuSettle is persistAfterIssuer: the outcome's write from sending,
// settling the hold. lost: the write committed and its answer was lost,
// and the retry finds the record no longer sending (ErrStateChanged:
// PENDING); SettleTwice's store applies it again.
func (m *model) fuSettle(r *fuRun, lost bool) {
	if r.phase != fuSettling {
		return
	}
	i := r.x.cell
	ok := m.fuPersist(i, r.out)
	if ok && lost {
		m.logf("cell %d: follow-up %s settled, the commit's answer lost: tried again", i, r.x.id)
		ok = m.fuPersist(i, r.out)
	}
	if !ok {
		m.fuPending(r)
		return
	}
	res := resultOf(r.out.Transaction())
	m.fuFinalizeLater(i, r.x.id, r.x.fu, res)
	m.fuEnd(r, res, -1)
}

// fuPersist is store.Persist of follow-up out from sending
// (settleFollowUp): the record's new state and its original's ledger
// settled together (approved: into the sums; anything else released),
// only while the record is sending (unless SettleTwice). false: it was
// not (ErrStateChanged).
func (m *model) fuPersist(i int, out *cellside.Record) bool {
	cl := m.cells[i]
	f := cl.fdb[out.TransactionID]
	if f == nil || f.rec.State != cellside.StateSending && !m.rules.SettleTwice {
		return false
	}
	rec := *out
	f.rec = &rec
	if o := cl.db[rec.Original]; o != nil {
		o.ledger.Settle(rec.PaymentType, rec.Amount, rec.State == cellside.StateApproved)
		m.logf("cell %d: follow-up %s %s, ledger of %s %+v", i, rec.TransactionID, rec.State, rec.Original, o.ledger)
	}
	if rec.State == cellside.StateApproved && rec.PaymentType == cellpayv1.PaymentType_REFUND {
		m.cover(covFuRefunded)
	}
	return true
}

// fuFinalizeLater is fileLater: the entry's final answer, best effort.
func (m *model) fuFinalizeLater(i int, id string, p fuPayload, res result) {
	if !m.rules.NoDirectory {
		m.send(msg{kind: mFuDirUpdate, cell: i, id: id, fu: p, dirState: entryFinal, res: res})
	}
}

// fuApplyUpdate is a follow-up's best-effort entry update reaching the
// directory: Finalize (the entry this cell's or missing, not final yet)
// or Abandon (the entry this cell's claim).
func (m *model) fuApplyUpdate(x msg) {
	e := m.fdir[x.id]
	if pe := m.payEntryOf(x.id); pe != nil {
		// A payment's entry holds the key: Finalize writes over it if it
		// is this cell's and not final; Abandon names the follow-up's
		// claim, which it is not.
		if x.dirState != entryFinal || pe.owner != x.cell || pe.state == entryFinal {
			m.logf("directory: follow-up %s %s by cell %d refused (a payment's entry)", x.id, x.dirState, x.cell)
			return
		}
		e = m.fuOver(x.id, x.cell, x.fu)
	}
	switch x.dirState {
	case entryFinal:
		switch {
		case e == nil:
			e = &fuEntry{owner: x.cell}
			m.fdir[x.id] = e
		case e.owner != x.cell || e.state == entryFinal:
			return
		}
		e.rev++
		e.p, e.fp, e.state, e.res = x.fu, fuFingerprint(x.id, x.fu), entryFinal, x.res
	case entryAbandoned:
		if e == nil || e.owner != x.cell || e.state != entryOwned {
			return
		}
		e.rev++
		e.state = entryAbandoned
	}
	m.logf("directory: follow-up %s %s (%v)", x.id, e.state, e.res)
}

// fuBusy: a run in cell i's process holds follow-up id's record (it wrote
// it and has not answered yet): the reconciler leaves it alone.
func (m *model) fuBusy(i int, id string) bool {
	for _, r := range m.cells[i].fuRuns {
		if r.x.id == id && r.held != nil {
			return true
		}
	}
	return false
}

// fuUnresolved lists cell i's sending follow-ups no run works on.
func (m *model) fuUnresolved(i int) []string {
	cl := m.cells[i]
	var out []string
	for _, id := range slices.Sorted(maps.Keys(cl.fdb)) {
		if cl.fdb[id].rec.State == cellside.StateSending && !m.fuBusy(i, id) {
			out = append(out, id)
		}
	}
	return out
}

// fuReconcile is reconcile.resolve for cell i's sending follow-ups: the
// entry another cell's, abandoned; else the issuer's outcome, or the ID
// closed and FAILED issuer_not_reached, written to the entry first (only
// while it is this cell's), then persisted, settling the ledger. Part of
// reconcileRound (a cell up, or starting after a loss).
func (m *model) fuReconcile(i int) {
	cl := m.cells[i]
	for _, id := range m.fuUnresolved(i) {
		f := cl.fdb[id]
		out := *f.rec
		if e := m.fuKeyEntry(id); !m.rules.NoDirectory && e.found && e.owner != i {
			out.State = cellside.StateAbandoned
			m.fuPersist(i, &out)
			m.logf("reconcile cell %d: follow-up %s -> abandoned (entry cell %d's)", i, id, e.owner)
			continue
		}
		if r, ok := m.outcome[id]; ok {
			out.State, out.AuthCode, out.DeclineReason = cellside.StateDeclined, "", r.reason
			if r.status == "APPROVED" {
				out.State, out.AuthCode, out.DeclineReason = cellside.StateApproved, r.auth, ""
			}
		} else {
			if slices.ContainsFunc(m.pool, func(x msg) bool { return x.kind == mAdjustReq && x.id == id }) {
				m.cover(covFuCloseInFlight)
			}
			if !m.rules.ReconcilerNoClose {
				m.closed[id] = true
				m.logf("issuer: follow-up %s closed by cell %d's inquiry", id, i)
			}
			out.State, out.DeclineReason = cellside.StateFailed, reasonNotReached
		}
		res := resultOf(out.Transaction())
		if !m.rules.NoDirectory {
			e := m.fdir[id]
			if pe := m.payEntryOf(id); pe != nil && pe.state != entryFinal {
				e = m.fuOver(id, i, f.p) // this cell's payment entry, not final: written over
			}
			switch {
			case m.payEntryOf(id) != nil:
				// A payment's final entry of this cell's: Finalize writes
				// nothing ("written before").
			case e == nil:
				m.fdir[id] = &fuEntry{rev: 1, owner: i, p: f.p, fp: f.rec.Fingerprint, state: entryFinal, res: res}
			case e.state != entryFinal:
				e.rev++
				e.state, e.res, e.p, e.fp = entryFinal, res, f.p, f.rec.Fingerprint
			}
		}
		m.fuPersist(i, &out)
		m.cover(covFuReconciled)
		m.logf("reconcile cell %d: follow-up %s -> %s", i, id, out.State)
	}
}

// --- the issuer (issuersim's Adjust) ---

// issuerReasons are issuersim's decline reasons for the ledger's rules
// (its brokenReasons).
var issuerReasons = map[string]string{followup.CaptureExceeds: "exceeds_authorized", followup.OriginalVoided: "voided",
	followup.VoidAfterCapture: "already_captured", followup.RefundExceeds: "exceeds_captured", followup.RefundBeforeCapture: "exceeds_captured"}

// adjust is the issuer applying x's Adjust: the recorded outcome of its
// ID, CLOSED for an ID an inquiry closed, or the adjustment held and
// settled at once on the issuer's ledger of its authorization, or
// declined.
func (m *model) adjust(x msg) result {
	id, p := x.id, x.fu
	m.requests[id]++
	if r, ok := m.outcome[id]; ok && !m.rules.IssuerNoDedupe {
		return r
	}
	if m.closed[id] {
		m.cover(covFuClosedRefused)
		return result{status: "CLOSED"}
	}
	m.effects[id]++
	for i, cl := range m.cells {
		if f := cl.fdb[id]; f != nil && f.rec.State == cellside.StateFailed && f.rec.DeclineReason == reasonNotReached {
			m.violate("FAILED issuer_not_reached is final: the issuer applied follow-up %s after cell %d recorded it not reached", id, i)
		}
	}
	r := m.applyAdjust(id, p)
	m.journalAdjust(x.cell, id, p, r)
	if _, ok := m.outcome[id]; !ok {
		m.outcome[id] = r
	}
	m.logf("issuer: follow-up %s (%v): %v", id, p, r)
	return r
}

func (m *model) applyAdjust(id string, p fuPayload) result {
	l := m.auths[p.orig]
	if l == nil {
		return result{status: "DECLINED", reason: "unknown_original"}
	}
	amount := p.amount
	if p.kind == cellpayv1.PaymentType_VOID {
		amount = l.Authorized
	} else if amount%13 == 0 {
		return result{status: "DECLINED", reason: "do_not_honor"}
	}
	if err := l.Hold(p.kind, amount); err != nil {
		var b *followup.Broken
		if !errors.As(err, &b) {
			panic(fmt.Sprintf("model: Hold: %v", err))
		}
		return result{status: "DECLINED", reason: issuerReasons[b.Reason]}
	}
	l.Settle(p.kind, amount, true)
	m.applied[id] = fuEffect{p: p, amount: amount}
	return result{status: "APPROVED", auth: "A-" + id}
}

// --- invariants ---

// ledgerBroken names the limit l breaks, the ledger of id in cell i (-1:
// at the issuer).
func ledgerBroken(id string, i int, l followup.Ledger) error {
	if l.Valid() && l.Captured <= l.Authorized {
		return nil
	}
	whose := "the issuer's " + id
	if i >= 0 {
		whose = fmt.Sprintf("%s in cell %d", id, i)
	}
	switch {
	case l.Captured > l.Authorized:
		return fmt.Errorf("captured ≤ authorized: %s captured %d of %d", whose, l.Captured, l.Authorized)
	case l.Refunded > l.Captured:
		return fmt.Errorf("refunded ≤ captured: %s refunded %d of %d captured", whose, l.Refunded, l.Captured)
	case l.Voided && l.Captured > 0:
		return fmt.Errorf("no capture after a void: %s voided with %d captured", whose, l.Captured)
	}
	return fmt.Errorf("every authorization's ledger is valid: %s %+v", whose, l)
}

// fuCheck is what must hold of the follow-ups after every step: every
// authorization's ledger valid in the cells' stores, and what it holds the
// sum of its follow-ups in flight there; the issuer's ledgers valid; one
// answer per follow-up ID and payload, ALREADY_EXISTS for another
// payload; every final answer the issuer's outcome. (At most one issuer
// effect per ID, follow-ups' included: check.) sorted: as checkIn's.
func (m *model) fuCheck(sorted bool) error {
	for i, cl := range m.cells {
		err := each(sorted, cl.db, func(id string, rec *record) error {
			l := rec.ledger
			if rec.state != approved {
				if l != (followup.Ledger{}) {
					return fmt.Errorf("a ledger only on an approved authorization: %s is %s in cell %d with %+v", id, rec.state, i, l)
				}
				return nil
			}
			l.Authorized = amountOf(rec.payload)
			if err := ledgerBroken(id, i, l); err != nil {
				return err
			}
			var heldCapture, heldRefund int64
			for _, f := range cl.fdb {
				if f.rec.State != cellside.StateSending || f.rec.Original != id {
					continue
				}
				if f.rec.PaymentType == cellpayv1.PaymentType_REFUND {
					heldRefund += f.rec.Amount
				} else {
					heldCapture += f.rec.Amount
				}
			}
			if heldCapture != l.HeldCapture || heldRefund != l.HeldRefund {
				return fmt.Errorf("a follow-up in flight is held on its authorization: %s in cell %d holds capture %d, refund %d; its sending follow-ups there %d, %d",
					id, i, l.HeldCapture, l.HeldRefund, heldCapture, heldRefund)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	err := each(sorted, m.auths, func(id string, l *followup.Ledger) error {
		return ledgerBroken(id, -1, *l)
	})
	if err != nil {
		return err
	}
	return each(sorted, m.fuAnswers, func(id string, as []fuAnswered) error {
		first := -1
		for i, a := range as {
			if a.res.isError() {
				continue
			}
			if err := m.fuIssuerAgrees(id, a.res); err != nil {
				return err
			}
			switch {
			case first < 0:
				first = i
			case a.p != as[first].p:
				return fmt.Errorf("same follow-up ID, other payload, ALREADY_EXISTS: %s answered %v for %v and %v for %v", id, as[first].res, as[first].p, a.res, a.p)
			case a.res.final() && !as[first].res.final():
				first = i
			case a.res.final() && a.res != as[first].res:
				return fmt.Errorf("a follow-up ID answered one final outcome: %s answered %v and %v", id, as[first].res, a.res)
			}
		}
		return nil
	})
}

// fuIssuerAgrees: a follow-up answered APPROVED is the issuer's approved
// effect, with its auth code; one answered DECLINED or FAILED is no
// approved effect.
func (m *model) fuIssuerAgrees(id string, res result) error {
	o, ok := m.outcome[id]
	switch {
	case res.status == "APPROVED" && (!ok || o != res):
		return fmt.Errorf("an approved follow-up is the issuer's: %s answered %v, the issuer's outcome %v", id, res, o)
	case (res.status == "DECLINED" || res.status == "FAILED") && o.status == "APPROVED":
		return fmt.Errorf("a follow-up declined or failed is no issuer effect: %s answered %v, the issuer approved it", id, res)
	}
	return nil
}

// fuCheckHealed is what must hold of the follow-ups once faults heal:
// every call answered, every follow-up resolved (none sending, nothing
// held), the directory's final entries equal to the records, and the
// money equal to the minor unit: per authorization, its approved
// follow-ups as partners know them (their final answers, else what a read
// returns), its ledger in its cell, and the issuer's ledger and
// adjustments applied.
func (m *model) fuCheckHealed() error {
	for _, c := range m.fuCalls {
		if !c.done {
			return fmt.Errorf("follow-up call f%d (%s) never answered", c.n, c.id)
		}
	}
	for i, cl := range m.cells {
		if len(cl.fuRuns) > 0 {
			return fmt.Errorf("cell %d still runs follow-ups: %d", i, len(cl.fuRuns))
		}
		for _, id := range slices.Sorted(maps.Keys(cl.fdb)) {
			if f := cl.fdb[id]; f.rec.State == cellside.StateSending {
				return fmt.Errorf("every follow-up resolved: %s (%v) is sending in cell %d", id, f.p, i)
			}
		}
		for _, id := range slices.Sorted(maps.Keys(cl.db)) {
			if l := cl.db[id].ledger; l.HeldCapture != 0 || l.HeldRefund != 0 {
				return fmt.Errorf("every hold settled: %s in cell %d holds %+v", id, i, l)
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(m.fdir)) {
		e := m.fdir[id]
		if e.state != entryFinal {
			continue
		}
		f := m.cells[e.owner].fdb[id]
		if f == nil && m.lostUnseen(e.owner, id) {
			continue // a decision the issuer never saw, lost with its record (loss.go)
		}
		if f == nil || resultOf(f.rec.Transaction()) != e.res {
			return fmt.Errorf("the directory agrees with the records: follow-up %s is %v in the directory, record in cell %d %v", id, e.res, e.owner, f)
		}
	}
	type sums = followup.Ledger
	add := func(to map[string]sums, p fuPayload, amount int64) {
		s := to[p.orig]
		switch p.kind {
		case cellpayv1.PaymentType_CAPTURE:
			s.Captured += amount
		case cellpayv1.PaymentType_REFUND:
			s.Refunded += amount
		case cellpayv1.PaymentType_VOID:
			s.Voided = true
		}
		to[p.orig] = s
	}
	partners, issuer, cells := map[string]sums{}, map[string]sums{}, map[string]sums{}
	for _, id := range slices.Sorted(maps.Keys(m.fuAnswers)) {
		var known *fuAnswered
		for _, a := range m.fuAnswers[id] {
			if a.res.final() {
				known = &a
			}
		}
		if known == nil {
			// No final answer: the partner reads it.
			for _, cl := range m.cells {
				if f := cl.fdb[id]; f != nil && f.rec.State != cellside.StateAbandoned {
					known = &fuAnswered{p: f.p, res: resultOf(f.rec.Transaction())}
				}
			}
		}
		if known != nil && known.res.status == "APPROVED" {
			add(partners, known.p, known.p.amount)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(m.applied)) {
		add(issuer, m.applied[id].p, m.applied[id].amount)
	}
	for _, cl := range m.cells {
		for _, id := range slices.Sorted(maps.Keys(cl.db)) {
			if l := cl.db[id].ledger; l != (followup.Ledger{}) {
				if _, ok := cells[id]; ok {
					return fmt.Errorf("an authorization's follow-ups in one cell: %s has a ledger in two", id)
				}
				cells[id] = sums{Captured: l.Captured, Refunded: l.Refunded, Voided: l.Voided}
			}
		}
	}
	origs := map[string]bool{}
	for _, mp := range []map[string]sums{partners, issuer, cells} {
		for id := range mp {
			origs[id] = true
		}
	}
	for _, id := range slices.Sorted(maps.Keys(origs)) {
		var at sums
		if l := m.auths[id]; l != nil {
			at = sums{Captured: l.Captured, Refunded: l.Refunded, Voided: l.Voided}
		}
		p, is, c := partners[id], issuer[id], cells[id]
		if p != is || is != at || at != c {
			return fmt.Errorf("amounts equal to the minor unit: %s's approved follow-ups: as partners know them %s, applied by the issuer %s, its ledger at the issuer %s, in its cell %s",
				id, sumsString(p), sumsString(is), sumsString(at), sumsString(c))
		}
	}
	return nil
}

func sumsString(l followup.Ledger) string {
	return fmt.Sprintf("{captured %d refunded %d voided %v}", l.Captured, l.Refunded, l.Voided)
}
