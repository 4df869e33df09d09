package model

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cellpay/cellpay/internal/followup"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/internal/pnr/gtrside"
)

// Rules are test-only knobs, each breaking one rule of the protocol. The
// zero value is the protocol as designed; the knob tests check that the
// invariants catch each break. A rule the real machines keep is broken by
// their drivers (cell_test.go, gtr_test.go, directory_test.go), which
// perturb an action or an event; the machines are never changed.
type Rules struct {
	// RerouteAfterPNR: the GTR's call loop restarts an attempt on the
	// next cell when the machine answers PENDING for a stream that broke
	// (or said re-routable) after Proceed.
	RerouteAfterPNR bool
	// ProceedAfterTimeout: the GTR's driver sends Proceed for a PNR of an
	// attempt it has already given up (its timer fired, it re-routed, or
	// the caller's deadline passed): payments.go ignoring timer.Stop()'s
	// result.
	ProceedAfterTimeout bool
	// IssuerWithoutProceed: the cell's driver answers EmitPNR with
	// PNRConfirmed at once, without waiting for the GTR's Proceed (the
	// protocol before the handshake).
	IssuerWithoutProceed bool
	// ReconcilerResends: the reconciler sends the authorization again when
	// the inquiry finds nothing, instead of waiting out the grace period
	// and recording FAILED.
	ReconcilerResends bool
	// IssuerNoDedupe: the issuer applies every request, not one per ID.
	IssuerNoDedupe bool
	// IgnorePayload: the cell's store hands the machine an existing record
	// with the request's fingerprint, so it answers a replay from its
	// record without telling the payloads apart.
	IgnorePayload bool
	// PendingWithoutProceeding: the GTR answers PENDING for an attempt it
	// sent Proceed to whatever follows (a stream that ends, the cell's
	// own step back), as it did before the cell said Proceeding: a
	// Proceed that reaches the cell after it stopped waiting leaves a
	// PENDING that no one resolves (issue 38's first bug).
	PendingWithoutProceeding bool
	// ReconcilerNoClose: the reconciler records FAILED
	// issuer_not_reached after an inquiry that found nothing without
	// closing the ID at the issuer, as it did before the close existed:
	// an issuer request delivered late is applied after the FAILED
	// (issue 38's second bug).
	ReconcilerNoClose bool
	// NoWaitOnSending: the cell's driver tells the machine that no other
	// attempt at the ID runs in the process (Existing.Active and
	// Claimed.Active false), so a duplicate answers PENDING from a sending
	// record whose handshake may still be open (Machine.existing and
	// Server.wait before they looked at othersBusy).
	NoWaitOnSending bool
	// NoStepBackAfterLostCommit: the driver does not write the step back
	// of an attempt whose write to sending failed (Persist.OrFrom), and
	// the attempt re-routes with its record as the write left it (the
	// machine before it asked for the step back; TestCellInstances found
	// it).
	NoStepBackAfterLostCommit bool

	// The transaction directory's rules
	// (docs/design/transaction-directory.md).

	// NoDirectory: cells run without the directory (Input.Directory
	// false: the protocol before it): an abandoned record is re-routable
	// unless last_resort, and the reconciler records FAILED
	// issuer_not_reached on its own.
	NoDirectory bool
	// ReconcilerNoClaim: the reconciler records FAILED issuer_not_reached
	// without the synchronous entry update, and without looking at who
	// owns the entry.
	ReconcilerNoClaim bool
	// TakeoverAnyCall: the directory shows a cell another cell's owned
	// entry (same payload) as claimed by an earlier attempt of the cell's
	// own call, unpinned, so the machine takes it over for any call.
	TakeoverAnyCall bool
	// IgnoreOwner: where the machine would answer re-routable to the
	// owner of another cell's entry (not final, same payload), the
	// directory answers its first claim as unavailable and the cell goes
	// on without a claim, with its own rules (Input.Home is set).
	IgnoreOwner bool
	// AnswerEntryAnyPayload: the directory shows a cell a final entry
	// with the request's fingerprint, so the machine answers from it
	// whatever the payload.
	AnswerEntryAnyPayload bool
	// NoPin: the directory answers the machine's pin (a Claim of its own
	// entry, pinned) as written without writing it, so the owner answers
	// PENDING from a leftover sending record and a later attempt of the
	// entry's call may still take it over (the design note as first
	// written).
	NoPin bool
	// SlowClaimIsOutage: a slow claim (slowclaim.go) is answered as a
	// directory outage, so a natural home goes on without a claim, and
	// an outcome whose entry write was slow is recorded in the cell alone
	// (the rules as built until 2026-12-07: one slow claim counted as an
	// outage for its attempt).
	SlowClaimIsOutage bool

	// NoDecisionEntry: the directory answers the machine's write of a
	// decision taken before the PNR into the entry as written without
	// writing it, as the cell did before a decision went into the entry
	// first: a later attempt of the same call takes the entry over and
	// decides again on another cell (issue 38's simulator found it).
	NoDecisionEntry bool

	// Follow-ups' rules (followup.go).

	// NoHold: the store records a follow-up in state sending without
	// holding its amount on its original's ledger (cellside.HoldFollowUp
	// decides on a copy of the original), and the cell sends it to the
	// issuer all the same: the sums a later follow-up is checked against
	// leave it out while its outcome is unknown.
	NoHold bool
	// SettleTwice: the store's settle of a follow-up does not ask that
	// its record still be sending (settleSQL without state = 'sending'),
	// so persistAfterIssuer's retry of a settle whose commit landed with
	// its answer lost settles the ledger a second time.
	SettleTwice bool
	// KindsApart: the cells' stores and the directory keep payments' and
	// follow-ups' IDs apart, two key spaces (as this model did before
	// reuse.go), so that a follow-up under a payment's ID, or a payment
	// under a follow-up's, is decided as a new transaction; the issuer
	// keeps its one key space.
	KindsApart bool
	// ClaimAnyOwnEntry: a follow-up's claim takes its cell's directory
	// entry as its own whoever claimed it, as claimFollowUp did on
	// Directory.Claim's "e.Owner owns it already" before it looked at the
	// entry's call and payload. A follow-up that meets a payment's claim
	// not yet recorded in that cell (a crash, or the GTR's attempt timer,
	// between the claim and the insert) is then held and sent to the
	// issuer, and the payment's next attempt on another cell takes the
	// entry over and is sent too: two transactions under one ID, the
	// payment answered with the follow-up's outcome (found by the
	// simulator, testdata/sim/claim-any-own-entry.txt).
	ClaimAnyOwnEntry bool

	// GroupCommit is no broken rule but the store's group commit
	// (cmd/cell/internal/store/group.go): the durable writes after the
	// claim (the insert or reclaim, and every persist) wait in the
	// process for a shared commit, delivered as a message of their own
	// (mCommit), so any step may come between a write and its commit,
	// writes of several attempts commit back to back, and a crash loses
	// the writes not yet committed; an attempt goes on only once its
	// write has committed. The insert or reclaim stays atomic with the
	// claim before it unless AsyncInsert is set too: see AsyncInsert.
	GroupCommit bool
	// AsyncInsert, with GroupCommit, queues the insert or reclaim too,
	// which opens the window between a claim and its record's write to
	// other steps (the window is in the code with or without group
	// commit: two round trips). Rapid found two races in it, both fixed in
	// the machine: a duplicate attempt in the same cell took the entry over
	// from a claimant whose reclaim had not yet committed (the record
	// still read abandoned), and the claimant called the issuer under an
	// entry naming another call (a reclaim now comes before the claim, so
	// only the attempt that wins the record takes the entry); and an entry
	// taken over by a cell that crashed before its insert let another
	// payload start there (a claimed entry's payload is now compared, as a
	// record's is). TestProtocolAsyncInsert.
	AsyncInsert bool
	// LossAnyPoint is no broken rule either but a wider fault: the loss
	// of a store's last commits (loss.go) may go back to any of its
	// images, one that holds a payment short of its point of no return
	// the store has since passed included (received while the issuer
	// applied it), which the recovery catches up (issuercheck's Behind;
	// before it did, nothing wrote it).
	LossAnyPoint bool
}

