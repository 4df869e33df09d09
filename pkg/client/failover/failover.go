// Package failover decides which of a partner's two access points (a
// primary and a backup, standing for two cities) a call should go to, by
// the WeChat Pay cross-city rules: a success-rate window over the
// primary's results, probes of the primary, a split that keeps a small
// share of traffic on the backup to keep it proven, one retry on the other
// access point, and failback, plus flap damping and an event for every
// switch.
//
// It is a state machine with no I/O, no goroutines and no clock of its
// own, in the manner of etcd's raft: the driver (pkg/client) feeds it
// outcomes and probe results with the time they happened, asks it where to
// send a call, performs the probes it says are due, and reads the switch
// events it produced. Every decision is a pure function of those inputs,
// so the rules are tested with a fake clock. A Machine is not safe for
// concurrent use; the driver serialises calls into it.
package failover

import (
	"errors"
	"fmt"
	"time"
)

// Endpoint is an access point by its place in the ordered list: the
// primary first, then the backup.
type Endpoint int

// The two access points.
const (
	Primary Endpoint = 0
	Backup  Endpoint = 1
)

func (e Endpoint) String() string {
	switch e {
	case Primary:
		return "primary"
	case Backup:
		return "backup"
	}
	return fmt.Sprintf("endpoint-%d", int(e))
}

// Strategy names the rules that move the client between access points.
type Strategy string

const (
	// Probe: every ProbeInterval, ProbeCount health probes of the primary
	// in a row; ProbeFailures or more failures switch to the backup,
	// fewer switch back to the primary (the guide's "probe switching").
	Probe Strategy = "probe"
	// SuccessRate: every EvalInterval, the primary's last WindowSize
	// results within WindowAge; below MinSuccessPercent the backup, at or
	// above it (or with too few results to judge) the primary (the
	// guide's "success-rate switching"). While on the backup the primary
	// gets no traffic, so its failures age out of the window and the
	// client tries it again WindowAge after them.
	SuccessRate Strategy = "success-rate"
	// Both: either rule switches to the backup; a passing probe round
	// switches back (the primary's window only holds stale results while
	// the backup serves). The default.
	Both Strategy = "both"
)

// Config holds every number of the rules. Zero values take the defaults
// in brackets, which are the guide's where it has one.
type Config struct {
	// Endpoints is how many access points there are: 1 (no failover:
	// every call goes to the primary) or 2. [2]
	Endpoints int
	// Strategy [Both].
	Strategy Strategy

	// WindowSize results of the primary, no older than WindowAge, are
	// judged every EvalInterval [100, 10m, 1m]. Below MinSuccessPercent
	// (1..100) [90] the window is failing. A window with fewer than
	// MinResults [10] results is not judged failing (one failed call of
	// one is not 0%): beyond the guide.
	WindowSize        int
	WindowAge         time.Duration
	EvalInterval      time.Duration
	MinSuccessPercent int
	MinResults        int

	// The dynamic rule of the guide's cross-city switching: over the
	// primary's results of the last FastWindow [5s], more than
	// FastFailPercent (1..100) [50] failed, with at least FastMinResults
	// [10] results (so that two failures of three are not a verdict),
	// moves the client to the backup at once, without waiting for the
	// next evaluation. It runs with the success-rate window (strategies
	// success-rate and both); returning is those strategies' way.
	FastWindow      time.Duration
	FastFailPercent int
	FastMinResults  int

	// Every ProbeInterval [1m] the driver probes the primary ProbeCount
	// [5] times in a row; ProbeFailures [3] or more failed probes fail
	// the round.
	ProbeInterval time.Duration
	ProbeCount    int
	ProbeFailures int

	// SplitRatio (1..100) [99]: while on the primary, a call whose roll
	// (0..99) is below it goes to the primary, the others to the backup,
	// so that about 1% keeps the backup proven. 100 sends everything to
	// the primary. While on the backup everything goes to the backup.
	SplitRatio int

	// At most MaxSwitches [4] switches in any DampWindow [10m]: beyond
	// the guide. A switch back to the primary also needs room for the
	// switch away from it again, so damping leaves the client on the
	// backup, never stuck on a failing primary.
	MaxSwitches int
	DampWindow  time.Duration
}

