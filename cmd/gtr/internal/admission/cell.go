// Package admission decides, at the GTR, what work to take on before any of
// it reaches a cell, so that an overloaded platform sheds the excess at once
// instead of letting every request wait out its deadline:
//
//   - Partners: a token bucket (rate and burst) and an in-flight cap per
//     partner, from the partner registry, so that one partner offering ten
//     times its limit cannot take another's share.
//   - Cells: an adaptive concurrency limit per cell, in the spirit of TCP
//     Vegas and Netflix's gradient limiter: it keeps a long-term average of
//     the cell's latency (up to the point of no return: the cell's own
//     work, not the issuer's), and when the latency of recent attempts rises
//     well above it (the cell is queueing), it lowers the number of attempts
//     it lets the cell have at once; when latency falls back, it raises it.
//     CellConfig.Baseline moves the long-term average with time (the gtr
//     command's default, 10 s), so that a queue built under overload is
//     shed before it becomes the normal. Without it the average moves by
//     a share of each window of samples, so the faster a cell is asked,
//     the sooner a queue becomes its new normal (at 1,600 attempts a
//     second, within half a second): requests then wait out their
//     deadline instead of being refused (docs/benchmarks/log/overload.md).
//
// A shed request was never sent to any cell, so a partner may retry it
// safely under the same transaction ID; the errors say so, with a retry
// hint (grpc-retry-pushback-ms).
//
// Acquire and Release are on every payment's path: they use per-cell (or
// per-partner) atomics and never block, log or do I/O. The limit is
// recomputed from samples under a per-cell lock that is only ever held for a
// few arithmetic operations.
package admission

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// CellConfig tunes the adaptive limit of each cell. Zero values take the
// defaults in brackets.
type CellConfig struct {
	// InitialLimit is a new cell's concurrency limit [32].
	InitialLimit int
	// MinLimit and MaxLimit bound the limit [4, 512].
	MinLimit, MaxLimit int
	// Tolerance is how much slower than usual a cell may answer before the
	// limit falls: the limit falls while the recent latency exceeds
	// Tolerance × the long-term average [2.0].
	Tolerance float64
	// Window is how many samples make one update of the limit [20].
	Window int
	// LongWindows is how many windows the long-term average spans, about
	// [30], when Baseline is zero: a cell that becomes slower for good is
	// learned within it, and is not starved for ever.
	LongWindows int
	// Baseline, if set, is instead the time constant of the long-term
	// average as it rises toward a slower latency, whatever the rate: a
	// cell that becomes slower for good is learned within a few of it,
	// while a queue that builds under overload is shed before it becomes
	// the normal. The average falls eight times faster (gtr
	// -admission-baseline, default 10 s).
	Baseline time.Duration
	// ShedBaseline, if set with Baseline, is the time constant of that
	// rise instead while the limit is refusing attempts (it refused any
	// since its last update): a latency that rises while the excess is
	// being shed is more likely the queue the limit admits than a slower
	// cell, so it becomes the normal more slowly (gtr
	// -admission-shed-baseline; experimental, docs/benchmarks/log/overload.md).
	ShedBaseline time.Duration
	// Now is the clock [time.Now].
	Now func() time.Time
	// Disabled admits everything (for measuring without admission control).
	Disabled bool
}