const (
	numCells = 3
	// numReplicas is the number of GTR replicas. Each has its own
	// coalescing and its own remembered-cell cache.
	numReplicas = 2
	// rememberCap bounds each replica's remembered-cell cache (Remember in
	// payments.Config, 100,000 by default); the oldest entry goes first.
	rememberCap = 2
)

// reasonNotReached is reconcile.ReasonNotReached.
const reasonNotReached = "issuer_not_reached"

// payload is a request's content, reduced to what decides its outcome:
// payload%3 == 0 is approved by the issuer, 1 declined by the issuer, 2
// declined by the cell before its PNR (a risk limit).
type payload int

// result is what a partner is told, and what a record says.
type result struct {
	status string // APPROVED, DECLINED, FAILED, PENDING, or an error code
	auth   string
	reason string
}

func (r result) isError() bool {
	switch r.status {
	case "APPROVED", "DECLINED", "FAILED", "PENDING":
		return false
	}
	return true
}

func (r result) final() bool {
	return r.status == "APPROVED" || r.status == "DECLINED" || r.status == "FAILED"
}

func (r result) notReached() bool { return r.status == "FAILED" && r.reason == reasonNotReached }

type state string

const (
	received  state = "received"
	sending   state = "sending"
	approved  state = "approved"
	declined  state = "declined"
	failed    state = "failed"
	abandoned state = "abandoned"
	deciding  state = "deciding"
)

type record struct {
	state   state
	payload payload
	auth    string
	reason  string
	// attempt is the attempt that wrote the record (Insert or Reclaim):
	// the reconciler's grace waits for that attempt's issuer request.
	attempt attemptKey
	// ledger is an approved authorization's follow-up sums, as its row
	// keeps them (held_capture, held_refund, captured, refunded, voided);
	// Authorized is left zero here (it is the record's amount).
	ledger followup.Ledger
	// recovered is the row as the recovery wrote it (loss.go), marked
	// recovered, with no fingerprint: what the store reads for it
	// (orchestratorRecord), its ledger apart. payload is then the
	// payload the issuer's effect was of, which the row does not hold:
	// the model's checks' only.
	recovered *cellside.Record
}

func (r *record) result() result {
	switch r.state {
	case sending:
		return result{status: "PENDING"}
	case approved:
		return result{status: "APPROVED", auth: r.auth}
	case declined:
		return result{status: "DECLINED", reason: r.reason}
	case failed:
		return result{status: "FAILED", reason: r.reason}
	}
	return result{status: "INTERNAL"}
}

func (r *record) pastPNR() bool {
	return r.state != received && r.state != abandoned && r.state != deciding
}

// attemptKey names one attempt: the GTR call and its attempt number.
type attemptKey struct {
	call    int
	attempt int
}

// noAttempt marks an issuer request no attempt made (a reconciler's
// resend).
var noAttempt = attemptKey{-1, -1}

type cell struct {
	up    bool
	epoch int // bumped by a crash: in-memory work of older epochs is gone
	db    map[string]*record
	// awaiting: attempts that recorded sending, sent their PNR and wait
	// for the GTR's Proceed (confirmPNR's stream.Recv), by ID.
	awaiting map[attemptKey]string
	// issuerWait: attempts waiting for the issuer's answer, by ID.
	issuerWait map[attemptKey]string
	// runs: the attempts in progress in the process, each its machine;
	// persisting: their persists from received, waiting for mMarkSend.
	runs       map[attemptKey]*run
	persisting map[attemptKey]cellside.Persist
	// committing: their writes waiting for a shared commit, mCommit
	// (Rules.GroupCommit).
	committing map[attemptKey]cellside.Action
	// fdb: the follow-ups' records (the same table in the code, and one
	// key space with db's: reuse.go). fuRuns: the follow-ups in
	// progress in the process, by run; fuWait: those waiting for the
	// issuer's answer to their Adjust.
	fdb    map[string]*fuRecord
	fuRuns map[int]*fuRun
	fuWait map[int]string
}

// replica is one GTR process.
type replica struct {
	// moved is the remembered-cell cache: for transactions completed on a
	// later attempt, the cell that completed them; order is FIFO
	// eviction, as moved.go's ring.
	moved map[string]int
	order []string
}