// Defaults of Config.
const (
	DefaultStrategy          = Both
	DefaultWindowSize        = 100
	DefaultWindowAge         = 10 * time.Minute
	DefaultEvalInterval      = time.Minute
	DefaultMinSuccessPercent = 90
	DefaultMinResults        = 10
	DefaultFastWindow        = 5 * time.Second
	DefaultFastFailPercent   = 50
	DefaultFastMinResults    = 10
	DefaultProbeInterval     = time.Minute
	DefaultProbeCount        = 5
	DefaultProbeFailures     = 3
	DefaultSplitRatio        = 99
	DefaultMaxSwitches       = 4
	DefaultDampWindow        = 10 * time.Minute
)

// ErrInvalidConfig wraps every error of New.
var ErrInvalidConfig = errors.New("failover: invalid config")

// WithDefaults returns c with its zero values replaced by the defaults.
func (c Config) WithDefaults() Config {
	setInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	setDur := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	setInt(&c.Endpoints, 2)
	if c.Strategy == "" {
		c.Strategy = DefaultStrategy
	}
	setInt(&c.WindowSize, DefaultWindowSize)
	setDur(&c.WindowAge, DefaultWindowAge)
	setDur(&c.EvalInterval, DefaultEvalInterval)
	setInt(&c.MinSuccessPercent, DefaultMinSuccessPercent)
	setInt(&c.MinResults, DefaultMinResults)
	setDur(&c.FastWindow, DefaultFastWindow)
	setInt(&c.FastFailPercent, DefaultFastFailPercent)
	setInt(&c.FastMinResults, DefaultFastMinResults)
	setDur(&c.ProbeInterval, DefaultProbeInterval)
	setInt(&c.ProbeCount, DefaultProbeCount)
	setInt(&c.ProbeFailures, DefaultProbeFailures)
	setInt(&c.SplitRatio, DefaultSplitRatio)
	setInt(&c.MaxSwitches, DefaultMaxSwitches)
	setDur(&c.DampWindow, DefaultDampWindow)
	return c
}

func (c Config) validate() error {
	switch {
	case c.Endpoints < 1 || c.Endpoints > 2:
		return fmt.Errorf("endpoints %d: want 1 or 2 (a primary and a backup)", c.Endpoints)
	case c.Strategy != Probe && c.Strategy != SuccessRate && c.Strategy != Both:
		return fmt.Errorf("strategy %q: want %q, %q or %q", c.Strategy, Probe, SuccessRate, Both)
	case c.WindowSize < 1 || c.MinResults < 1 || c.MinResults > c.WindowSize:
		return fmt.Errorf("window size %d, min results %d: want 1 <= min results <= size", c.WindowSize, c.MinResults)
	case c.MinSuccessPercent < 1 || c.MinSuccessPercent > 100:
		return fmt.Errorf("min success percent %d: want 1..100", c.MinSuccessPercent)
	case c.FastFailPercent < 1 || c.FastFailPercent > 100:
		return fmt.Errorf("fast fail percent %d: want 1..100", c.FastFailPercent)
	case c.FastMinResults < 1 || c.FastMinResults > c.WindowSize:
		return fmt.Errorf("fast min results %d, window size %d: want 1 <= fast min results <= size", c.FastMinResults, c.WindowSize)
	case c.WindowAge < 0 || c.EvalInterval < 0 || c.ProbeInterval < 0 || c.DampWindow < 0 || c.FastWindow < 0:
		return errors.New("negative duration")
	case c.ProbeCount < 1 || c.ProbeFailures < 1 || c.ProbeFailures > c.ProbeCount:
		return fmt.Errorf("probe count %d, failures %d: want 1 <= failures <= count", c.ProbeCount, c.ProbeFailures)
	case c.SplitRatio < 1 || c.SplitRatio > 100:
		return fmt.Errorf("split ratio %d: want 1..100", c.SplitRatio)
	case c.MaxSwitches < 2:
		return fmt.Errorf("max switches %d: want at least 2 (away and back)", c.MaxSwitches)
	}
	return nil
}

