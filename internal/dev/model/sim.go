package model

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// The simulator: the model's world (the real cellside and gtrside
// machines, their drivers, the directory, the stores, the reconciler and
// the issuer) run on one seed. Each seed first draws its own fault mix
// (swarm testing: every kind of step gets a weight, and some get none, so
// that a seed explores a corner a uniform mix would dilute), prints it,
// runs a safety phase of steps drawn from that mix with every invariant
// checked after each step, then a liveness phase: every fault heals
// (cells restart, stalls end, every message is delivered, every wait times
// out, the reconcilers run) and the run must converge (every call
// answered, every transaction past its PNR final and agreeing, every
// answer equal to its record). A run is a function of its seed: the same
// seed gives the same trace.

// ids is small on purpose: duplicates, replays and conflicts need IDs to
// meet.
var ids = []string{"t0", "t1", "t2"}

// authIDs are the authorizations approved in a run's calm start, before
// its faults (calmStart): the safety phase's payments are rarely approved
// (most of them meet a fault on their way), and follow-ups need approved
// authorizations to act on from the start.
var authIDs = []string{"a0", "a1", "a2"}

// chooser makes a step's choices: the seed's *rand.Rand in the simulator,
// rapid's draws in the property test (rapid_test.go), so that both drive
// the same steps.
type chooser interface {
	// IntN returns a choice in [0, n), n > 0.
	IntN(n int) int
	// Int64N returns a choice in [0, n), n > 0.
	Int64N(n int64) int64
}

// calmStart approves the partner's authorizations authIDs, one after the
// other, every message delivered in order and no fault: each at a replica
// of the seed's choice, for an amount of its choice, and now and then
// while a replica drains its natural home, so that it is recorded on the
// next cell of its ranking (a follow-up to the home is then sent on to
// the owner the directory names).
func (m *model) calmStart(r chooser) {
	for _, id := range authIDs {
		drained := -1
		if r.IntN(3) == 0 {
			drained = ranking(id)[0]
		}
		m.submitDrained(r.IntN(numReplicas), id, payload(3*r.IntN(2)), drained)
		for len(m.pool) > 0 {
			m.deliver(0) // deliverable()[0]: nothing is held or stalled yet
		}
	}
	m.calm = len(m.calls)
	m.logf("calm start over: faults from here")
}

// live lists the calls in flight that pass ok, in call order.
func (m *model) live(ok func(*call) bool) []*call {
	var out []*call
	for _, c := range m.calls {
		if !c.done && ok(c) {
			out = append(out, c)
		}
	}
	return out
}

// stepKind is one kind of step of the safety phase.
type stepKind int

const (
	stSubmit         stepKind = iota // a partner's call at a GTR replica
	stSubmitDrained                  // a call while the replica drains a cell (health views differ)
	stDuplicate                      // the same ID and payload again, at either access point
	stOtherPayload                   // the same ID with another payload
	stDeliver                        // a message in flight delivered (any order: delay, reordering)
	stDuplicateMsg                   // an issuer message or directory update duplicated in the network
	stLose                           // an issuer message or directory update lost
	stStall                          // a cell's connections stall: nothing crosses them
	stUnstall                        // a stalled cell's connections deliver again, everything late
	stHold                           // an issuer request stuck in a send buffer (its deadline still whole)
	stRelease                        // the requests stuck in send buffers are delivered
	stCrash                          // a cell's process crashes (durable state kept)
	stCrashBusy                      // a crash in the middle of a live attempt
	stRestart                        // a crashed cell restarts
	stCrashGTR                       // a GTR replica crashes and restarts: its calls and memory lost
	stIssuerTimeout                  // a cell stops waiting for the issuer
	stProceedTimeout                 // a cell stops waiting for the GTR's Proceed
	stAttemptTimeout                 // the GTR's attempt timer fires
	stDeadline                       // a caller's deadline passes
	stReconcile                      // a cell's reconciler runs a round
	stCapture                        // a partner's capture of an authorization (followup.go)
	stVoid                           // a partner's void of an authorization
	stRefund                         // a partner's refund of an authorization
	stFollowUpAgain                  // a follow-up ID used again: a retry, or another payload
	// The kinds from here on draw from the seed's second stream (drawMix).
	stReusePaymentID  // a follow-up under a payment's ID (reuse.go)
	stReuseFollowUpID // a payment under a follow-up's ID
	// The kinds from here on draw from the seed's third stream.
	stLoseCommits // a cell's store loses its last commits (loss.go)
	stRecover     // a cell that lost commits recovers from the issuer's record
	// The kinds from here on draw from the seed's fourth stream.
	stSlowClaim // a cell's next claim outlasts its bound, written or not (slowclaim.go)
	// The kinds from here on draw from the seed's fifth stream.
	stCutSites  // the line between the two sites cut (sites.go)
	stMendSites // the line back
	numStepKinds
)