func (r *replica) remember(id string, cell int) {
	if _, ok := r.moved[id]; !ok {
		if len(r.order) == rememberCap {
			delete(r.moved, r.order[0])
			r.order = r.order[1:]
		}
		r.order = append(r.order, id)
	}
	r.moved[id] = cell
}

// promote moves the remembered cell of id to the front of ranked.
func (r *replica) promote(id string, ranked []int) []int {
	c, ok := r.moved[id]
	if !ok {
		return ranked
	}
	i := slices.Index(ranked, c)
	if i <= 0 {
		return ranked
	}
	out := append([]int{c}, ranked[:i]...)
	return append(out, ranked[i+1:]...)
}

// call is one SubmitTransaction flight at a GTR replica.
type call struct {
	n       int
	replica int
	id      string
	payload payload
	ranking []int // as routed; the call machine may redirect
	attempt int   // the current attempt's number, from 0
	cell    int   // the current attempt's cell
	pnr     bool  // Proceed sent for the current attempt
	done    bool
	answer  result
	joined  int // coalesced duplicates answered with this call
	// gm is the current attempt's machine; now is the call's clock, and
	// deadlineAt the current attempt timer's.
	cm         *gtrside.Call
	gm         *gtrside.Machine
	now        time.Time
	deadlineAt time.Time
}

func (c *call) key() attemptKey { return attemptKey{c.n, c.attempt} }

type msgKind int

const (
	mProcess      msgKind = iota // GTR -> cell: start an attempt (opens its stream)
	mCancel                      // GTR -> cell: the attempt's stream is cancelled
	mProceed                     // GTR -> cell: confirms the point of no return
	mMarkSend                    // cell, in memory: persist from received (decline or sending)
	mWait                        // cell, in memory: wait for a concurrent attempt at the ID
	mPNR                         // cell -> GTR on the attempt's stream
	mResult                      // cell -> GTR on the attempt's stream
	mReroutable                  // cell -> GTR on the attempt's stream
	mIssuerReq                   // cell -> issuer
	mIssuerResp                  // issuer -> cell
	mDirUpdate                   // cell -> directory: a best-effort entry update
	mCommit                      // cell, in memory: a queued write commits (Rules.GroupCommit)
	mMarkSendLost                // cell, in memory: the sending write commits, and its answer is lost
	mProceeding                  // cell -> GTR on the attempt's stream: Proceed taken, the issuer is next
	mFollowUp                    // GTR -> cell: a follow-up (Cell.FollowUp, unary)
	mFollowUpResp                // cell -> GTR: its answer, or the original's owner
	mFuHold                      // cell, in memory: the follow-up's hold transaction commits
	mFuHoldLost                  // cell, in memory: the hold commits, and its answer is lost
	mAdjustReq                   // cell -> issuer: Adjust
	mAdjustResp                  // issuer -> cell
	mFuSettle                    // cell, in memory: the outcome's write (settling the hold) commits
	mFuSettleLost                // cell, in memory: it commits, and its answer is lost
	mFuDirUpdate                 // cell -> directory: a follow-up's best-effort entry update
)

var kindNames = [...]string{"process", "cancel", "proceed", "mark-sending", "wait", "pnr", "result", "reroutable", "issuer-request", "issuer-response", "directory-update", "commit", "mark-sending-answer-lost", "proceeding",
	"follow-up", "follow-up-answer", "hold", "hold-answer-lost", "adjust", "adjust-response", "settle", "settle-answer-lost", "follow-up-directory-update"}

type msg struct {
	kind       msgKind
	call       int
	attempt    int
	cell       int
	epoch      int // the cell's epoch, for messages that live in its memory or answer it
	id         string
	payload    payload
	lastResort bool
	res        result
	// recPayload is the payload of the record a result was read from.
	recPayload payload
	// owner, with redirect, is the cell a re-routable names: the owner
	// of the ID's directory entry.
	owner    int
	redirect bool
	// rev and dirState are a directory update's revision and new state.
	rev      int
	dirState entryState
	// held: stuck in a stalled connection's send buffer (sim.go's
	// stHold), delivered only once released, whole and late.
	held bool
	// fu is a follow-up's payload, and run its run in the cell
	// (followup.go); a follow-up's call and the number of its request
	// (fuCall.ask) are in call and attempt.
	fu  fuPayload
	run int
}

func (x msg) key() attemptKey { return attemptKey{x.call, x.attempt} }

func (x msg) String() string {
	switch x.kind {
	case mFollowUp, mFollowUpResp:
		return fmt.Sprintf("%s(%s call f%d ask %d cell %d)", kindNames[x.kind], x.id, x.call, x.attempt, x.cell)
	case mFuHold, mFuHoldLost, mAdjustReq, mAdjustResp, mFuSettle, mFuSettleLost:
		return fmt.Sprintf("%s(%s run %d cell %d)", kindNames[x.kind], x.id, x.run, x.cell)
	case mFuDirUpdate:
		return fmt.Sprintf("%s(%s cell %d %s)", kindNames[x.kind], x.id, x.cell, x.dirState)
	}
	if x.kind == mDirUpdate {
		return fmt.Sprintf("%s(%s cell %d rev %d %s)", kindNames[x.kind], x.id, x.cell, x.rev, x.dirState)
	}
	return fmt.Sprintf("%s(%s call %d attempt %d cell %d)", kindNames[x.kind], x.id, x.call, x.attempt, x.cell)
}

// network: x crosses a connection of its cell (to or from the GTR, the
// issuer or the directory), which a stall holds back; the rest lives in
// the cell's memory.
func (x msg) network() bool {
	switch x.kind {
	case mMarkSend, mWait, mCommit, mMarkSendLost, mFuHold, mFuHoldLost, mFuSettle, mFuSettleLost:
		return false
	}
	return true
}

func (x msg) stream() bool { return x.kind.stream() }

// stream: a message of kind k travels on an attempt's stream to the GTR,
// in order.
func (k msgKind) stream() bool {
	return k == mPNR || k == mResult || k == mReroutable || k == mProceeding
}

// answered is one answer a partner got.
type answered struct {
	payload payload
	res     result
}

