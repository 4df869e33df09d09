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
	numStepKinds
)

var stepNames = [numStepKinds]string{"submit", "submit-drained", "duplicate", "other-payload", "deliver", "duplicate-message",
	"lose", "stall", "unstall", "hold-issuer-request", "release", "crash", "crash-busy", "restart", "crash-gtr", "issuer-timeout", "proceed-timeout", "attempt-timeout",
	"deadline", "reconcile"}

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
	numCov
)

var covNames = [numCov]string{"re-route before the PNR", "re-route after a Proceed never taken", "redirect to the owner",
	"directory takeover", "step back with a Proceed in flight", "late Proceed", "stream ended before Proceeding",
	"crash between sending and the issuer's answer", "issuer timeout (PENDING)", "inquiry closed an ID with a send in flight",
	"late request refused (closed ID)", "duplicate waited in the cell", "sending committed, answer lost",
	"duplicate coalesced at a replica", "PENDING resolved", "decision settled by the reconciler"}

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

// drawMix draws a seed's fault mix. Delivery and submission are always on
// (a run must get past the handshake and have work); every fault is on
// with probability 2/3, at a weight of 1 to 4.
func drawMix(r *rand.Rand) Mix {
	var x Mix
	for k := range x.Weights {
		switch stepKind(k) {
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
	return x
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
func Run(seed uint64, rules Rules) Result {
	r := rand.New(rand.NewPCG(seed, 0x63656c6c706179)) // "cellpay"
	mix := drawMix(r)
	rules.GroupCommit = rules.GroupCommit || mix.GroupCommit
	rules.AsyncInsert = rules.AsyncInsert || mix.AsyncInsert
	m := newModel(rules)
	m.logf("seed %d: %s", seed, mix)
	res := Result{Seed: seed, Mix: mix}
	total := 0
	for _, w := range mix.Weights {
		total += w
	}
	for res.Steps < mix.Steps {
		pick := r.IntN(total)
		k := 0
		for ; pick >= mix.Weights[k]; k++ {
			pick -= mix.Weights[k]
		}
		if !m.step(r, stepKind(k)) {
			continue // nothing to do for that kind now: draw again
		}
		res.Steps++
		if err := m.check(); err != nil {
			return m.result(res, err.Error())
		}
	}
	pending := m.pendingAnswers()
	m.heal()
	m.logf("healed")
	if err := m.checkHealed(); err != nil {
		return m.result(res, err.Error())
	}
	if err := m.judge(); err != nil {
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
func (m *model) step(r *rand.Rand, k stepKind) bool {
	pickCell := func() int { return r.IntN(numCells) }
	switch k {
	case stSubmit:
		m.submit(r.IntN(numReplicas), ids[r.IntN(len(ids))], payload(r.IntN(6)))
	case stSubmitDrained:
		m.submitDrained(r.IntN(numReplicas), ids[r.IntN(len(ids))], payload(r.IntN(6)), pickCell())
	case stDuplicate, stOtherPayload:
		if len(m.calls) == 0 {
			return false
		}
		c := m.calls[r.IntN(len(m.calls))]
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
	case stDuplicateMsg, stLose:
		var lossy []int
		for i, x := range m.pool {
			if x.kind == mIssuerReq || x.kind == mIssuerResp || x.kind == mDirUpdate {
				lossy = append(lossy, i)
			}
		}
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
		var reqs []int
		for i, x := range m.pool {
			if x.kind == mIssuerReq && !x.held {
				reqs = append(reqs, i)
			}
		}
		if len(reqs) == 0 {
			return false
		}
		i := reqs[r.IntN(len(reqs))]
		x := &m.pool[i]
		x.held = true
		m.logf("held %v", *x)
		// Held long enough for its cell to stop waiting (IssuerTimeout).
		if cl := m.cells[x.cell]; cl.up && cl.epoch == x.epoch {
			if _, ok := cl.issuerWait[x.key()]; ok {
				m.issuerTimeout(x.cell, x.key())
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
		if len(waits) == 0 {
			return false
		}
		// The waits that matter most: on a request stuck in a buffer.
		stuck := slices.DeleteFunc(slices.Clone(waits), func(w wait) bool {
			return !slices.ContainsFunc(m.pool, func(x msg) bool { return x.held && x.kind == mIssuerReq && x.key() == w.k })
		})
		if len(stuck) > 0 {
			waits = stuck
		}
		w := waits[r.IntN(len(waits))]
		if k == stIssuerTimeout {
			m.issuerTimeout(w.cell, w.k)
		} else {
			m.proceedTimeout(w.cell, w.k)
		}
	case stAttemptTimeout, stDeadline:
		live := m.live(func(c *call) bool { return k == stDeadline || !c.pnr })
		if len(live) == 0 {
			return false
		}
		c := live[r.IntN(len(live))]
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
		}
		if len(work) == 0 {
			return false
		}
		m.reconcile(work[r.IntN(len(work))])
	}
	return true
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
		res := Run(from+uint64(i), rules)
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
	m.replicas[g] = &replica{moved: map[string]int{}}
}

// judge hands the healed run to the checker the end-to-end tests use
// (internal/dev/checker): every partner's answers against what a read
// returns, every cell's record and the issuer's counters.
func (m *model) judge() error {
	var answers []checker.Answer
	observed := map[idempotency.Key]checker.Observed{}
	for _, id := range slices.Sorted(maps.Keys(m.answers)) {
		k := idempotency.Key{PartnerID: partner, TransactionID: id}
		for _, a := range m.answers[id] {
			ans := checker.Answer{PartnerID: partner, ID: id}
			if a.res.isError() {
				ans.Code = codeOf(a.res.status)
			} else {
				ans.Status = cellpayv1.TransactionStatus(cellpayv1.TransactionStatus_value[a.res.status])
				ans.AuthCode, ans.DeclineReason = a.res.auth, a.res.reason
			}
			answers = append(answers, ans)
		}
		o := checker.Observed{ReadCode: codes.NotFound, Effects: int32(m.effects[id]), Requests: int32(m.requests[id])}
		if rec, err := m.agreedRecord(id); err != nil {
			return err
		} else if rec != nil {
			o.Read, o.ReadCode = answerOf(id, *rec), codes.OK
		}
		for i, cl := range m.cells {
			if r, ok := cl.db[id]; ok {
				o.Records = append(o.Records, checker.CellRecord{PartnerID: partner, TransactionID: id, Cell: cellName(i), CellID: cellName(i),
					State: string(r.state), AuthCode: r.auth, DeclineReason: r.reason})
			}
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