// laterKinds is the first step kind drawn from the seed's second stream:
// the kinds added once seeds had been kept (testdata/sim). A seed whose
// mix leaves them off runs as it did before they existed, and one whose
// mix has them on as it did until the first of them acts. lossKinds is
// the first drawn from its third, in the same way, so that the kept seeds
// whose mixes leave them off run as they did before them, whatever their
// reuse steps.
const (
	laterKinds = stReusePaymentID
	lossKinds  = stLoseCommits
	dirKinds   = stSlowClaim
	sitesKinds = stCutSites
)

var stepNames = [numStepKinds]string{"submit", "submit-drained", "duplicate", "other-payload", "deliver", "duplicate-message",
	"lose", "stall", "unstall", "hold-issuer-request", "release", "crash", "crash-busy", "restart", "crash-gtr", "issuer-timeout", "proceed-timeout", "attempt-timeout",
	"deadline", "reconcile", "capture", "void", "refund", "follow-up-again", "reuse-payment-id", "reuse-follow-up-id",
	"lose-commits", "recover", "slow-claim", "cut-sites", "mend-sites"}

// cov is an interesting state a run may reach.
type cov int

const (
	covReroute            cov = iota // a re-route before the PNR
	covRerouteLateProceed            // a re-route after a Proceed the cell never took
	covRedirect                      // a re-route to the owner the directory names
	covTakeover                      // a directory entry taken over by another cell
	covProceedInFlight               // a cell stopped waiting with the GTR's Proceed on its way
	covLateProceed                   // a Proceed reached a cell no longer waiting for it
	covUnknown                       // a stream ended between Proceed and Proceeding
	covCrashPastSending              // a crash with an attempt between sending and the issuer's answer
	covIssuerTimeout                 // an issuer answer given up on: PENDING
	covCloseInFlight                 // an inquiry closed an ID with a request of its call still able to arrive
	covClosedRefused                 // the issuer refused a late request of a closed ID
	covDuplicateWait                 // a duplicate waited on a concurrent attempt in the cell
	covLostCommit                    // a sending write committed with its answer lost
	covCoalesced                     // a duplicate coalesced at a replica
	covPendingResolved               // a PENDING answer resolved after healing
	covDecidingSettled               // a decision left deciding (a crash) settled by the reconciler
	covFuHeldCrash                   // a follow-up held, its cell crashed before its outcome was recorded
	covFuHoldLost                    // a follow-up's hold committed with its answer lost
	covFuReconciled                  // a follow-up resolved by the reconciler
	covFuOverLimit                   // a follow-up over its authorization's limits refused
	covFuReplayed                    // a follow-up ID answered from its record
	covFuRedirect                    // a follow-up sent on to the cell the directory names
	covFuFanOut                      // a follow-up's original found by a fan-out
	covFuCloseInFlight               // an inquiry closed a follow-up with its Adjust in flight
	covFuClosedRefused               // the issuer refused a late Adjust (closed ID)
	covFuRefunded                    // a refund approved (of a capture approved before it)
	covReuseFollowUp                 // a follow-up under a payment's ID refused ALREADY_EXISTS (reuse.go)
	covReusePayment                  // a payment under a follow-up's ID refused ALREADY_EXISTS
	covLostCommits                   // a cell's store lost its last commits (loss.go)
	covRecovered                     // an effect the cell lost recorded from the issuer's record
	covSlowClaim                     // a claim outlasted its bound (slowclaim.go)
	covSlowClaimWritten              // a claim outlasted its bound, its entry written
	covSitesCut                      // a message held at the line cut between the sites (sites.go)
	numCov
)

var covNames = [numCov]string{"re-route before the PNR", "re-route after a Proceed never taken", "redirect to the owner",
	"directory takeover", "step back with a Proceed in flight", "late Proceed", "stream ended before Proceeding",
	"crash between sending and the issuer's answer", "issuer timeout (PENDING)", "inquiry closed an ID with a send in flight",
	"late request refused (closed ID)", "duplicate waited in the cell", "sending committed, answer lost",
	"duplicate coalesced at a replica", "PENDING resolved", "decision settled by the reconciler",
	"follow-up held, then its cell crashed", "follow-up held, the commit's answer lost", "follow-up resolved by the reconciler",
	"follow-up over the limits refused", "duplicate follow-up replayed", "follow-up sent on to the original's owner",
	"follow-up's original found by a fan-out", "inquiry closed a follow-up with its Adjust in flight",
	"late Adjust refused (closed ID)", "refund approved", "follow-up under a payment's ID refused",
	"payment under a follow-up's ID refused", "a store lost its last commits", "a lost effect recovered from the issuer's record",
	"a claim outlasted its bound", "a claim outlasted its bound, written", "a message held at the cut between the sites"}