// model is the whole system. It is deterministic: every choice is made by
// the caller (rapid, or a scripted test).
type model struct {
	rules Rules
	// slow holds, per cell, its next claims' faults (slowclaim.go).
	slow [numCells][]bool
	// cut: the line between the sites is cut (sites.go).
	cut      bool
	cells    [numCells]*cell
	replicas [numReplicas]*replica
	calls    []*call
	// calm is the number of calls of the calm start (sim.go's calmStart).
	calm     int
	pool     []msg
	effects  map[string]int
	requests map[string]int    // issuer requests received, per ID
	outcome  map[string]result // the issuer's first outcome per ID
	answers  map[string][]answered
	// proceeded: attempts the GTR sent Proceed to. cancelled: attempts
	// whose stream the GTR cancelled and the cell has seen cancelled (a
	// property of the stream, not of the cell's memory).
	proceeded map[attemptKey]bool
	cancelled map[attemptKey]bool
	// taken: attempts whose cell received Proceed (and said Proceeding):
	// from then on the cell may call the issuer. closed: IDs the issuer
	// closed on an inquiry that found nothing.
	taken  map[attemptKey]bool
	closed map[string]bool
	// dir is the transaction directory, shared by all cells.
	dir map[string]*entry
	// violations are rule breaks seen as they happen; check reports them.
	violations []string
	// covered counts the interesting states reached (sim.go).
	covered [numCov]int
	// stalled: cells whose connections deliver nothing until they
	// recover (sim.go's stall).
	stalled [numCells]bool
	log     []string
	// quiet: no trace is kept (logf does nothing): a sweep's run, whose
	// trace is needed only if it fails, and then is run again (runQuiet).
	quiet  bool
	fus    // the follow-ups' part (followup.go)
	losses // the issuer's journal, the stores' images, their losses (loss.go)
}

func newModel(rules Rules) *model {
	m := &model{rules: rules, effects: map[string]int{}, requests: map[string]int{}, outcome: map[string]result{}, answers: map[string][]answered{},
		proceeded: map[attemptKey]bool{}, cancelled: map[attemptKey]bool{}, dir: map[string]*entry{},
		taken: map[attemptKey]bool{}, closed: map[string]bool{}, fus: newFus(), losses: newLosses()}
	for i := range m.cells {
		m.cells[i] = &cell{up: true, db: map[string]*record{}, fdb: map[string]*fuRecord{}}
		m.cells[i].forget()
	}
	for i := range m.replicas {
		m.replicas[i] = &replica{moved: map[string]int{}}
	}
	return m
}

func (m *model) logf(format string, args ...any) {
	if !m.quiet {
		m.log = append(m.log, fmt.Sprintf(format, args...))
	}
}

func (m *model) violate(format string, args ...any) {
	m.violations = append(m.violations, fmt.Sprintf(format, args...))
}

// ranking is the route for an ID: a fixed permutation of the cells, as
// rendezvous hashing gives one per key.
func ranking(id string) []int {
	h := 0
	for _, c := range id {
		h = h*31 + int(c)
	}
	first := h % numCells
	return []int{first, (first + 1) % numCells, (first + 2) % numCells}
}

// --- GTR ---

// submit is a partner's SubmitTransaction at GTR replica r.
func (m *model) submit(r int, id string, p payload) { m.submitDrained(r, id, p, -1) }

// submitDrained is submit with cell drained (-1: none) at replica r: the
// call's ranking skips it, as a cell at weight 0 is skipped. A drained
// cell still answers for what it owns: a redirect reaches it.
func (m *model) submitDrained(r int, id string, p payload, drained int) {
	m.use(id, false)
	for _, c := range m.calls {
		if c.replica == r && c.id == id && c.payload == p && !c.done {
			c.joined++ // singleflight on ID and payload: answered when c is
			m.cover(covCoalesced)
			m.logf("submit %s payload %d at gtr %d: coalesced into call %d", id, p, r, c.n)
			return
		}
	}
	rk := slices.DeleteFunc(m.replicas[r].promote(id, ranking(id)), func(c int) bool { return c == drained })
	c := &call{n: len(m.calls), replica: r, id: id, payload: p, ranking: rk, now: modelTime}
	m.calls = append(m.calls, c)
	m.logf("submit %s payload %d at gtr %d: call %d, ranking %v (drained %d)", id, p, r, c.n, c.ranking, drained)
	m.startCall(c, rk)
}

func (m *model) send(x msg) { m.pool = append(m.pool, x) }

func (m *model) finish(c *call, r result) {
	c.done, c.answer = true, r
	for range c.joined + 1 {
		m.answers[c.id] = append(m.answers[c.id], answered{payload: c.payload, res: r})
	}
	m.logf("call %d (%s) answered %v", c.n, c.id, r)
}

// current reports whether x is about the live attempt of a live call.
func (m *model) current(x msg) (*call, bool) {
	c := m.calls[x.call]
	return c, !c.done && c.attempt == x.attempt
}

// --- delivery ---

// deliverable lists the pool indexes that may be delivered next: every
// message, except that a stream's events to the GTR keep their order. A
// cancellation and a Proceed of one stream are not ordered (grpc-go's
// server Recv selects at random between a buffered message and a done
// context); the GTR never cancels a stream it sent Proceed on, unless
// CancelAfterProceed.
func (m *model) deliverable() []int {
	var out []int
	seen := map[attemptKey]bool{}
	for i, x := range m.pool {
		if x.stream() {
			if seen[x.key()] {
				continue
			}
			seen[x.key()] = true
		}
		if x.held || m.stalled[x.cell] && x.network() {
			continue // held in a stalled connection's buffers
		}
		if m.cut && m.across(x) {
			m.cover(covSitesCut)
			continue // held at the cut line (sites.go)
		}
		out = append(out, i)
	}
	return out
}