// Event is one switch of the current access point.
type Event struct {
	At       time.Time
	From, To Endpoint
	// Reason says which rule switched, with its numbers: "probe: 5 of 5
	// failed", "success rate 41% of 100 < 90%".
	Reason string
}

// Stats are the machine's counters.
type Stats struct {
	Current  Endpoint
	Switches int // switches made
	Damped   int // switches the damping held back
	// ProbeRounds and EvalRounds count the rounds judged.
	ProbeRounds, EvalRounds int
}

// result is one outcome of a call to the primary.
type result struct {
	at time.Time
	ok bool
}

// Machine is the failover state of one client.
type Machine struct {
	cfg     Config
	current Endpoint

	window []result // ring of the primary's last WindowSize results
	next   int      // where the next result goes once the ring is full

	nextEval, nextProbe time.Time
	probing             bool // a round is out; the driver reports it

	switches []time.Time // times of recent switches, for damping
	events   []Event     // produced, not yet read
	stats    Stats
}

// New returns a machine on the primary, with its first evaluation and
// probe round one interval after now.
func New(cfg Config, now time.Time) (*Machine, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return &Machine{
		cfg:       cfg,
		window:    make([]result, 0, cfg.WindowSize),
		nextEval:  now.Add(cfg.EvalInterval),
		nextProbe: now.Add(cfg.ProbeInterval),
	}, nil
}

// Config returns the configuration in force, defaults filled in.
func (m *Machine) Config() Config { return m.cfg }

// Current is the access point calls go to (but for the split).
func (m *Machine) Current() Endpoint { return m.current }

// Pick returns the access point for a new call. roll is a uniform random
// number in 0..99 that the driver draws (the machine has no randomness of
// its own): while on the primary, rolls at or above SplitRatio go to the
// backup.
func (m *Machine) Pick(roll int) Endpoint {
	if m.cfg.Endpoints == 1 || m.current == Backup {
		return m.current
	}
	if roll >= m.cfg.SplitRatio {
		return Backup
	}
	return Primary
}

// Other is where the one retry of a call that failed on ep goes, and
// false when there is no other access point.
func (m *Machine) Other(ep Endpoint) (Endpoint, bool) {
	if m.cfg.Endpoints == 1 {
		return ep, false
	}
	return 1 - ep, true
}

// Observe records the outcome of a call to ep at now: ok when the access
// point answered (an answer about the request itself is an answer), not ok
// on a connect or read timeout or UNAVAILABLE. Only the primary's results
// are judged.
func (m *Machine) Observe(now time.Time, ep Endpoint, ok bool) {
	if ep != Primary || m.cfg.Strategy == Probe {
		return
	}
	r := result{at: now, ok: ok}
	if len(m.window) < m.cfg.WindowSize {
		m.window = append(m.window, r)
	} else {
		m.window[m.next] = r
		m.next = (m.next + 1) % m.cfg.WindowSize
	}
	if !ok && m.current == Primary && m.cfg.Endpoints > 1 {
		m.fastTrip(now)
	}
}

// fastTrip moves to the backup when more than FastFailPercent of the
// primary's results within FastWindow failed, with FastMinResults of them
// at least.
func (m *Machine) fastTrip(now time.Time) {
	oldest := now.Add(-m.cfg.FastWindow)
	failed, total := 0, 0
	for _, r := range m.window {
		if r.at.Before(oldest) {
			continue
		}
		total++
		if !r.ok {
			failed++
		}
	}
	if total >= m.cfg.FastMinResults && failed*100 > m.cfg.FastFailPercent*total {
		m.switchTo(now, Backup, fmt.Sprintf("fast: %d of %d failed within %v, over %d%%", failed, total, m.cfg.FastWindow, m.cfg.FastFailPercent))
	}
}