func (m *model) cover(c cov) { m.covered[c]++ }

// Mix is one seed's fault mix: each step kind's weight (0: never), and the
// length of the safety phase.
type Mix struct {
	Weights [numStepKinds]int
	Steps   int
	// GroupCommit and AsyncInsert: the cell's store commits its writes
	// in shared batches (as the cells run by default), the insert too
	// (Rules.GroupCommit, Rules.AsyncInsert): every write's commit is a
	// step of its own, which a crash may come before.
	GroupCommit, AsyncInsert bool
}

// String lists the step kinds with their weights, those drawn at 0 last.
func (x Mix) String() string {
	var on, off []string
	for k, w := range x.Weights {
		if w == 0 {
			off = append(off, stepNames[k])
		} else {
			on = append(on, fmt.Sprintf("%s=%d", stepNames[k], w))
		}
	}
	s := fmt.Sprintf("steps=%d group-commit=%v async-insert=%v %s", x.Steps, x.GroupCommit, x.AsyncInsert, strings.Join(on, " "))
	if len(off) > 0 {
		s += " (off: " + strings.Join(off, " ") + ")"
	}
	return s
}

// drawMix draws a seed's fault mix: the kinds before laterKinds, its
// length and its store from r, the seed's first stream; the later kinds
// from later, its second, and the loss kinds from loss, its third
// (runSeed). Delivery and submission are always on (a run must get past
// the handshake and have work); every other kind is on with probability
// 2/3, at a weight of 1 to 4, but the loss of a store's last commits, on
// with probability 1/3 at a weight of 1 or 2 (each is a crash and a
// rollback), and its recovery step, on with probability 2/3 when the loss
// is (otherwise the recovery comes only once healed). The directory's
// faults come from dir, its fourth: a slow claim on with probability 1/3,
// at a weight of 1 to 3; the sites' from sites, its fifth: the cut
// between them and its mending on with probability 1/3, at 1 or 2 and 1
// to 3.
func drawMix(r, later, loss, dir, sites *rand.Rand) Mix {
	var x Mix
	for k := range laterKinds {
		switch k {
		case stDeliver:
			x.Weights[k] = 12 + r.IntN(12)
		case stSubmit:
			x.Weights[k] = 2 + r.IntN(3)
		default:
			if r.IntN(3) > 0 {
				x.Weights[k] = 1 + r.IntN(4)
			}
		}
	}
	x.Steps = 80 + r.IntN(240)
	x.GroupCommit = r.IntN(2) == 0
	x.AsyncInsert = x.GroupCommit && r.IntN(2) == 0
	for k := laterKinds; k < lossKinds; k++ {
		if later.IntN(3) > 0 {
			x.Weights[k] = 1 + later.IntN(4)
		}
	}
	if loss.IntN(3) == 0 {
		x.Weights[stLoseCommits] = 1 + loss.IntN(2)
		if loss.IntN(3) > 0 {
			x.Weights[stRecover] = 1 + loss.IntN(4)
		}
	}
	if dir.IntN(3) == 0 {
		x.Weights[stSlowClaim] = 1 + dir.IntN(3)
	}
	if sites.IntN(3) == 0 {
		x.Weights[stCutSites] = 1 + sites.IntN(2)
		x.Weights[stMendSites] = 1 + sites.IntN(3)
	}
	return x
}

// pick draws a step kind from weights with r: kind first + i with
// probability weights[i] / total.
func pick(r chooser, weights []int, total int, first stepKind) stepKind {
	n := r.IntN(total)
	k := 0
	for ; n >= weights[k]; k++ {
		n -= weights[k]
	}
	return first + stepKind(k)
}

// Result is what one seed's run found.
type Result struct {
	Seed uint64
	Mix  Mix
	// Violation is the first invariant broken, "" when none was.
	Violation string
	Steps     int
	Covered   [numCov]int
	Trace     []string
}

// Run runs one seed with rules (the zero value: the protocol as built).
func Run(seed uint64, rules Rules) Result { return runSeed(seed, rules, false) }

// RunQuiet is Run without keeping a trace, unless the seed broke an
// invariant: then it is run again, with its trace. A sweep's run: the
// trace of a passing seed is dropped anyway, and formatting it is most of
// a run's time.
func RunQuiet(seed uint64, rules Rules) Result {
	if res := runSeed(seed, rules, true); res.Violation == "" {
		return res
	}
	return Run(seed, rules)
}