func (m *model) deliver(i int) {
	x := m.pool[i]
	m.pool = slices.Delete(m.pool, i, i+1)
	m.logf("deliver %v", x)
	cl := m.cells[x.cell]
	switch x.kind {
	case mProcess:
		if !cl.up {
			if c, ok := m.current(x); ok {
				m.broken(c, "cell down")
			}
			return
		}
		m.process(x)
	case mCancel:
		m.cancelled[x.key()] = true
		if _, ok := cl.awaiting[x.key()]; ok && cl.up {
			m.refused(cl.runs[x.key()])
		}
	case mProceed:
		if _, ok := cl.awaiting[x.key()]; ok && cl.up && cl.epoch == x.epoch {
			delete(cl.awaiting, x.key())
			m.takeProceed(x)
			m.resume(cl.runs[x.key()], cellside.PNRConfirmed{})
		} else {
			m.cover(covLateProceed)
			m.logf("cell %d: Proceed for %s (call %d attempt %d) found no attempt waiting for it", x.cell, x.id, x.call, x.attempt)
		}
	case mMarkSend, mWait, mIssuerResp, mCommit, mMarkSendLost:
		r, ok := m.runOf(x)
		if !ok || cl.epoch != x.epoch {
			return // in the memory of a process that is gone
		}
		switch x.kind {
		case mMarkSend:
			m.markSending(r, false)
		case mMarkSendLost:
			m.markSending(r, true)
		case mWait:
			m.waited(r)
		case mCommit:
			m.committed(r)
		default:
			if _, ok := cl.issuerWait[x.key()]; ok {
				delete(cl.issuerWait, x.key())
				if x.res.status == "CLOSED" {
					// FAILED_PRECONDITION: not applied; to the cell, an
					// error, so an unknown outcome, resolved by inquiry.
					m.resume(r, cellside.IssuerUnknown{Err: errors.New("closed by an inquiry")})
					return
				}
				m.issuerAnswered(r, x.res)
			}
		}
	case mIssuerReq:
		r := m.authorize(x.cell, x.key(), x.id, x.payload)
		m.send(msg{kind: mIssuerResp, call: x.call, attempt: x.attempt, cell: x.cell, epoch: x.epoch, id: x.id, res: r})
	case mPNR:
		m.onPNR(x)
	case mResult:
		if c, ok := m.current(x); ok {
			if !x.res.isError() && x.recPayload != c.payload {
				m.violate("same ID, other payload, ALREADY_EXISTS: cell %d answered %s payload %d from a record of payload %d",
					x.cell, c.id, c.payload, x.recPayload)
			}
			m.onResult(c, x)
		}
	case mProceeding:
		if c, ok := m.current(x); ok {
			m.gtrStep(c, gtrside.Proceeding{})
		}
	case mReroutable:
		if c, ok := m.current(x); ok {
			ev := gtrside.Reroutable{Now: c.now, Reason: "cell said re-routable"}
			if x.redirect {
				ev.Owner = cellName(x.owner)
			}
			m.gtrStep(c, ev)
		}
	case mDirUpdate:
		m.applyUpdate(x)
	case mFollowUp:
		m.fuDeliver(x)
	case mFollowUpResp:
		m.fuResponse(x)
	case mFuHold, mFuHoldLost, mAdjustResp, mFuSettle, mFuSettleLost:
		m.fuInMemory(x)
	case mAdjustReq:
		m.send(msg{kind: mAdjustResp, run: x.run, cell: x.cell, epoch: x.epoch, id: x.id, fu: x.fu, res: m.adjust(x)})
	case mFuDirUpdate:
		m.fuApplyUpdate(x)
	}
}

// --- cell ---

func (m *model) reply(x msg, kind msgKind, r result, recPayload payload) {
	m.send(msg{kind: kind, call: x.call, attempt: x.attempt, cell: x.cell, id: x.id, res: r, recPayload: recPayload})
}

func (m *model) callIssuer(i int, k attemptKey, id string, p payload) {
	if !m.taken[k] {
		m.violate("no issuer call without Proceed: cell %d called the issuer for %s (call %d attempt %d) unconfirmed", i, id, k.call, k.attempt)
	}
	if e := m.dir[id]; !m.rules.NoDirectory && (e == nil || e.owner != i || e.by != k || e.state != entryOwned) {
		m.violate("the issuer is called by the owner only: cell %d called the issuer for %s (call %d attempt %d), entry %+v", i, id, k.call, k.attempt, e)
	}
	m.cells[i].issuerWait[k] = id
	m.send(msg{kind: mIssuerReq, call: k.call, attempt: k.attempt, cell: i, epoch: m.cells[i].epoch, id: id, payload: p})
}

func settle(rec *record, r result) {
	switch r.status {
	case "APPROVED":
		rec.state, rec.auth = approved, r.auth
	case "DECLINED":
		rec.state, rec.reason = declined, r.reason
	default:
		rec.state, rec.reason = failed, r.reason
	}
}

// issuerTimeout: the cell stops waiting for the issuer (IssuerTimeout):
// IssuerUnknown. The request or response stays where it is.
func (m *model) issuerTimeout(i int, k attemptKey) {
	cl := m.cells[i]
	id := cl.issuerWait[k]
	delete(cl.issuerWait, k)
	m.cover(covIssuerTimeout)
	m.logf("cell %d: issuer timeout for %s", i, id)
	m.resume(cl.runs[k], cellside.IssuerUnknown{Err: errors.New("issuer timeout")})
}

// lose drops an issuer request or response, or a directory update, in the
// network.
func (m *model) lose(i int) {
	m.logf("lost %v", m.pool[i])
	m.pool = slices.Delete(m.pool, i, i+1)
}

func (m *model) crash(i int) {
	cl := m.cells[i]
	if len(cl.awaiting)+len(cl.issuerWait) > 0 {
		m.cover(covCrashPastSending)
	}
	for _, r := range cl.fuRuns {
		if r.held != nil {
			m.cover(covFuHeldCrash) // held, the issuer's answer or its settle not yet in
		}
	}
	cl.up = false
	cl.epoch++
	cl.forget()
	// Whatever the cell had not yet put on the wire to the GTR is gone.
	m.pool = slices.DeleteFunc(m.pool, func(x msg) bool { return x.stream() && x.cell == i })
	m.logf("crash cell %d", i)
	for _, c := range m.calls {
		if !c.done && c.cell == i && !m.processPending(c) {
			m.broken(c, fmt.Sprintf("cell %d crashed", i))
		}
	}
	m.fuCrashed(i)
}