func (c *CellConfig) defaults() {
	if c.InitialLimit <= 0 {
		c.InitialLimit = 32
	}
	if c.MinLimit <= 0 {
		c.MinLimit = 4
	}
	if c.MaxLimit <= 0 {
		c.MaxLimit = 512
	}
	c.InitialLimit = min(max(c.InitialLimit, c.MinLimit), c.MaxLimit)
	if c.Tolerance <= 1 {
		c.Tolerance = 2
	}
	if c.Window <= 0 {
		c.Window = 20
	}
	if c.LongWindows <= 0 {
		c.LongWindows = 30
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Cells holds the adaptive limit of every cell. It is safe for concurrent
// use.
type Cells struct {
	cfg   CellConfig
	mu    sync.RWMutex // guards the map only; cells are never removed
	cells map[string]*CellLimit
}

// NewCells returns the limits of cells, each learned on first use.
func NewCells(cfg CellConfig) *Cells {
	cfg.defaults()
	return &Cells{cfg: cfg, cells: map[string]*CellLimit{}}
}

// WholeGTR names the GTR-wide limit among the cells' (no cell ID has a
// '*'): a limit over every call in flight, each until it is answered (past
// its point of no return too), that sheds when the platform as a whole,
// the GTR's own CPU included, is queueing.
const WholeGTR = "*"

// maxCells bounds the map: a routing table holds at most this many cells.
const maxCells = 4096

// Cell returns the limit of cell id. Past maxCells distinct IDs it returns
// nil, which admits everything (a table that large is refused elsewhere).
func (c *Cells) Cell(id string) *CellLimit {
	c.mu.RLock()
	l := c.cells[id]
	c.mu.RUnlock()
	if l != nil {
		return l
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l = c.cells[id]; l == nil && len(c.cells) < maxCells {
		l = newCellLimit(&c.cfg)
		c.cells[id] = l
	}
	return l
}

// CellLimit is one cell's adaptive concurrency limit.
type CellLimit struct {
	cfg      *CellConfig
	inflight atomic.Int64
	limit    atomic.Int64
	shed     atomic.Int64 // attempts refused, for metrics
	early    atomic.Int64 // calls refused before decoding (WouldRefuse)
	recent   atomic.Int64 // the last window's average latency of served attempts, ns (RetryAfter)

	mu        sync.Mutex // guards the fields below
	long      float64    // long-term average latency, seconds (EWMA per window, or in time)
	last      time.Time  // of the last update
	samples   int        // in this window
	served    int        // of which answered
	sum       time.Duration
	dropped   int // timed out or failed
	estimated float64
	refused   int64 // shed + early at the last update
}

func newCellLimit(cfg *CellConfig) *CellLimit {
	l := &CellLimit{cfg: cfg, estimated: float64(cfg.InitialLimit), last: cfg.Now()}
	l.limit.Store(int64(cfg.InitialLimit))
	return l
}

// Acquire takes a slot for one attempt, or reports false when the cell has
// as many attempts in flight as its limit allows. A nil CellLimit admits.
func (l *CellLimit) Acquire() bool {
	if l == nil || l.cfg.Disabled {
		return true
	}
	for {
		n := l.inflight.Load()
		if n >= l.limit.Load() {
			l.shed.Add(1)
			return false
		}
		if l.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// AcquireShare is Acquire for a limit over every partner's requests (the
// GTR-wide one), told that the caller's partner has mine requests in
// flight (this one included) among active partners with any. At the
// limit, a partner still within its fair share of it (fewer than
// limit/active before this one) is admitted all the same, up to half the
// limit again: so that one partner's flood, whose latency the limit
// reacts to, sheds that partner's requests and not another's at its
// normal rate. With fewer than two partners active it is Acquire.
func (l *CellLimit) AcquireShare(mine, active int64) bool {
	if l == nil || l.cfg.Disabled {
		return true
	}
	for {
		n, limit := l.inflight.Load(), l.limit.Load()
		if refusesShare(n, limit, mine, active) {
			l.shed.Add(1)
			return false
		}
		if l.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// refusesShare is AcquireShare's rule: n in flight against limit, for a
// partner with mine in flight (this one included) among active partners.
func refusesShare(n, limit, mine, active int64) bool {
	return n >= limit && (active < 2 || (mine-1)*active >= limit || 2*n >= 3*limit)
}

// WouldRefuse reports whether AcquireShare(mine, active) would refuse now,
// without taking a slot or counting a refusal in Shed: for refusing a
// call before it is decoded (Partners.Tap). It is advisory: AcquireShare
// still decides for a call it passes. A true answer counts as the limit
// refusing, for ShedBaseline.
func (l *CellLimit) WouldRefuse(mine, active int64) bool {
	if l == nil || l.cfg.Disabled {
		return false
	}
	if refusesShare(l.inflight.Load(), l.limit.Load(), mine, active) {
		l.early.Add(1)
		return true
	}
	return false
}

// RouterBusy is what a partner is told for a request refused at the
// GTR-wide limit.
const RouterBusy = "the router is at its concurrency limit"

// MinRetryAfter and MaxRetryAfter bound RetryAfter.
const (
	MinRetryAfter = 100 * time.Millisecond
	MaxRetryAfter = 5 * time.Second
)

// RetryAfter is the retry hint of a request refused at this limit: the
// average latency of the attempts it served in its last window, within
// [MinRetryAfter, MaxRetryAfter] (MinRetryAfter before any, and for a nil
// or disabled limit). In about that time the work in flight turns over
// and frees its slots; a retry sooner mostly meets the same full limit,
// and under overload a fixed short hint multiplied the refusals a
// well-behaved client (pkg/client honours the hint) caused.
func (l *CellLimit) RetryAfter() time.Duration {
	if l == nil || l.cfg.Disabled {
		return MinRetryAfter
	}
	return min(max(time.Duration(l.recent.Load()), MinRetryAfter), MaxRetryAfter)
}

// Outcome of one attempt, for the limit.
type Outcome int

// Outcomes: Served (the cell answered: its latency is a sample), Dropped
// (it timed out or failed: a sign of overload or trouble, the limit falls),
// Ignored (no information about the cell's load, such as an answer about
// the request itself).
const (
	Served Outcome = iota
	Dropped
	Ignored
)

// Release returns the slot of an attempt that took latency and ended with
// outcome. Every successful Acquire is followed by one Release.
func (l *CellLimit) Release(latency time.Duration, o Outcome) {
	if l == nil || l.cfg.Disabled {
		return
	}
	l.inflight.Add(-1)
	if o == Ignored {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if o == Served {
		l.served++
		l.sum += latency
	} else {
		l.dropped++
	}
	l.samples++
	if l.samples < l.cfg.Window {
		return
	}
	l.update()
}

// update recomputes the limit from the window of samples. Called with mu
// held. The gradient is the tolerated latency over the recent one, clamped
// to [0.5, 1]: at or under tolerance the limit grows by a queue allowance
// of √limit (at least 2), used or not (a limit held while unused, as
// gradient limiters do, would stand at its initial 32 when a frozen cell
// holds more transactions than that, and the GTR-wide one would shed
// partners a healthy cell could serve); above it, the limit shrinks in proportion
// (smoothed, so that one noisy window does not swing it). A window in which
// more than a tenth of the attempts timed out or failed cuts the limit by a
// quarter (AIMD's multiplicative decrease); a dead cell is health's to
// eject, not this limit's to starve.
func (l *CellLimit) update() {
	now := l.cfg.Now()
	dt := max(0, now.Sub(l.last).Seconds())
	l.last = now
	refused := l.shed.Load() + l.early.Load()
	shedding := refused != l.refused
	l.refused = refused
	cur := l.estimated
	next := cur
	short := 0.0
	if l.served > 0 {
		short = (l.sum / time.Duration(l.served)).Seconds()
		l.recent.Store(int64(l.sum / time.Duration(l.served)))
		if l.long == 0 {
			l.long = short
		}
	}
	switch {
	case l.dropped*10 > l.samples:
		next = cur * 0.75
	case short > 0:
		gradient := math.Max(0.5, math.Min(1, l.cfg.Tolerance*l.long/short))
		next = cur*gradient + math.Max(2, math.Sqrt(cur))
		if next < cur {
			next = 0.5*cur + 0.5*next
		}
		// The long-term average follows slowly, and faster down than up,
		// so that a queue does not become the new normal: by a share per
		// window, or by the time since the last update (Baseline).
		a := 1 / float64(l.cfg.LongWindows)
		if b := l.cfg.Baseline; b > 0 {
			if shedding && l.cfg.ShedBaseline > 0 {
				b = l.cfg.ShedBaseline
			}
			a = 1 - math.Exp(-dt/b.Seconds())
		}
		if short < l.long {
			a = min(1, 4*a)
			if l.cfg.Baseline > 0 {
				a = 1 - math.Exp(-8*dt/l.cfg.Baseline.Seconds())
			}
		}
		l.long += a * (short - l.long)
	}
	l.estimated = math.Min(float64(l.cfg.MaxLimit), math.Max(float64(l.cfg.MinLimit), next))
	l.limit.Store(int64(math.Round(l.estimated)))
	l.samples, l.served, l.sum, l.dropped = 0, 0, 0, 0
}

// Limit is the cell's current concurrency limit.
func (l *CellLimit) Limit() int {
	if l == nil {
		return 0
	}
	return int(l.limit.Load())
}

// InFlight is the number of attempts holding a slot.
func (l *CellLimit) InFlight() int {
	if l == nil {
		return 0
	}
	return int(l.inflight.Load())
}

// Shed is the number of attempts refused so far.
func (l *CellLimit) Shed() int64 {
	if l == nil {
		return 0
	}
	return l.shed.Load()
}