func runSeed(seed uint64, rules Rules, quiet bool) Result {
	r := rand.New(rand.NewPCG(seed, 0x63656c6c706179))   // "cellpay"
	later := rand.New(rand.NewPCG(seed, 0x6c6174657273)) // "laters"
	loss := rand.New(rand.NewPCG(seed, 0x6c6f73736573))  // "losses"
	dir := rand.New(rand.NewPCG(seed, 0x64697273))       // "dirs"
	sites := rand.New(rand.NewPCG(seed, 0x7369746573))   // "sites"
	mix := drawMix(r, later, loss, dir, sites)
	rules.GroupCommit = rules.GroupCommit || mix.GroupCommit
	rules.AsyncInsert = rules.AsyncInsert || mix.AsyncInsert
	m := newModel(rules)
	m.quiet = quiet
	m.track = mix.Weights[stLoseCommits] > 0
	m.logf("seed %d: %s", seed, mix)
	m.calmStart(r)
	m.snapshot()
	res := Result{Seed: seed, Mix: mix}
	total, laterTotal, lossTotal, dirTotal, sitesTotal := 0, 0, 0, 0, 0
	for k, w := range mix.Weights {
		switch {
		case stepKind(k) < laterKinds:
			total += w
		case stepKind(k) < lossKinds:
			laterTotal += w
		case stepKind(k) < dirKinds:
			lossTotal += w
		case stepKind(k) < sitesKinds:
			dirTotal += w
		default:
			sitesTotal += w
		}
	}
	for res.Steps < mix.Steps {
		// A sites' step, chosen and made with the fifth stream; a
		// directory fault's, with the fourth; a loss kind's, with the
		// third; a later kind's, with the second; or one of the others,
		// with the first, as before they existed.
		rr, k := r, stepKind(0)
		all := total + laterTotal + lossTotal + dirTotal
		switch {
		case sitesTotal > 0 && sites.IntN(all+sitesTotal) >= all:
			rr, k = sites, pick(sites, mix.Weights[sitesKinds:], sitesTotal, sitesKinds)
		case dirTotal > 0 && dir.IntN(total+laterTotal+lossTotal+dirTotal) >= total+laterTotal+lossTotal:
			rr, k = dir, pick(dir, mix.Weights[dirKinds:sitesKinds], dirTotal, dirKinds)
		case lossTotal > 0 && loss.IntN(total+laterTotal+lossTotal) >= total+laterTotal:
			rr, k = loss, pick(loss, mix.Weights[lossKinds:dirKinds], lossTotal, lossKinds)
		case laterTotal > 0 && later.IntN(total+laterTotal) >= total:
			rr, k = later, pick(later, mix.Weights[laterKinds:lossKinds], laterTotal, laterKinds)
		default:
			k = pick(r, mix.Weights[:laterKinds], total, 0)
		}
		if !m.step(rr, k) {
			continue // nothing to do for that kind now: draw again
		}
		m.snapshot()
		res.Steps++
		if err := m.check(); err != nil {
			return m.result(res, err.Error())
		}
	}
	pending := m.pendingAnswers()
	m.heal()
	m.logf("healed")
	if err := m.converged(); err != nil {
		return m.result(res, err.Error())
	}
	for _, id := range pending {
		if rec, err := m.agreedRecord(id); err == nil && rec != nil && rec.final() {
			m.cover(covPendingResolved)
		}
	}
	return m.result(res, "")
}

func (m *model) result(res Result, violation string) Result {
	res.Violation, res.Covered, res.Trace = violation, m.covered, m.log
	return res
}

// pendingAnswers lists the IDs answered PENDING so far, sorted.
func (m *model) pendingAnswers() []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(m.answers)) {
		if slices.ContainsFunc(m.answers[id], func(a answered) bool { return a.res.status == "PENDING" }) {
			out = append(out, id)
		}
	}
	return out
}