// processPending reports whether c's current attempt has not reached its
// cell yet (its stream does not exist, so nothing breaks).
func (m *model) processPending(c *call) bool {
	return slices.ContainsFunc(m.pool, func(x msg) bool {
		return x.kind == mProcess && x.key() == c.key()
	})
}

// restart is cell i's process starting again: its leftovers before the
// PNR abandoned (AbandonUnsent), and, in a cell whose store lost commits
// since its last recovery, the recovery from the issuer's record before
// it serves (the cell's -recover-at-start, which the site-loss procedure
// starts a promoted copy with; cell.recoverFirst): a reconciler's round
// first (reconcileRound: the records held sending get the issuer's
// outcome, or are closed at the issuer; those deciding are settled), then
// the check (loss.go's recoverCell). A check that fails stops the start:
// the cell stays down, and the next restart (a restart step, or heal's)
// tries both again, as recoverFirst does every 2 s until it gives up.
func (m *model) restart(i int) {
	cl := m.cells[i]
	for _, rec := range cl.db {
		if rec.state == received {
			rec.state = abandoned // AbandonUnsent: never resume work before the PNR
		}
	}
	if m.lost[i] {
		m.reconcileRound(i)
		if !m.recoverCell(i) {
			m.logf("cell %d: start stopped: the recovery before serving failed", i)
			return
		}
	}
	cl.up = true
	m.logf("restart cell %d", i)
}

// forget drops what lives in the cell's process memory.
func (cl *cell) forget() {
	cl.awaiting = map[attemptKey]string{}
	cl.issuerWait = map[attemptKey]string{}
	cl.runs = map[attemptKey]*run{}
	cl.persisting = map[attemptKey]cellside.Persist{}
	cl.committing = map[attemptKey]cellside.Action{}
	cl.fuRuns = map[int]*fuRun{}
	cl.fuWait = map[int]string{}
}

// reconcile is one reconciler round in cell i: for each sending record not
// busy, an inquiry. Found: the issuer's outcome. Not found: the inquiry
// closes the ID at the issuer (no later request of it is applied, however
// late it arrives), and the record is FAILED issuer_not_reached. The
// code's NotFoundAfter (20 s before the closing inquiry) is a courtesy to
// a send still on its way, not what safety rests on, so the model closes
// at any round: a request in flight then finds the ID closed. Never a
// resend.
func (m *model) reconcile(i int) {
	if m.cells[i].up {
		m.reconcileRound(i)
	}
}

// reconcileRound is reconcile's round, which the cell's start runs too
// before it serves, after a loss (restart).
func (m *model) reconcileRound(i int) {
	cl := m.cells[i]
	for _, id := range slices.Sorted(maps.Keys(cl.db)) {
		rec := cl.db[id]
		if rec.state == deciding && !m.busy(i, id) {
			m.settleDeciding(i, id, rec)
			continue
		}
		if rec.state != sending || m.busy(i, id) {
			continue
		}
		if r, ok := m.outcome[id]; ok {
			if m.takenOver(i, id, rec) {
				// The issuer's effect is the other cell's attempt's.
				m.logf("reconcile cell %d: %s -> %s (entry taken over)", i, id, rec.state)
				continue
			}
			settle(rec, r)
			if rec.state != failed {
				m.finalizeLater(i, id, rec.payload, rec.result())
			}
		} else if m.rules.ReconcilerResends {
			m.callIssuerDirect(i, id, rec.payload)
			settle(rec, m.outcome[id])
		} else {
			if m.mayReachIssuer(rec.attempt.call) {
				m.cover(covCloseInFlight)
			}
			m.notReached(i, id, rec)
		}
		m.logf("reconcile cell %d: %s -> %s", i, id, rec.state)
	}
	m.fuReconcile(i)
}

// takenOver is the reconciler's rule for an outcome the issuer has: with
// the directory, an entry another cell holds was taken over (from an
// attempt that never had Proceed), so the outcome is that cell's effect,
// and this record is abandoned instead of adopting it
// (reconcile.resolve). A missing entry is written by the real Finalize;
// here the owner's later finalize does it.
func (m *model) takenOver(i int, id string, rec *record) bool {
	if m.rules.NoDirectory || m.rules.ReconcilerNoClaim {
		return false
	}
	if e := m.payKeyEntry(id); !e.found || e.owner == i {
		return false
	}
	if m.taken[rec.attempt] {
		m.violate("the reconciler abandons only an unconfirmed record: cell %d abandoned %s (call %d attempt %d) after Proceed",
			i, id, rec.attempt.call, rec.attempt.attempt)
	}
	rec.state = abandoned
	return true
}

// notReached is the reconciler's FAILED issuer_not_reached, the ID
// closed at the issuer first. With the directory it is written to the entry first, synchronously, and only if
// the entry is this cell's; an entry another cell holds was taken over,
// which the claim allows only from an attempt that never had Proceed, so
// nothing of this record reached the issuer: it is abandoned instead.
func (m *model) notReached(i int, id string, rec *record) {
	fail := result{status: "FAILED", reason: reasonNotReached}
	if k := m.payKeyEntry(id); !m.rules.NoDirectory && !m.rules.ReconcilerNoClaim {
		e := m.dir[id]
		switch {
		case !k.found || k.owner != i:
			if m.taken[rec.attempt] {
				m.violate("the reconciler abandons only an unconfirmed record: cell %d abandoned %s (call %d attempt %d) after Proceed",
					i, id, rec.attempt.call, rec.attempt.attempt)
			}
			rec.state = abandoned
			return
		case e != nil && e.state == entryFinal && m.everLost[i]:
			// The store lost the record's FAILED (loss.go) but not its
			// entry's: the inquiry finds the ID closed, Finalize writes
			// nothing ("written before"), and the record takes FAILED, as
			// reconcile.resolve does.
		case e != nil && e.state == entryFinal:
			m.violate("a final entry has a final owner record: cell %d reconciles %s, sending, entry %+v", i, id, *e)
			return
		case e == nil && k.state == entryFinal:
			// This cell's follow-up's final entry holds the key: Finalize
			// writes nothing ("written before").
		default:
			if e == nil {
				e = m.payOver(id, i, rec.payload) // this cell's follow-up's entry, not final
			}
			e.rev++
			e.by, e.state, e.res, e.pinned = noAttempt, entryFinal, fail, false
			m.logf("directory: %s final (%v), rev %d", id, fail, e.rev)
		}
	}
	// The inquiry that closes the ID comes once the entry is known to be
	// this cell's (reconcile.resolve reads it first): the close and the
	// entry's FAILED are one decision of the owner's.
	if !m.rules.ReconcilerNoClose {
		m.closed[id] = true
		m.logf("issuer: %s closed by cell %d's inquiry", id, i)
	}
	rec.state, rec.reason = failed, reasonNotReached
}

