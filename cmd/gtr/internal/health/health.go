// Package health decides, per GTR replica, how much traffic each cell may
// take: its health share, from 0 (ejected or down) to 100 (fully healthy).
//
// Two signals feed it. Active: a gRPC health check of every cell every
// Interval. Passive: the outcome of every request the GTR sends (Observe),
// kept in a failure-rate window over the last FailureWindow and a
// success-rate window over the last SuccessWindow requests, plus a run of
// consecutive failures. A cell that fails either is ejected for a back-off
// that doubles with each ejection (up to MaxEjection); when the back-off has
// passed and its health check answers SERVING it is re-admitted on
// RampStart percent of its traffic, doubling every RampStep while it stays
// healthy. The last cell of a pool with a share above zero is never ejected:
// a sick pool keeps its least sick cell rather than refusing everything.
//
// Observe is on the request path: it takes one short per-cell lock and never
// blocks on I/O. Share changes are reported through OnChange, outside any
// lock of the caller's.
package health

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Config tunes the monitor. Zero values take the defaults in brackets.
type Config struct {
	Interval     time.Duration // active check period [250ms]
	CheckTimeout time.Duration // one active check [200ms]
	// SlowChecks is how many active checks in a row may time out before
	// the cell counts as down [3]: a busy cell answers late, a dead one
	// not at all; an answer of NOT_SERVING, or a refused connection, counts
	// at once.
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
	// OnChange receives every change of a cell's share. Required.
	OnChange func(cellID string, share int)
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

// Cell names a cell to watch.
type Cell struct {
	ID, Addr, Pool string
}

// Monitor tracks every cell's health share. It is safe for concurrent use.
type Monitor struct {
	cfg Config

	mu    sync.Mutex // guards cells and every cellState's fields
	cells map[string]*cellState
	// pending holds share changes to report once mu is released.
	pending []change
}

type change struct {
	id    string
	share int
}

type cellState struct {
	Cell
	conn  *grpc.ClientConn
	check healthpb.HealthClient

	share      int
	ejectedAt  time.Time
	ejectFor   time.Duration
	ejections  int
	rampedAt   time.Time
	consecFail int
	slowChecks int // active checks in a row that timed out
	window     *outcomeWindow
	recent     *ring
}

// New returns a monitor; Run starts its active checks.
func New(cfg Config) (*Monitor, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Monitor{cfg: cfg, cells: map[string]*cellState{}}, nil
}

// SetCells replaces the watched cells. New cells start at share 100: a
// cell named in the table is trusted until it fails a check or a request.
func (m *Monitor) SetCells(cells []Cell) {
	m.mu.Lock()
	keep := map[string]bool{}
	for _, c := range cells {
		keep[c.ID] = true
		if s, ok := m.cells[c.ID]; ok && s.Addr == c.Addr {
			s.Pool = c.Pool
			continue
		} else if ok {
			s.conn.Close()
		}
		conn, err := grpc.NewClient(c.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			m.cfg.Log.Error("health: cannot watch cell", "cell", c.ID, "error", err)
			continue
		}
		m.cells[c.ID] = &cellState{
			Cell: c, conn: conn, check: healthpb.NewHealthClient(conn), share: 100,
			window: newOutcomeWindow(m.cfg.FailureWindow), recent: newRing(m.cfg.SuccessWindow),
		}
	}
	for id, s := range m.cells {
		if !keep[id] {
			s.conn.Close()
			delete(m.cells, id)
		}
	}
	m.mu.Unlock()
}

// Share returns a cell's current share (100 for a cell it does not know).
func (m *Monitor) Share(cellID string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.cells[cellID]; ok {
		return s.share
	}
	return 100
}

// Observe records the outcome of one request sent to a cell: ok is false
// for a failure of the cell (connection refused, timeout, a re-routable
// answer), true for any answer about the transaction itself.
func (m *Monitor) Observe(cellID string, ok bool) {
	m.mu.Lock()
	s, found := m.cells[cellID]
	if !found {
		m.mu.Unlock()
		return
	}
	now := m.cfg.Now()
	s.window.add(now, ok)
	s.recent.add(ok)
	if ok {
		s.consecFail = 0
	} else {
		s.consecFail++
	}
	if s.share > 0 && !ok {
		if reason := m.outlier(s, now); reason != "" {
			m.eject(s, now, reason)
		}
	}
	m.flush()
}

// outlier says why s should be ejected now, or "".
func (m *Monitor) outlier(s *cellState, now time.Time) string {
	if s.consecFail >= m.cfg.ConsecutiveFailures {
		return "consecutive failures"
	}
	if n, fails := s.window.counts(now); n >= m.cfg.MinRequests && float64(fails)/float64(n) >= m.cfg.FailureRate {
		return "failure rate"
	}
	if n, okc := s.recent.counts(); n >= m.cfg.SuccessWindow && float64(okc)/float64(n) < m.cfg.SuccessRate {
		return "success rate"
	}
	return ""
}

// eject sets s's share to 0 unless it is the last cell of its pool still
// taking traffic. Called with mu held.
func (m *Monitor) eject(s *cellState, now time.Time, reason string) {
	for _, o := range m.cells {
		if o != s && o.Pool == s.Pool && o.share > 0 {
			s.ejections++
			s.ejectFor = min(m.cfg.BaseEjection<<min(s.ejections-1, 16), m.cfg.MaxEjection)
			s.ejectedAt = now
			s.consecFail = 0
			s.window.reset()
			s.recent.reset()
			m.cfg.Log.Warn("health: cell ejected", "cell", s.ID, "reason", reason, "for", s.ejectFor.String())
			m.set(s, 0)
			return
		}
	}
}

func (m *Monitor) set(s *cellState, share int) {
	if s.share != share {
		s.share = share
		m.pending = append(m.pending, change{s.ID, share})
	}
}

// flush releases mu and reports pending changes.
func (m *Monitor) flush() {
	p := m.pending
	m.pending = nil
	m.mu.Unlock()
	for _, c := range p {
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
	for id, s := range m.cells {
		s.conn.Close()
		delete(m.cells, id)
	}
}

func (m *Monitor) checkAll(ctx context.Context) {
	m.mu.Lock()
	targets := make([]*cellState, 0, len(m.cells))
	for _, s := range m.cells {
		targets = append(targets, s)
	}
	m.mu.Unlock()
	results := make([]checkResult, len(targets))
	var wg sync.WaitGroup
	for i, s := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, m.cfg.CheckTimeout)
			defer cancel()
			resp, err := s.check.Check(cctx, &healthpb.HealthCheckRequest{})
			switch {
			case err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING:
				results[i] = checkServing
			case status.Code(err) == codes.DeadlineExceeded:
				results[i] = checkSlow
			default:
				results[i] = checkDown
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	m.mu.Lock()
	now := m.cfg.Now()
	for i, s := range targets {
		if m.cells[s.ID] != s {
			continue // replaced meanwhile
		}
		serving := results[i] == checkServing
		switch results[i] {
		case checkSlow:
			if s.slowChecks++; s.slowChecks < m.cfg.SlowChecks {
				continue // late, not yet down
			}
		default:
			s.slowChecks = 0
		}
		m.applyCheck(s, serving, now)
	}
	m.flush()
}

// checkResult is what one active check found.
type checkResult int

const (
	checkServing checkResult = iota
	checkSlow                // no answer within CheckTimeout
	checkDown                // NOT_SERVING, or no connection
)

// applyCheck moves s along eject → re-admit → ramp. Called with mu held.
func (m *Monitor) applyCheck(s *cellState, serving bool, now time.Time) {
	switch {
	case !serving && s.share > 0:
		m.eject(s, now, "health check")
	case !serving:
		// Stays out; the back-off restarts from the last failure.
		s.ejectedAt = now
	case s.share == 0 && now.Sub(s.ejectedAt) >= s.ejectFor:
		s.rampedAt = now
		m.cfg.Log.Info("health: cell re-admitted", "cell", s.ID, "share", m.cfg.RampStart)
		m.set(s, m.cfg.RampStart)
	case s.share > 0 && s.share < 100 && now.Sub(s.rampedAt) >= m.cfg.RampStep:
		s.rampedAt = now
		m.set(s, min(100, s.share*2))
		if s.share == 100 {
			s.ejections = 0 // fully healthy again: the back-off starts over
		}
	}
}