// step performs one step of kind k, choosing its target with r; false
// when the kind has nothing to act on now.
func (m *model) step(r chooser, k stepKind) bool {
	pickCell := func() int { return r.IntN(numCells) }
	switch k {
	case stSubmit:
		m.submit(r.IntN(numReplicas), ids[r.IntN(len(ids))], payload(r.IntN(6)))
	case stSubmitDrained:
		m.submitDrained(r.IntN(numReplicas), ids[r.IntN(len(ids))], payload(r.IntN(6)), pickCell())
	case stDuplicate, stOtherPayload:
		// Of the safety phase's calls (the calm start's are final).
		calls := m.calls[m.calm:]
		if len(calls) == 0 {
			return false
		}
		c := calls[r.IntN(len(calls))]
		p := c.payload
		if k == stOtherPayload {
			p = (p + 1 + payload(r.IntN(5))) % 6
		}
		m.submit(r.IntN(numReplicas), c.id, p)
	case stDeliver:
		d := m.deliverable()
		if len(d) == 0 {
			return false
		}
		m.deliver(d[r.IntN(len(d))])
	case stCapture:
		return m.newFollowUp(r, cellpayv1.PaymentType_CAPTURE)
	case stVoid:
		return m.newFollowUp(r, cellpayv1.PaymentType_VOID)
	case stRefund:
		return m.newFollowUp(r, cellpayv1.PaymentType_REFUND)
	case stFollowUpAgain:
		return m.dupFollowUp(r)
	case stReusePaymentID:
		return m.reuseByFollowUp(r)
	case stReuseFollowUpID:
		return m.reuseByPayment(r)
	case stLoseCommits:
		return m.loseCommits(r)
	case stRecover:
		return m.recoverStep(r)
	case stSlowClaim:
		return m.armSlowClaim(r)
	case stCutSites:
		return m.cutSites(true)
	case stMendSites:
		return m.cutSites(false)
	case stDuplicateMsg, stLose:
		var lossy, fu []int
		for i, x := range m.pool {
			switch x.kind {
			case mIssuerReq, mIssuerResp, mDirUpdate:
				lossy = append(lossy, i)
			case mAdjustReq, mAdjustResp, mFuDirUpdate:
				fu = append(fu, i)
			}
		}
		lossy = paymentsFirst(lossy, fu)
		if len(lossy) == 0 {
			return false
		}
		i := lossy[r.IntN(len(lossy))]
		if k == stLose {
			m.lose(i)
		} else {
			m.logf("duplicated %v", m.pool[i])
			m.send(m.pool[i])
		}
	case stHold:
		var reqs, adjusts []int
		for i, x := range m.pool {
			switch {
			case x.held:
			case x.kind == mIssuerReq:
				reqs = append(reqs, i)
			case x.kind == mAdjustReq:
				adjusts = append(adjusts, i)
			}
		}
		reqs = paymentsFirst(reqs, adjusts)
		if len(reqs) == 0 {
			return false
		}
		i := reqs[r.IntN(len(reqs))]
		x := &m.pool[i]
		x.held = true
		m.logf("held %v", *x)
		// Held long enough for its cell to stop waiting (IssuerTimeout).
		if cl := m.cells[x.cell]; cl.up && cl.epoch == x.epoch {
			if _, ok := cl.issuerWait[x.key()]; ok && x.kind == mIssuerReq {
				m.issuerTimeout(x.cell, x.key())
			}
			if _, ok := cl.fuWait[x.run]; ok && x.kind == mAdjustReq {
				m.fuIssuerTimeout(x.cell, x.run)
			}
		}
	case stRelease:
		if !m.release() {
			return false
		}
	case stStall, stUnstall:
		i := pickCell()
		if m.stalled[i] == (k == stStall) {
			return false
		}
		m.stalled[i] = k == stStall
		m.logf("cell %d: connections %s", i, map[bool]string{true: "stalled", false: "deliver again"}[m.stalled[i]])
	case stCrash:
		i := pickCell()
		if !m.cells[i].up {
			return false
		}
		m.crash(i)
	case stCrashBusy:
		var busy []int
		for _, c := range m.live(func(*call) bool { return true }) {
			if i := c.cell; m.cells[i].up && !m.processPending(c) && !slices.Contains(busy, i) {
				busy = append(busy, i)
			}
		}
		for i, cl := range m.cells {
			if cl.up && len(cl.fuRuns) > 0 && !slices.Contains(busy, i) {
				busy = append(busy, i) // a follow-up in progress
			}
		}
		if len(busy) == 0 {
			return false
		}
		m.crash(busy[r.IntN(len(busy))])
	case stCrashGTR:
		m.crashGTR(r.IntN(numReplicas))
	case stRestart:
		i := pickCell()
		if m.cells[i].up {
			return false
		}
		m.restart(i)
	case stIssuerTimeout, stProceedTimeout:
		of := func(cl *cell) map[attemptKey]string { return cl.issuerWait }
		if k == stProceedTimeout {
			of = func(cl *cell) map[attemptKey]string { return cl.awaiting }
		}
		waits := m.waits(of)
		if k == stIssuerTimeout {
			// Or the follow-ups' waits on the issuer, as waits of attempt
			// -1 of their run.
			var fu []wait
			for i, cl := range m.cells {
				for _, n := range slices.Sorted(maps.Keys(cl.fuWait)) {
					fu = append(fu, wait{i, attemptKey{n, -1}})
				}
			}
			waits = paymentsFirst(waits, fu)
		}
		if len(waits) == 0 {
			return false
		}
		// The waits that matter most: on a request stuck in a buffer.
		stuck := slices.DeleteFunc(slices.Clone(waits), func(w wait) bool {
			return !slices.ContainsFunc(m.pool, func(x msg) bool {
				if w.k.attempt == -1 {
					return x.held && x.kind == mAdjustReq && x.run == w.k.call
				}
				return x.held && x.kind == mIssuerReq && x.key() == w.k
			})
		})
		if len(stuck) > 0 {
			waits = stuck
		}
		w := waits[r.IntN(len(waits))]
		switch {
		case w.k.attempt == -1:
			m.fuIssuerTimeout(w.cell, w.k.call)
		case k == stIssuerTimeout:
			m.issuerTimeout(w.cell, w.k)
		default:
			m.proceedTimeout(w.cell, w.k)
		}
	case stAttemptTimeout, stDeadline:
		live := m.live(func(c *call) bool { return k == stDeadline || !c.pnr })
		var fuLive []*fuCall
		if k == stDeadline {
			fuLive = m.fuLiveCalls()
		}
		if len(live)+len(fuLive) == 0 {
			return false
		}
		n := r.IntN(len(live) + len(fuLive))
		if n >= len(live) {
			// A follow-up's caller leaves: DEADLINE_EXCEEDED; its cell
			// goes on (the model's cell may finish what a cancelled
			// context would cut short, a superset).
			m.fuFinish(fuLive[n-len(live)], result{status: "DEADLINE_EXCEEDED"})
			return true
		}
		c := live[n]
		if k == stDeadline {
			m.deadline(c)
		} else {
			m.attemptTimeout(c)
		}
	case stReconcile:
		// A round where it has work: a cell with a sending record no
		// attempt works on (a blind pick mostly finds none).
		var work []int
		for i, cl := range m.cells {
			for _, id := range slices.Sorted(maps.Keys(cl.db)) {
				if st := cl.db[id].state; cl.up && (st == sending || st == deciding) && !m.busy(i, id) {
					work = append(work, i)
					break
				}
			}
			if cl.up && !slices.Contains(work, i) && len(m.fuUnresolved(i)) > 0 {
				work = append(work, i)
			}
		}
		if len(work) == 0 {
			return false
		}
		m.reconcile(work[r.IntN(len(work))])
	}
	return true
}