// mayReachIssuer reports whether an attempt of GTR call n can still reach
// the issuer: the call is live (a later attempt may yet be confirmed), or
// a Proceed or an issuer request of one of its attempts is in flight.
func (m *model) mayReachIssuer(n int) bool {
	if n >= 0 && !m.calls[n].done {
		return true
	}
	return slices.ContainsFunc(m.pool, func(x msg) bool {
		return (x.kind == mProceed || x.kind == mIssuerReq) && x.call == n
	})
}

// callIssuerDirect is a resend from outside any attempt.
func (m *model) callIssuerDirect(i int, id string, p payload) {
	m.violate("no issuer call without Proceed: the reconciler of cell %d resent %s", i, id)
	m.authorize(i, noAttempt, id, p)
}

// --- issuer ---

// authorize is the issuer applying a request of attempt k (noAttempt: a
// resend) that cell sent (its terminal_id).
func (m *model) authorize(cell int, k attemptKey, id string, p payload) result {
	m.requests[id]++
	if r, ok := m.outcome[id]; ok && !m.rules.IssuerNoDedupe {
		return r
	}
	if m.closed[id] {
		m.cover(covClosedRefused)
		return result{status: "CLOSED"}
	}
	m.effects[id]++
	for i, cl := range m.cells {
		rec := cl.db[id]
		if rec == nil || !rec.pastPNR() || !rec.result().notReached() {
			continue
		}
		if k != noAttempt && k.call == rec.attempt.call {
			m.violate("FAILED issuer_not_reached is final: the issuer applied %s (call %d attempt %d) after cell %d recorded it not reached for the same call",
				id, k.call, k.attempt, i)
		} else {
			m.violate("FAILED issuer_not_reached is final: the issuer applied %s (call %d) after cell %d recorded it not reached for call %d",
				id, k.call, i, rec.attempt.call)
		}
	}
	r := result{status: "APPROVED", auth: "A-" + id}
	if p%3 == 1 {
		r = result{status: "DECLINED", reason: "do_not_honor"}
	}
	m.journalAuthorize(cell, id, p, r)
	if _, ok := m.outcome[id]; !ok {
		m.outcome[id] = r
		if r.status == "APPROVED" {
			// The authorization's ledger at the issuer, which its
			// adjustments are held to (issuersim's authorizations.add).
			m.auths[id] = &followup.Ledger{Authorized: amountOf(p)}
		}
	}
	return r
}

// --- invariants ---

// check returns the first invariant broken so far, if any. It looks in
// the maps' own order first, which costs no sorting, and only once it
// finds a break looks again in sorted order, so that the break it reports
// is the same on every run of the seed.
func (m *model) check() error {
	if len(m.violations) > 0 {
		return errors.New(m.violations[0])
	}
	if m.checkIn(false) == nil {
		return nil
	}
	return m.checkIn(true)
}

