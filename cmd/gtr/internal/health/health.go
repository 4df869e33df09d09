// Package health decides, per GTR replica, how much traffic each cell may
// take: its health share, from 0 (ejected or down) to 100 (fully healthy).
//
// Two signals feed it. Active: a gRPC health check of every instance of
// every cell every Interval (the instances a cell lists, or those its
// dns:/// name resolves to); a cell passes while any of its instances
// answers SERVING, and Instances shows each one (instances.go). Passive: the outcome of every request the GTR sends (Observe),
// kept in a failure-rate window over the last FailureWindow and a
// success-rate window over the last SuccessWindow requests, plus a run of
// consecutive failures. A cell that fails either is ejected for a back-off
// that doubles with each ejection (up to MaxEjection); when the back-off has
// passed and its health check answers SERVING it is re-admitted on
// RampStart percent of its traffic, doubling every RampStep while it stays
// healthy. The last cell of a pool with a share above zero is never ejected:
// a sick pool keeps its least sick cell rather than refusing everything.
//
// Observe is on the request path: it takes one short per-cell lock (no
// monitor-wide lock unless it ejects) and never blocks on I/O or compiles.
// Share changes are reported through OnChange, outside every lock. The
// monitor is the only owner of health: the routing state reads Share when
// it compiles, and Stats is the outcome window that ejects, which the admin
// API lists.
package health

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
)

// Config tunes the monitor. Zero values take the defaults in brackets.
type Config struct {
	Interval     time.Duration // active check period [250ms]
	CheckTimeout time.Duration // one active check [200ms]
	// ResolveInterval is how often a dns:/// cell's name is looked up
	// again for its instances [2s]; each lookup is bounded by
	// CheckTimeout.
	ResolveInterval time.Duration
	// SlowChecks is how many active checks in a row may time out before
	// the cell counts as down [3]: a busy cell answers late, a dead one
	// not at all; an answer of NOT_SERVING, or a refused connection, counts
	// at once. A cell whose checks time out but which answered a
	// transaction within the last SlowChecks × Interval is busy, not dead,
	// and stays (Answered).
	SlowChecks    int
	FailureWindow time.Duration // passive failure-rate window [5s]
	// FailureRate ejects a cell whose failure share over FailureWindow
	// reaches it, once MinRequests were seen in the window [0.5, 10].
	FailureRate float64
	MinRequests int
	// SuccessWindow is the number of recent requests whose success rate
	// must stay at or above SuccessRate [100, 0.8].
	SuccessWindow int
	SuccessRate   float64
	// ConsecutiveFailures ejects a cell after that many failures in a row [3].
	ConsecutiveFailures int
	BaseEjection        time.Duration // first ejection [1s]
	MaxEjection         time.Duration // longest ejection [30s]
	RampStart           int           // share on re-admission, percent [10]
	RampStep            time.Duration // share doubles every RampStep [1s]
	Now                 func() time.Time
	Log                 *slog.Logger
	// OnChange receives every change of a cell's share, outside the
	// monitor's locks, possibly on a payment's goroutine (an ejection by
	// Observe): it must not block, nor compile. The GTR passes the routing
	// state's HealthChanged, which signals its background compiler.
	// Required.
	OnChange func(cellID string, share int)
	// Dial is the transport of the active checks' connections to a cell's
	// instances (the GTR's mutual TLS pinning the cell's identity, package
	// hop); nil for plaintext.
	Dial func(cellID string) grpc.DialOption
	// DialOptions are every check connection's, after Dial's.
	DialOptions []grpc.DialOption
}