// paymentsFirst is the targets of a fault that payments and follow-ups
// share (an issuer message lost, duplicated or held, an issuer timeout):
// the payments' while they have any, else the follow-ups'. Follow-ups'
// messages and waits far outnumber the payments', whose rarer states
// (a PENDING resolved, a late request refused) would otherwise be reached
// half as often; the follow-ups' are hit whenever no payment's is there,
// which is most of the time.
func paymentsFirst[T any](payments, followUps []T) []T {
	if len(payments) > 0 {
		return payments
	}
	return followUps
}

// release delivers what stalled send buffers held back, late: the held
// messages become deliverable. It reports whether any was held.
func (m *model) release() bool {
	released := false
	for i := range m.pool {
		if m.pool[i].held {
			m.pool[i].held, released = false, true
		}
	}
	if released {
		m.logf("held messages released")
	}
	return released
}

// Summary is what a sweep over many seeds found.
type Summary struct {
	Seeds int
	// Failed are the seeds that broke an invariant, in seed order.
	Failed []Result
	// Reached counts, per interesting state, the seeds that reached it.
	Reached [numCov]int
	// Slowest is the seed that took longest, and how long.
	Slowest     uint64
	SlowestTime time.Duration
}

// Unreached names the interesting states no seed reached.
func (s Summary) Unreached() []string {
	var out []string
	for c, n := range s.Reached {
		if n == 0 {
			out = append(out, covNames[c])
		}
	}
	return out
}

// Coverage lists each interesting state with the share of seeds that
// reached it, one per line.
func (s Summary) Coverage() string {
	var b strings.Builder
	for c, n := range s.Reached {
		fmt.Fprintf(&b, "  %-48s %6d seeds  %5.1f%%\n", covNames[c], n, 100*float64(n)/float64(max(s.Seeds, 1)))
	}
	return b.String()
}

// Line is the sweep's last line: seeds run, violations, interesting
// states never reached.
func (s Summary) Line() string {
	return fmt.Sprintf("sim: seeds %d, violations %d, unreached %d", s.Seeds, len(s.Failed), len(s.Unreached()))
}