// checkIn is check's look, the maps' keys in sorted order or not.
func (m *model) checkIn(sorted bool) error {
	err := each(sorted, m.effects, func(id string, n int) error {
		if n > 1 {
			return fmt.Errorf("at most one issuer effect per ID: %s has %d", id, n)
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = each(sorted, m.answers, func(id string, as []answered) error {
		first := -1
		for i := range as {
			a := &as[i]
			if a.res.isError() {
				continue
			}
			if first < 0 {
				first = i
				continue
			}
			if f := as[first]; a.payload != f.payload {
				return fmt.Errorf("same ID, other payload, ALREADY_EXISTS: %s answered %v for payload %d and %v for payload %d",
					id, f.res, f.payload, a.res, a.payload)
			} else if f.res.final() && a.res.final() && a.res != f.res {
				return fmt.Errorf("same ID and payload, same answer: %s answered %v and %v", id, f.res, a.res)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := m.fuCheck(sorted); err != nil {
		return err
	}
	if err := m.reuseCheck(sorted); err != nil {
		return err
	}
	return m.effectsHeld(false)
}

// each calls f with every key of mp and its value, in sorted order or in
// the map's own, until f returns an error, which it returns.
func each[V any](sorted bool, mp map[string]V, f func(string, V) error) error {
	if !sorted {
		for k, v := range mp {
			if err := f(k, v); err != nil {
				return err
			}
		}
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(mp)) {
		if err := f(k, mp[k]); err != nil {
			return err
		}
	}
	return nil
}

// heal ends every fault: cells restart, every message is delivered in
// order, waits on the issuer time out, reconcilers run, and the GTR's
// calls all end; then every cell that lost commits recovers what the
// issuer applied for it (loss.go), once nothing more can reach the issuer.
func (m *model) heal() {
	m.healFaults()
	m.recoverLost()
}

// healFaults is heal but for the recovery.
func (m *model) healFaults() {
	m.stalled = [numCells]bool{}
	m.slow = [numCells][]bool{}
	m.cut = false
	m.release()
	for i, cl := range m.cells {
		if !cl.up {
			m.restart(i)
		}
	}
	for round := 0; round < 20; round++ {
		for len(m.pool) > 0 {
			m.deliver(0) // deliverable()[0]: nothing is held or stalled any more
		}
		for i, cl := range m.cells {
			for _, k := range slices.SortedFunc(maps.Keys(cl.issuerWait), cmpKey) {
				m.issuerTimeout(i, k)
			}
			for _, k := range slices.SortedFunc(maps.Keys(cl.awaiting), cmpKey) {
				m.proceedTimeout(i, k)
			}
			for _, n := range slices.Sorted(maps.Keys(cl.fuWait)) {
				m.fuIssuerTimeout(i, n)
			}
		}
		for i, cl := range m.cells {
			if !cl.up {
				m.restart(i) // a start its recovery stopped, tried again
			}
			m.reconcile(i)
		}
		if len(m.pool) == 0 {
			return
		}
	}
}

func cmpKey(a, b attemptKey) int {
	if a.call != b.call {
		return a.call - b.call
	}
	return a.attempt - b.attempt
}

// checkHealed checks what must hold once faults heal: every call
// answered, every transaction past its PNR final in every cell that holds
// it, for one payload per ID, those cells agreeing, the directory's final
// answers agreeing with them, and every answer equal to the record (a
// PENDING answer having resolved).
func (m *model) checkHealed() error {
	if err := m.check(); err != nil {
		return err
	}
	for i, cl := range m.cells {
		if !cl.up {
			return fmt.Errorf("every cell serves once healed: cell %d's start is stopped by its recovery (loss.go)", i)
		}
	}
	for _, c := range m.calls {
		if !c.done {
			return fmt.Errorf("call %d (%s) never answered", c.n, c.id)
		}
	}
	for i, cl := range m.cells {
		if len(cl.awaiting) > 0 {
			return fmt.Errorf("cell %d still waits for Proceed: %v", i, cl.awaiting)
		}
		for _, id := range slices.Sorted(maps.Keys(cl.db)) {
			if cl.db[id].state == deciding {
				return fmt.Errorf("every decision settled: %s is deciding in cell %d", id, i)
			}
		}
	}
	seen := maps.Clone(m.dir)
	for _, cl := range m.cells {
		for id := range cl.db {
			seen[id] = nil
		}
	}
	records := map[string]*result{}
	for _, id := range slices.Sorted(maps.Keys(seen)) {
		rec, err := m.agreedRecord(id)
		if err != nil {
			return err
		}
		records[id] = rec
		if e := m.dir[id]; e != nil && e.state == entryFinal && (rec == nil && !m.lostUnseen(e.owner, id) || rec != nil && e.res != *rec) {
			return fmt.Errorf("the directory agrees with the records: %s is %v in the directory, records %v", id, e.res, rec)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(m.answers)) {
		for _, a := range m.answers[id] {
			if a.res.isError() {
				continue
			}
			switch rec := records[id]; {
			case rec == nil && a.res.status != "APPROVED" && m.lostUnseenAnywhere(id):
				// A decision the issuer never saw, lost with its record.
			case rec == nil:
				return fmt.Errorf("lost: %s answered %v, no record past its PNR", id, a.res)
			case a.res.final() && a.res != *rec:
				return fmt.Errorf("answer equals record: %s answered %v, record %v", id, a.res, *rec)
			}
		}
	}
	return m.fuCheckHealed()
}

// agreedRecord is the outcome of id's records past their PNR, which must
// all be of one payload, final, and agree; nil when there are none.
func (m *model) agreedRecord(id string) (*result, error) {
	var rec *result
	at := -1
	for i := range m.cells {
		r, ok := m.cells[i].db[id]
		if !ok || !r.pastPNR() {
			continue
		}
		res := r.result()
		if !res.final() {
			return nil, fmt.Errorf("every accepted transaction is final: %s is %s in cell %d", id, r.state, i)
		}
		if at >= 0 && m.cells[at].db[id].payload != r.payload {
			return nil, fmt.Errorf("same ID, other payload, ALREADY_EXISTS: %s recorded %v for payload %d in cell %d and %v for payload %d in cell %d",
				id, *rec, m.cells[at].db[id].payload, at, res, r.payload, i)
		}
		if rec != nil && *rec != res {
			return nil, fmt.Errorf("records agree: %s is %v in cell %d and %v in cell %d", id, *rec, at, res, i)
		}
		rec, at = &res, i
	}
	return rec, nil
}

// takeProceed is a cell receiving Proceed for x's attempt: from here it may call
// the issuer, and it says Proceeding on the stream first.
func (m *model) takeProceed(x msg) {
	k := x.key()
	for t := range m.taken {
		if t.call == k.call && t != k {
			m.violate("one Proceed taken per call: call %d (%s) attempts %d and %d both took Proceed", k.call, x.id, t.attempt, k.attempt)
		}
	}
	m.taken[k] = true
	m.logf("cell %d: %s confirmed, calling the issuer", x.cell, x.id)
	m.send(msg{kind: mProceeding, call: x.call, attempt: x.attempt, cell: x.cell, id: x.id})
}

// proceedTimeout is a cell that stops waiting for Proceed (the server's
// ProceedTimeout): it steps back, and says re-routable, whether or not a
// Proceed is on its way.
func (m *model) proceedTimeout(i int, k attemptKey) {
	cl := m.cells[i]
	if m.proceeded[k] {
		m.cover(covProceedInFlight)
	}
	m.logf("cell %d: no Proceed in time for %s (call %d attempt %d)", i, cl.awaiting[k], k.call, k.attempt)
	m.refused(cl.runs[k])
}

// settleDeciding is the reconciler's settle (reconcile.settle) of a
// record left deciding: the entry's answer if this cell's entry holds one;
// else the decision, written to the entry first, while the entry is this
// cell's (or missing); abandoned if another cell holds the entry.
func (m *model) settleDeciding(i int, id string, rec *record) {
	m.cover(covDecidingSettled)
	decision := result{status: "DECLINED", reason: rec.reason}
	e, k := m.dir[id], m.payKeyEntry(id)
	switch {
	case k.found && k.owner == i && k.state == entryFinal:
		settle(rec, k.res)
	case !k.found || k.owner == i:
		switch {
		case e == nil && k.found:
			e = m.payOver(id, i, rec.payload) // this cell's follow-up's entry, not final
		case e == nil:
			e = &entry{owner: i, payload: rec.payload}
			m.dir[id] = e
		}
		e.rev++
		e.by, e.state, e.res, e.pinned = noAttempt, entryFinal, decision, false
		settle(rec, decision)
		m.logf("directory: %s final (%v) by cell %d's reconciler, rev %d", id, decision, i, e.rev)
	default:
		rec.state, rec.reason = abandoned, ""
	}
	m.logf("reconcile cell %d: %s deciding -> %s", i, id, rec.state)
}