// Tick advances the machine to now and judges the success-rate window if
// an evaluation is due. Call it before Pick and ProbeDue; it is cheap when
// nothing is due.
func (m *Machine) Tick(now time.Time) {
	if m.cfg.Endpoints == 1 || m.cfg.Strategy == Probe || now.Before(m.nextEval) {
		return
	}
	for !m.nextEval.After(now) {
		m.nextEval = m.nextEval.Add(m.cfg.EvalInterval)
	}
	m.stats.EvalRounds++
	ok, total := m.count(now)
	if total >= m.cfg.MinResults && ok*100 < m.cfg.MinSuccessPercent*total {
		m.switchTo(now, Backup, fmt.Sprintf("success rate %d%% of %d < %d%%", ok*100/total, total, m.cfg.MinSuccessPercent))
		return
	}
	if m.cfg.Strategy == SuccessRate {
		reason := fmt.Sprintf("success rate %d%% of %d >= %d%%", pct(ok, total), total, m.cfg.MinSuccessPercent)
		if total < m.cfg.MinResults {
			reason = fmt.Sprintf("%d results of the primary within %v, fewer than %d: nothing against it", total, m.cfg.WindowAge, m.cfg.MinResults)
		}
		m.switchTo(now, Primary, reason)
	}
}

func pct(ok, total int) int {
	if total == 0 {
		return 100
	}
	return ok * 100 / total
}

// count returns the successes and the results of the window no older than
// WindowAge at now.
func (m *Machine) count(now time.Time) (ok, total int) {
	oldest := now.Add(-m.cfg.WindowAge)
	for _, r := range m.window {
		if r.at.Before(oldest) {
			continue
		}
		total++
		if r.ok {
			ok++
		}
	}
	return ok, total
}

// ProbeDue reports whether the driver should start a probe round of
// ProbeCount probes of the primary now. It says yes once per ProbeInterval
// and not again until ProbeResult reports the round.
func (m *Machine) ProbeDue(now time.Time) bool {
	if m.cfg.Endpoints == 1 || m.cfg.Strategy == SuccessRate || m.probing || now.Before(m.nextProbe) {
		return false
	}
	m.probing = true
	return true
}

// ProbeResult reports the round ProbeDue asked for, finished at now, in
// which failed of ProbeCount probes failed. The next round is due one
// ProbeInterval after now.
func (m *Machine) ProbeResult(now time.Time, failed int) {
	if !m.probing {
		return
	}
	m.probing = false
	m.nextProbe = now.Add(m.cfg.ProbeInterval)
	m.stats.ProbeRounds++
	reason := fmt.Sprintf("probe: %d of %d failed", failed, m.cfg.ProbeCount)
	if failed >= m.cfg.ProbeFailures {
		m.switchTo(now, Backup, reason)
		return
	}
	m.switchTo(now, Primary, reason)
}

// switchTo makes to current unless it is already, or damping holds it
// back.
func (m *Machine) switchTo(now time.Time, to Endpoint, reason string) {
	if to == m.current {
		return
	}
	since := now.Add(-m.cfg.DampWindow)
	recent := m.switches[:0]
	for _, t := range m.switches {
		if t.After(since) {
			recent = append(recent, t)
		}
	}
	m.switches = recent
	room := m.cfg.MaxSwitches - len(m.switches)
	if room < 1 || (to == Primary && room < 2) {
		m.stats.Damped++
		return
	}
	m.switches = append(m.switches, now)
	if to == Primary {
		// What the window holds was judged before the switch back; the
		// primary starts afresh.
		m.window, m.next = m.window[:0], 0
	}
	m.events = append(m.events, Event{At: now, From: m.current, To: to, Reason: reason})
	m.current = to
	m.stats.Switches++
}

// Events returns the switches made since the last call, oldest first.
func (m *Machine) Events() []Event {
	ev := m.events
	m.events = nil
	return ev
}

// Stats returns the counters.
func (m *Machine) Stats() Stats {
	s := m.stats
	s.Current = m.current
	return s
}