// Sweep runs the seeds from, from+1, ..., n of them, one after another
// (cmd/cellpay-sim runs them on every core, Adding each result).
func Sweep(from uint64, n int, rules Rules) Summary {
	var sum Summary
	for i := range n {
		t0 := time.Now()
		res := RunQuiet(from+uint64(i), rules)
		sum.Add(res, time.Since(t0))
	}
	return sum
}

// Add counts one seed's result, which took took to run. A passing seed's
// trace is dropped: only failures keep theirs.
func (s *Summary) Add(res Result, took time.Duration) {
	s.Seeds++
	for c, k := range res.Covered {
		if k > 0 {
			s.Reached[c]++
		}
	}
	if res.Violation != "" {
		i, _ := slices.BinarySearchFunc(s.Failed, res.Seed, func(r Result, seed uint64) int { return cmp.Compare(r.Seed, seed) })
		s.Failed = slices.Insert(s.Failed, i, res)
	}
	if took > s.SlowestTime {
		s.Slowest, s.SlowestTime = res.Seed, took
	}
}

// RulesNamed returns the Rules with the named knobs set (comma-separated
// field names of Rules, e.g. "PendingWithoutProceeding"); "" is the
// protocol as built.
func RulesNamed(names string) (Rules, error) {
	var r Rules
	v := reflect.ValueOf(&r).Elem()
	for _, name := range strings.Split(names, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		f := v.FieldByName(name)
		if !f.IsValid() || f.Kind() != reflect.Bool {
			return Rules{}, fmt.Errorf("model: no rule knob %q", name)
		}
		f.SetBool(true)
	}
	return r, nil
}

// Kept is a seed kept in testdata: it broke an invariant once (with the
// knobs named in Rules, the protocol as it was), and runs on every test.
type Kept struct {
	Seed      uint64
	Rules     string
	Mix       string
	Violation string
}

// Format is k as a kept seed's file.
func (k Kept) Format() string {
	return fmt.Sprintf("seed: %d\nrules: %s\nmix: %s\nviolation: %s\n", k.Seed, k.Rules, k.Mix, k.Violation)
}

// ParseKept reads a kept seed's file.
func ParseKept(text string) (Kept, error) {
	var k Kept
	for _, line := range strings.Split(text, "\n") {
		name, value, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		switch name {
		case "seed":
			n, err := strconv.ParseUint(value, 10, 64)
			if err != nil {
				return Kept{}, fmt.Errorf("model: kept seed: %w", err)
			}
			k.Seed = n
		case "rules":
			k.Rules = value
		case "mix":
			k.Mix = value
		case "violation":
			k.Violation = value
		}
	}
	if k.Seed == 0 {
		return Kept{}, errors.New("model: kept seed: no seed line")
	}
	return k, nil
}

// crashGTR is GTR replica g dying and coming back: every call in flight
// there ends with its connection (the caller sees UNAVAILABLE and may
// retry, at either access point), every stream it had open to a cell is
// cancelled (unordered with a Proceed ahead of it), and what it kept in
// memory (the remembered cells) is gone.
func (m *model) crashGTR(g int) {
	m.logf("crash gtr %d", g)
	for _, c := range m.calls {
		if c.replica != g || c.done {
			continue
		}
		m.cancel(c)
		c.joined = 0 // the coalesced callers lost their connections too
		m.finish(c, result{status: "UNAVAILABLE"})
	}
	m.fuCrashGTR(g)
	m.replicas[g] = &replica{moved: map[string]int{}}
}

// converged is what must hold once the faults heal (heal): checkHealed,
// then the checker the end-to-end tests use (judge). The simulator and
// the property test end every run with it.
func (m *model) converged() error {
	if err := m.checkHealed(); err != nil {
		return err
	}
	if err := m.judge(); err != nil {
		return err
	}
	return m.effectsHeld(true)
}