func (c *Config) validate() error {
	if c.OnChange == nil {
		return errors.New("health: OnChange is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Interval, 250*time.Millisecond)
	def(&c.CheckTimeout, 200*time.Millisecond)
	def(&c.ResolveInterval, 2*time.Second)
	def(&c.FailureWindow, 5*time.Second)
	def(&c.BaseEjection, time.Second)
	def(&c.MaxEjection, 30*time.Second)
	def(&c.RampStep, time.Second)
	if c.FailureRate <= 0 {
		c.FailureRate = 0.5
	}
	if c.MinRequests <= 0 {
		c.MinRequests = 10
	}
	if c.SuccessWindow <= 0 {
		c.SuccessWindow = 100
	}
	if c.SuccessRate <= 0 {
		c.SuccessRate = 0.8
	}
	if c.ConsecutiveFailures <= 0 {
		c.ConsecutiveFailures = 3
	}
	if c.SlowChecks <= 0 {
		c.SlowChecks = 3
	}
	if c.RampStart <= 0 || c.RampStart > 100 {
		c.RampStart = 10
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// Cell names a cell to watch: its instances are Addrs, or Addr alone, or
// what a "dns:///host:port" Addr resolves to.
type Cell struct {
	ID, Addr, Pool string
	Addrs          []string
}

// Monitor tracks every cell's health share. It is safe for concurrent use.
// It is the only owner of health in the GTR: the routing state reads
// shares from it (Share) when it compiles, and the admin API reads the
// outcome window that ejects (Stats); nothing keeps a copy.
//
// Lock order: mu, then a cellState's mu, then its imu (a leaf: the
// instances' set). Observe, the payment path's
// call, takes no monitor-wide lock: one atomic load of the cell map, then
// that cell's own mu. Only an ejection (rare) takes mu, because deciding
// that a cell is not the last of its pool reads its peers.
type Monitor struct {
	cfg Config

	mu sync.Mutex // serialises SetCells, ejections and active checks
	// cells is copy-on-write: replaced whole under mu, read with one atomic
	// load and never modified once published.
	cells atomic.Pointer[map[string]*cellState]
	// closed: Run has ended and closed every connection; SetCells dials
	// nothing more (a table change read as Run ends must not leave
	// connections no one closes). Under mu.
	closed bool
	// ejected counts this replica's ejections of each cell (by ID, so a
	// cell whose addresses change keeps its count), by cause. Under mu,
	// which every ejection holds.
	ejected map[string]*[NumCauses]uint64
}

// Cause classes why a cell was ejected: the reason label of
// cellpay_gtr_cell_ejections_total.
type Cause uint8

// The causes, in label order.
const (
	// CauseConsecutiveFailures: ConsecutiveFailures requests failed in a
	// row.
	CauseConsecutiveFailures Cause = iota
	// CauseFailureRate: FailureRate of the requests in FailureWindow
	// failed.
	CauseFailureRate
	// CauseSuccessRate: under SuccessRate of the last SuccessWindow
	// requests succeeded.
	CauseSuccessRate
	// CauseChecksUnanswered: SlowChecks active checks in a row got no
	// answer in time, and no transaction was answered meanwhile.
	CauseChecksUnanswered
	// CauseCheckDown: an active check found the cell NOT_SERVING or
	// unreachable.
	CauseCheckDown
	// NumCauses is the number of causes.
	NumCauses
	noCause Cause = NumCauses
)

var causeNames = [NumCauses]string{"consecutive_failures", "failure_rate", "success_rate", "checks_unanswered", "check_down"}

// String is the cause's label.
func (c Cause) String() string {
	if c < NumCauses {
		return causeNames[c]
	}
	return "none"
}

type change struct {
	id    string
	share int
}

type cellState struct {
	Cell
	// insts are the cell's instances, each probed on its own. The slice
	// is replaced whole (a dns:/// name resolving to other addresses),
	// never modified once stored; see instances.go.
	insts atomic.Pointer[[]*instance]
	imu   sync.Mutex // serialises replacing insts and closing them
	gone  bool       // closed: insts are closed and never replaced again; under imu
	// resolvedAt is when a dns:/// name was last looked up; under imu.
	resolvedAt time.Time

	// share is written with mu of the cell held, read without it.
	share atomic.Int32

	mu         sync.Mutex // guards the fields below
	ejectedAt  time.Time
	ejectFor   time.Duration
	ejections  int
	rampedAt   time.Time
	consecFail int
	slowChecks int // active checks in a row that timed out
	// answeredAt is when the cell last answered a request (Answered).
	answeredAt time.Time
	// window and recent are the cell's one outcome window: the failure
	// rate over the last FailureWindow and the success rate over the last
	// SuccessWindow requests, both reset on ejection. Stats reports them.
	window *outcomeWindow
	recent *ring
}

// New returns a monitor; Run starts its active checks.
func New(cfg Config) (*Monitor, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &Monitor{cfg: cfg, ejected: map[string]*[NumCauses]uint64{}}
	m.cells.Store(&map[string]*cellState{})
	return m, nil
}

func (m *Monitor) cell(id string) *cellState { return (*m.cells.Load())[id] }

// SetCells replaces the watched cells. New cells start at share 100: a
// cell named in the table is trusted until it fails a check or a request.
// A cell whose addresses change is a new cell. Once Run has ended it does
// nothing: no cell is dialled again.
func (m *Monitor) SetCells(cells []Cell) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	old := *m.cells.Load()
	next := make(map[string]*cellState, len(cells))
	for _, c := range cells {
		if s, ok := old[c.ID]; ok && s.Addr == c.Addr && slices.Equal(s.Addrs, c.Addrs) {
			if s.Pool != c.Pool { // Pool is read without s.mu: replace, never write
				s = s.withPool(c.Pool)
			}
			next[c.ID] = s
			continue
		}
		c.Addrs = slices.Clone(c.Addrs)
		s := &cellState{Cell: c, window: newOutcomeWindow(m.cfg.FailureWindow), recent: newRing(m.cfg.SuccessWindow)}
		if !isDNS(c.Addr) {
			s.setInstances(m.dialAll(c.ID, instanceAddrs(c), ""))
		} else {
			s.setInstances(nil) // resolved by each round of checks
		}
		s.share.Store(100)
		next[c.ID] = s
	}
	for id, s := range old {
		if n, ok := next[id]; !ok || n.insts.Load() != s.insts.Load() {
			s.closeInstances()
		}
	}
	m.cells.Store(&next)
}

// withPool is a copy of s in another pool, with the same connection and
// verdicts. Called with m.mu held, which every writer of s's verdict
// fields holds too, except Observe, whose later observations go to the
// copy once it is published.
func (s *cellState) withPool(pool string) *cellState {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := &cellState{Cell: s.Cell,
		ejectedAt: s.ejectedAt, ejectFor: s.ejectFor, ejections: s.ejections, rampedAt: s.rampedAt,
		consecFail: s.consecFail, slowChecks: s.slowChecks, window: s.window.clone(), recent: s.recent.clone()}
	n.Pool = pool
	n.share.Store(s.share.Load())
	// The same connections: s is dropped, not closed, and a round of
	// checks still holding it must not re-resolve them away from n.
	n.insts.Store(s.insts.Load())
	s.imu.Lock()
	s.gone = true
	s.imu.Unlock()
	return n
}

// Share returns a cell's current share (100 for a cell it does not know).
// It takes no lock: the routing state's compiler calls it for every cell.
func (m *Monitor) Share(cellID string) int {
	if s := m.cell(cellID); s != nil {
		return int(s.share.Load())
	}
	return 100
}

// CellStats is a cell's outcome window on this replica: the one whose
// rates eject it, reset when it is ejected.
type CellStats struct {
	// Recent is how many outcomes SuccessRate covers (at most
	// SuccessWindow).
	Recent int
	// SuccessRate is the share of Recent that were ok; -1 when Recent is 0.
	SuccessRate float64
	// WindowRequests and WindowFailures are the outcomes seen in the last
	// FailureWindow.
	WindowRequests, WindowFailures int
}

// Ejections returns how many times this replica has ejected the cell
// since it started, by cause (indexed by Cause).
func (m *Monitor) Ejections(cellID string) [NumCauses]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := m.ejected[cellID]; n != nil {
		return *n
	}
	return [NumCauses]uint64{}
}

// Stats returns the cell's outcome window (empty for a cell it does not
// know).
func (m *Monitor) Stats(cellID string) CellStats {
	st := CellStats{SuccessRate: -1}
	s := m.cell(cellID)
	if s == nil {
		return st
	}
	now := m.cfg.Now()
	s.mu.Lock()
	n, ok := s.recent.counts()
	st.WindowRequests, st.WindowFailures = s.window.counts(now)
	s.mu.Unlock()
	st.Recent = n
	if n > 0 {
		st.SuccessRate = float64(ok) / float64(n)
	}
	return st
}

// Outcome is what one request sent to a cell says of the cell.
type Outcome uint8

// The outcomes.
const (
	// Answered: the cell answered about the transaction itself (whatever
	// the answer): it is alive.
	Answered Outcome = iota
	// Failed: the cell failed the request (unreachable, broken, a
	// re-routable answer through a fault of its own).
	Failed
	// TimedOut: the GTR stopped waiting. Not a failure (a busy cell is
	// slow; the adaptive limits deal with slowness) and no sign of life.
	TimedOut
)

// Observe records the outcome of one request sent to a cell: ok is false
// for a failure of the cell, true for an answer; Record with TimedOut
// tells a timeout.
func (m *Monitor) Observe(cellID string, ok bool) {
	o := Answered
	if !ok {
		o = Failed
	}
	m.Record(cellID, o)
}

// Record records the outcome of one request sent to a cell. It is on the
// payment path: it takes the cell's own lock only, never the monitor's,
// unless the failure ejects the cell; it never compiles anything, and an
// ejection is reported to OnChange, which must not block either.
func (m *Monitor) Record(cellID string, o Outcome) {
	s := m.cell(cellID)
	if s == nil {
		return
	}
	now := m.cfg.Now()
	ok := o != Failed
	s.mu.Lock()
	s.window.add(now, ok)
	s.recent.add(ok)
	cause := noCause
	if o == Answered {
		s.answeredAt = now
	}
	if ok {
		s.consecFail = 0
	} else {
		s.consecFail++
		if s.share.Load() > 0 {
			cause = m.outlier(s, now)
		}
	}
	s.mu.Unlock()
	if cause != noCause {
		m.tryEject(s, now)
	}
}

// tryEject ejects s if it is still an outlier once mu is held.
func (m *Monitor) tryEject(s *cellState, now time.Time) {
	m.mu.Lock()
	var pending []change
	s.mu.Lock()
	if cause := m.outlier(s, now); s.share.Load() > 0 && m.cell(s.ID) == s && cause != noCause {
		pending = m.eject(s, now, cause, cause.detail(), pending)
	}
	s.mu.Unlock()
	m.mu.Unlock()
	m.report(pending)
}

// outlier says why s should be ejected now, or noCause. Called with s.mu
// held.
func (m *Monitor) outlier(s *cellState, now time.Time) Cause {
	if s.consecFail >= m.cfg.ConsecutiveFailures {
		return CauseConsecutiveFailures
	}
	if n, fails := s.window.counts(now); n >= m.cfg.MinRequests && float64(fails)/float64(n) >= m.cfg.FailureRate {
		return CauseFailureRate
	}
	if n, okc := s.recent.counts(); n >= m.cfg.SuccessWindow && float64(okc)/float64(n) < m.cfg.SuccessRate {
		return CauseSuccessRate
	}
	return noCause
}

// detail is the log's words for an outlier's cause.
func (c Cause) detail() string { return strings.ReplaceAll(c.String(), "_", " ") }

// eject sets s's share to 0 unless it is the last cell of its pool still
// taking traffic, resets its outcome window and counts the ejection by
// cause; reason is the log's detail. Called with m.mu and s.mu held (so no
// peer is ejected meanwhile).
func (m *Monitor) eject(s *cellState, now time.Time, cause Cause, reason string, pending []change) []change {
	for _, o := range *m.cells.Load() {
		if o != s && o.Pool == s.Pool && o.share.Load() > 0 {
			n := m.ejected[s.ID]
			if n == nil {
				n = new([NumCauses]uint64)
				m.ejected[s.ID] = n
			}
			n[cause]++ // before the share: a scrape that reads 0 reads the count too
			s.ejections++
			s.ejectFor = min(m.cfg.BaseEjection<<min(s.ejections-1, 16), m.cfg.MaxEjection)
			s.ejectedAt = now
			s.consecFail = 0
			s.window.reset()
			s.recent.reset()
			m.cfg.Log.Warn("health: cell ejected", "cell", s.ID, "reason", reason, "for", s.ejectFor.String())
			return set(s, 0, pending)
		}
	}
	return pending
}

// set moves s's share, noting the change for report. Called with s.mu held.
func set(s *cellState, share int, pending []change) []change {
	if int(s.share.Load()) != share {
		s.share.Store(int32(share))
		pending = append(pending, change{s.ID, share})
	}
	return pending
}

// report tells OnChange about changes, outside every lock.
func (m *Monitor) report(pending []change) {
	for _, c := range pending {
		m.cfg.OnChange(c.id, c.share)
	}
}

// Run checks every cell each Interval until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	defer m.close()
	for {
		m.checkAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *Monitor) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	for _, s := range *m.cells.Load() {
		s.closeInstances()
	}
	m.cells.Store(&map[string]*cellState{})
}

func (m *Monitor) checkAll(ctx context.Context) {
	cells := *m.cells.Load()
	targets := make([]*cellState, 0, len(cells))
	for _, s := range cells {
		targets = append(targets, s)
	}
	results := make([]checkResult, len(targets))
	var wg sync.WaitGroup
	for i, s := range targets {
		wg.Go(func() { results[i] = m.checkCell(ctx, s) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	m.mu.Lock()
	now := m.cfg.Now()
	var pending []change
	for i, s := range targets {
		if m.cell(s.ID) != s {
			continue // replaced meanwhile
		}
		s.mu.Lock()
		pending = m.applyCheck(s, results[i], now, pending)
		s.mu.Unlock()
	}
	m.mu.Unlock()
	m.report(pending)
}

// checkResult is what one active check found.
type checkResult int

const (
	checkServing checkResult = iota
	checkSlow                // no answer within CheckTimeout
	checkDown                // NOT_SERVING, or no connection
)

// applyCheck moves s along eject → re-admit → ramp. Called with m.mu and
// s.mu held.
func (m *Monitor) applyCheck(s *cellState, res checkResult, now time.Time, pending []change) []change {
	switch res {
	case checkSlow:
		if s.slowChecks++; s.slowChecks < m.cfg.SlowChecks {
			return pending // late, not yet down
		}
		if now.Sub(s.answeredAt) < time.Duration(m.cfg.SlowChecks)*m.cfg.Interval {
			// Its checks go unanswered, but it answers transactions:
			// busy, not dead (its limit sheds the excess). When the
			// answers stop too, the next slow check ejects it.
			if s.slowChecks == m.cfg.SlowChecks {
				m.cfg.Log.Warn("health: checks unanswered, but the cell is answering transactions: busy, not ejected", "cell", s.ID)
			}
			return pending
		}
	default:
		s.slowChecks = 0
	}
	serving := res == checkServing
	share := int(s.share.Load())
	switch {
	case !serving && share > 0:
		cause := CauseCheckDown
		if res == checkSlow {
			cause = CauseChecksUnanswered
		}
		return m.eject(s, now, cause, checkReason(s, res), pending)
	case !serving:
		// Stays out; the back-off restarts from the last failure.
		s.ejectedAt = now
	case share == 0 && now.Sub(s.ejectedAt) >= s.ejectFor:
		s.rampedAt = now
		m.cfg.Log.Info("health: cell re-admitted", "cell", s.ID, "share", m.cfg.RampStart)
		return set(s, m.cfg.RampStart, pending)
	case share > 0 && share < 100 && now.Sub(s.rampedAt) >= m.cfg.RampStep:
		s.rampedAt = now
		if share*2 >= 100 {
			s.ejections = 0 // fully healthy again: the back-off starts over
		}
		return set(s, min(100, share*2), pending)
	}
	return pending
}

// checkReason says why the active checks eject s: silence, or what its
// instances answered.
func checkReason(s *cellState, res checkResult) string {
	if res == checkSlow {
		return "health check: no answer in time, several checks in a row"
	}
	var seen []string
	for _, in := range *s.insts.Load() {
		if p := in.last.Load(); p != nil && p.detail != "" && !slices.Contains(seen, p.detail) {
			seen = append(seen, p.detail)
		}
	}
	if len(seen) == 0 {
		return "health check: down"
	}
	return "health check: " + strings.Join(seen, ", ")
}