// judge hands the healed run to the checker the end-to-end tests use
// (internal/dev/checker): every partner's answers, payments' and
// follow-ups', against what a read returns, every cell's record (with an
// authorization's ledger and the sums of its approved follow-ups there,
// and a follow-up's kind, original and amount) and the issuer's counters
// and applied amounts.
func (m *model) judge() error {
	var answers []checker.Answer
	observed := map[idempotency.Key]checker.Observed{}
	answer := func(id string, res result) checker.Answer {
		ans := checker.Answer{PartnerID: partner, ID: id}
		if res.isError() {
			ans.Code = codeOf(res.status)
		} else {
			ans.Status = cellpayv1.TransactionStatus(cellpayv1.TransactionStatus_value[res.status])
			ans.AuthCode, ans.DeclineReason = res.auth, res.reason
		}
		return ans
	}
	issuer := func(id string) checker.Observed {
		o := checker.Observed{ReadCode: codes.NotFound, Effects: int32(m.effects[id]), Requests: int32(m.requests[id]), Amounts: true}
		if r := m.outcome[id]; r.status == "APPROVED" {
			o.IssuerApproved = true
			if e, ok := m.applied[id]; ok {
				o.IssuerAmount = e.amount
			} else if l := m.auths[id]; l != nil {
				o.IssuerAmount = l.Authorized
			}
		}
		return o
	}
	// An ID is one key whichever kinds used it (reuse.go): its answers,
	// payments' and follow-ups', are judged together against one
	// observation, every cell's rows of it of either kind.
	ids := slices.Sorted(maps.Keys(m.answers))
	for id := range m.fuAnswers {
		if _, ok := m.answers[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		if m.lostUnseenAnywhere(id) && !m.heldAnywhere(id) {
			// A decision the issuer never saw, lost with its cell's
			// store: the design lets it go (loss.go's lostUnseen), and
			// the checker would call it lost.
			m.logf("judge: %s not judged: lost with its store, never at the issuer", id)
			continue
		}
		k := idempotency.Key{PartnerID: partner, TransactionID: id}
		for _, a := range m.answers[id] {
			answers = append(answers, answer(id, a.res))
		}
		for _, a := range m.fuAnswers[id] {
			answers = append(answers, answer(id, a.res))
		}
		o := issuer(id)
		if rec, err := m.agreedRecord(id); err != nil {
			return err
		} else if rec != nil {
			o.Read, o.ReadCode = answerOf(id, *rec), codes.OK
		}
		for i, cl := range m.cells {
			if r, ok := cl.db[id]; ok {
				var followed checker.Sums
				for _, fid := range slices.Sorted(maps.Keys(cl.fdb)) {
					if f := cl.fdb[fid].rec; f.Original == id && f.State == cellside.StateApproved {
						followed = addSums(followed, f.PaymentType, f.Amount)
					}
				}
				o.Records = append(o.Records, checker.CellRecord{PartnerID: partner, TransactionID: id, Cell: cellName(i), CellID: cellName(i),
					State: string(r.state), AuthCode: r.auth, DeclineReason: r.reason,
					PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION, Amount: orchestratorRecord(i, id, r).Amount,
					Ledger: checker.Sums{Captured: r.ledger.Captured, Refunded: r.ledger.Refunded, Voided: r.ledger.Voided}, Followed: followed})
			}
			f, ok := cl.fdb[id]
			if !ok {
				continue
			}
			r := f.rec
			if r.State != cellside.StateAbandoned && o.Read == nil {
				o.Read, o.ReadCode = r.Transaction(), codes.OK
			}
			o.Records = append(o.Records, checker.CellRecord{PartnerID: partner, TransactionID: id, Cell: cellName(i), CellID: cellName(i),
				State: string(r.State), AuthCode: r.AuthCode, DeclineReason: r.DeclineReason, Attempt: r.Attempt,
				PaymentType: r.PaymentType, Amount: r.Amount, Original: r.Original})
		}
		observed[k] = o
	}
	if r := checker.Judge(answers, observed, nil, 1); !r.OK() {
		var found []string
		for _, p := range slices.Sorted(maps.Keys(r.Examples)) {
			for _, e := range r.Examples[p] {
				found = append(found, fmt.Sprintf("%s: %s %s", p, e.ID, e.Detail))
			}
		}
		return fmt.Errorf("checker: %s", strings.Join(found, "; "))
	}
	return nil
}

// addSums adds an approved follow-up of kind for amount to s.
func addSums(s checker.Sums, kind cellpayv1.PaymentType, amount int64) checker.Sums {
	switch kind {
	case cellpayv1.PaymentType_CAPTURE:
		s.Captured += amount
	case cellpayv1.PaymentType_REFUND:
		s.Refunded += amount
	case cellpayv1.PaymentType_VOID:
		s.Voided = true
	}
	return s
}

// codeOf is the gRPC code a partner's error answer names.
func codeOf(name string) codes.Code {
	for c, n := range codeNames {
		if n == name {
			return c
		}
	}
	return codes.Unknown
}

// wait is an attempt in a cell waiting on something (the issuer's answer,
// the GTR's Proceed).
type wait struct {
	cell int
	k    attemptKey
}

// waits lists the waits of every cell in the map of waits of's picks, in
// cell and attempt order.
func (m *model) waits(of func(*cell) map[attemptKey]string) []wait {
	var out []wait
	for i, cl := range m.cells {
		for _, a := range slices.SortedFunc(maps.Keys(of(cl)), cmpKey) {
			out = append(out, wait{i, a})
		}
	}
	return out
}
