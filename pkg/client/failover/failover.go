// Package failover decides which of a partner's access points a call
// should go to, by the WeChat Pay cross-city rules: a success-rate window
// over the preferred access point's results, probes of it, a dynamic
// (fast) rule over the last few seconds' results, a split that keeps a
// small share of traffic on the next access point in line to keep it
// proven, one retry on another access point, and failback, plus flap
// damping and an event for every switch.
//
// In its first form (New) there are two access points, a primary and a
// backup, standing for two cities. With their sites (NewSites) there are
// up to MaxEndpoints, several per site, and the partner's home site: the
// preferred access point is the first listed of the home site, and every
// move away from one goes to the best other, ranked the same way
// everywhere: access points not known to be failing first, then those of
// the home site, then those with the fewest failures within FastWindow,
// then the quickest to answer (by classes of answer time, so that a
// millisecond decides nothing), then list order. So a failing home access
// point hands over to another of the home site before anything crosses
// sites, a client crosses only when the home site's access points are
// failing, and among equals it goes where answers come back soonest (the
// guide's connect time). While it is across, the probe rounds ask every
// access point of the home site, so that it comes home to any of them
// that answers, not only to the preferred one. Two access points in two
// sites behave exactly as a primary and a backup.
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
	"math/bits"
	"slices"
	"time"
)

// Endpoint is an access point by its place in the ordered list: with New,
// the primary first, then the backup.
type Endpoint int

// The two access points of New.
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

// MaxEndpoints is how many access points NewSites takes: several per
// site, as the partners' guide gives them.
const MaxEndpoints = 6

// Strategy names the rules that move the client between access points.
type Strategy string

// Below, "the preferred" access point is the primary of New, or the first
// listed of the home site of NewSites; "the best other" is the first of
// the others in the machine's ranking (see the package comment).
const (
	// Probe: every ProbeInterval, ProbeCount health probes of the
	// preferred access point in a row; ProbeFailures or more failures
	// switch to the best other, fewer switch back to the preferred (the
	// guide's "probe switching").
	Probe Strategy = "probe"
	// SuccessRate: every EvalInterval, the preferred's last WindowSize
	// results within WindowAge; below MinSuccessPercent the best other,
	// at or above it (or with too few results to judge) the preferred
	// (the guide's "success-rate switching"). While away the preferred
	// gets no traffic, so its failures age out of the window and the
	// client tries it again WindowAge after them. While away, the
	// current access point's own window is judged too, and a failing one
	// hands over to the best other but the preferred, if there is one.
	SuccessRate Strategy = "success-rate"
	// Both: either rule switches away from the preferred; a passing probe
	// round switches back (the preferred's window only holds stale
	// results while another serves). The default.
	Both Strategy = "both"
)

// Rule names the rule that made a switch.
type Rule string

// The rules of Event.Rule.
const (
	RuleProbe       Rule = "probe"
	RuleSuccessRate Rule = "success-rate"
	RuleFast        Rule = "fast"
)

// Config holds every number of the rules. Zero values take the defaults
// in brackets, which are the guide's where it has one.
type Config struct {
	// Endpoints is how many access points there are. With New: 1 (no
	// failover: every call goes to the primary) or 2 [2]. With NewSites:
	// the number of sites given (0 is taken to mean it).
	Endpoints int
	// Strategy [Both].
	Strategy Strategy

	// WindowSize results of the preferred access point, no older than
	// WindowAge, are judged every EvalInterval [100, 10m, 1m]. Below
	// MinSuccessPercent (1..100) [90] the window is failing. A window
	// with fewer than MinResults [10] results is not judged failing (one
	// failed call of one is not 0%): beyond the guide. Every access point
	// keeps its last WindowSize results.
	WindowSize        int
	WindowAge         time.Duration
	EvalInterval      time.Duration
	MinSuccessPercent int
	MinResults        int

	// The dynamic rule of the guide's cross-city switching: over the
	// current access point's results of the last FastWindow [5s], more
	// than FastFailPercent (1..100) [50] failed, with at least
	// FastMinResults [10] results (so that two failures of three are not
	// a verdict), moves the client to the best other access point at
	// once, without waiting for the next evaluation (from an access point
	// other than the preferred, to the best other but the preferred, if
	// one is not failing too). It runs with the success-rate window
	// (strategies success-rate and both); returning is those strategies'
	// way. The same numbers say which access points are known to be
	// failing when ranking them, whatever the strategy.
	FastWindow      time.Duration
	FastFailPercent int
	FastMinResults  int

	// Every ProbeInterval [1m] the driver probes the preferred access
	// point ProbeCount [5] times in a row; ProbeFailures [3] or more
	// failed probes fail the round.
	ProbeInterval time.Duration
	ProbeCount    int
	ProbeFailures int

	// SplitRatio (1..100) [99]: while on the preferred access point, a
	// call whose roll (0..99) is below it goes there, the others to the
	// best other, so that about 1% keeps the next in line proven. 100
	// sends everything to the preferred. While away everything goes to
	// the current access point.
	SplitRatio int

	// At most MaxSwitches [4] switches in any DampWindow [10m]: beyond
	// the guide. A switch back to the preferred access point also needs
	// room for the switch away from it again, so damping leaves the
	// client away, never stuck on a failing preferred one. Nor on any
	// failing one: a switch off an access point over the fast rule's
	// threshold, to one that is not, is never held back (damping stops
	// flapping between access points that answer, not an escape).
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

// ErrInvalidConfig wraps every error of New and NewSites.
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

// validate checks every number of c but Endpoints, which New and
// NewSites check each against its own list.
func (c Config) validate() error {
	switch {
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
	// Rule is the rule that switched.
	Rule Rule
	// Reason says which rule switched, with its numbers: "probe: 5 of 5
	// failed", "success rate 41% of 100 < 90%".
	Reason string
}

// Stats are the machine's counters.
type Stats struct {
	Current Endpoint
	// Preferred is the access point the client returns to: the primary,
	// or the first listed of the home site.
	Preferred Endpoint
	Switches  int // switches made
	Damped    int // switches the damping held back
	// ProbeRounds and EvalRounds count the rounds judged.
	ProbeRounds, EvalRounds int
}

// result is one outcome of a call to an access point.
type result struct {
	at time.Time
	ok bool
}

// record is a ring of one access point's last WindowSize results, and
// the moving average of its answer time.
type record struct {
	results []result
	next    int // where the next result goes once the ring is full
	// took is the moving average of the time its answered calls took
	// (each new one a quarter of it); 0 until one is reported.
	took time.Duration
}

// addTook folds an answered call's time d into the average.
func (rec *record) addTook(d time.Duration) {
	if rec.took == 0 {
		rec.took = d
		return
	}
	rec.took += (d - rec.took) / 4
}

// tookClass is the class of answer time ranking compares: 0 below 2ms (or
// not known yet: an access point never heard from is not taken for a slow
// one, so the split's share finds out), then one class per doubling. A
// class, not the time, so that access points answering alike rank by list
// order, not by the noise of their last calls.
func tookClass(d time.Duration) int {
	return bits.Len64(uint64(d / (2 * time.Millisecond)))
}

// add puts r in the ring of size results.
func (rec *record) add(r result, size int) {
	if len(rec.results) < size {
		rec.results = append(rec.results, r)
		return
	}
	rec.results[rec.next] = r
	rec.next = (rec.next + 1) % size
}

// since returns the successes and the results of the ring at or after
// oldest.
func (rec *record) since(oldest time.Time) (ok, total int) {
	for _, r := range rec.results {
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

// Machine is the failover state of one client.
type Machine struct {
	cfg       Config
	sites     []string // the site of each access point; all "" from New
	home      string   // the home site; "" from New
	preferred Endpoint // the first listed of the home site
	current   Endpoint

	recs []record  // each access point's last results
	now  time.Time // the latest time the machine was told

	nextEval, nextProbe time.Time
	probing             bool       // a round is out; the driver reports it
	targets             []Endpoint // the round's access points (ProbeTargets)

	switches []time.Time // times of recent switches, for damping
	events   []Event     // produced, not yet read
	stats    Stats
}

// New returns a machine over cfg.Endpoints access points (1 or 2: a
// primary and a backup), on the primary, with its first evaluation and
// probe round one interval after now.
func New(cfg Config, now time.Time) (*Machine, error) {
	cfg = cfg.WithDefaults()
	if cfg.Endpoints < 1 || cfg.Endpoints > 2 {
		return nil, fmt.Errorf("%w: endpoints %d: want 1 or 2 (a primary and a backup); more need their sites (NewSites)", ErrInvalidConfig, cfg.Endpoints)
	}
	return build(cfg, make([]string, cfg.Endpoints), "", now)
}

// NewSites returns a machine over len(sites) access points (1 to
// MaxEndpoints), sites[i] the site of the i-th in the partner's list, for
// a partner whose home site is home, one of them. It starts on the
// preferred access point, the first listed of the home site, with its
// first evaluation and probe round one interval after now.
// cfg.Endpoints is 0 or len(sites). Sites are labels here: the driver
// checks their form.
func NewSites(cfg Config, sites []string, home string, now time.Time) (*Machine, error) {
	if cfg.Endpoints == 0 {
		cfg.Endpoints = len(sites)
	}
	cfg = cfg.WithDefaults()
	switch {
	case len(sites) < 1 || len(sites) > MaxEndpoints:
		return nil, fmt.Errorf("%w: sites: %d access points, want 1 to %d", ErrInvalidConfig, len(sites), MaxEndpoints)
	case cfg.Endpoints != len(sites):
		return nil, fmt.Errorf("%w: endpoints %d: %d sites given", ErrInvalidConfig, cfg.Endpoints, len(sites))
	case !slices.Contains(sites, home):
		return nil, fmt.Errorf("%w: home site %q: no access point is in it (sites %q)", ErrInvalidConfig, home, sites)
	}
	return build(cfg, slices.Clone(sites), home, now)
}

// build validates cfg and returns a machine on the first access
// point of the home site.
func build(cfg Config, sites []string, home string, now time.Time) (*Machine, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	pref := Endpoint(slices.Index(sites, home))
	m := &Machine{
		cfg:       cfg,
		sites:     sites,
		home:      home,
		preferred: pref,
		current:   pref,
		recs:      make([]record, len(sites)),
		now:       now,
		nextEval:  now.Add(cfg.EvalInterval),
		nextProbe: now.Add(cfg.ProbeInterval),
	}
	return m, nil
}

// Config returns the configuration in force, defaults filled in.
func (m *Machine) Config() Config { return m.cfg }

// Current is the access point calls go to (but for the split).
func (m *Machine) Current() Endpoint { return m.current }

// Preferred is the access point the client starts on, probes while away
// from it, and returns to: the primary, or the first listed of the home
// site.
func (m *Machine) Preferred() Endpoint { return m.preferred }

// Site returns the site of ep ("" from New, or for an ep out of range).
func (m *Machine) Site(ep Endpoint) string {
	if !m.valid(ep) {
		return ""
	}
	return m.sites[ep]
}

// valid reports whether ep is one of the machine's access points.
func (m *Machine) valid(ep Endpoint) bool { return ep >= 0 && int(ep) < len(m.sites) }

// seen moves the machine's idea of now forward to now (never back: the
// driver's goroutines read the clock each on its own).
func (m *Machine) seen(now time.Time) {
	if now.After(m.now) {
		m.now = now
	}
}

// Pick returns the access point for a new call. roll is a uniform random
// number in 0..99 that the driver draws (the machine has no randomness of
// its own): while on the preferred access point, rolls at or above
// SplitRatio go to the best other.
func (m *Machine) Pick(roll int) Endpoint {
	if len(m.sites) == 1 || m.current != m.preferred {
		return m.current
	}
	if roll >= m.cfg.SplitRatio {
		best, _ := m.best(m.preferred, false)
		return best
	}
	return m.preferred
}

// Other is where the one retry of a call that failed on ep goes, the best
// other access point as of the latest time the machine was told, and
// false when there is no other access point.
func (m *Machine) Other(ep Endpoint) (Endpoint, bool) {
	if len(m.sites) == 1 {
		return ep, false
	}
	return m.best(ep, false)
}

// best returns the first in the ranking of the access points other than
// from (and other than the preferred one when butPreferred), false when
// there is none: those not known to be failing first, then those of the
// home site, then those with the fewest failures within FastWindow, then
// those of the lowest class of answer time, then list order.
func (m *Machine) best(from Endpoint, butPreferred bool) (Endpoint, bool) {
	type rank struct {
		down, otherSite bool
		failures, slow  int
	}
	better := func(a, b rank) bool {
		switch {
		case a.down != b.down:
			return !a.down
		case a.otherSite != b.otherSite:
			return !a.otherSite
		case a.failures != b.failures:
			return a.failures < b.failures
		}
		return a.slow < b.slow
	}
	found, bestEp, bestRank := false, from, rank{}
	for i := range m.sites {
		ep := Endpoint(i)
		if ep == from || butPreferred && ep == m.preferred {
			continue
		}
		failed, _, over := m.fastFailing(ep)
		r := rank{down: over || m.away(ep), otherSite: m.sites[i] != m.home, failures: failed, slow: tookClass(m.recs[ep].took)}
		if !found || better(r, bestRank) {
			found, bestEp, bestRank = true, ep, r
		}
	}
	return bestEp, found
}

// recent returns ep's failures and results within FastWindow of the
// latest time the machine was told.
func (m *Machine) recent(ep Endpoint) (failed, total int) {
	ok, total := m.recs[ep].since(m.now.Add(-m.cfg.FastWindow))
	return total - ok, total
}

// fastFailing returns ep's failures and results within FastWindow, and
// whether they are over the fast rule's threshold.
func (m *Machine) fastFailing(ep Endpoint) (failed, total int, over bool) {
	failed, total = m.recent(ep)
	return failed, total, total >= m.cfg.FastMinResults && failed*100 > m.cfg.FastFailPercent*total
}

// away reports whether ep is the preferred access point while the client
// is away from it: a rule found it failing and none has found it well
// again.
func (m *Machine) away(ep Endpoint) bool {
	return ep == m.preferred && m.current != m.preferred
}

// down reports whether ep is known to be failing: over the fast rule's
// threshold, or the preferred access point while the client is away from
// it.
func (m *Machine) down(ep Endpoint) bool {
	_, _, over := m.fastFailing(ep)
	return over || m.away(ep)
}

// AnswerTime returns the moving average of the time ep's answered calls
// took, 0 before the first (or for an ep out of range).
func (m *Machine) AnswerTime(ep Endpoint) time.Duration {
	if !m.valid(ep) {
		return 0
	}
	return m.recs[ep].took
}

// Observe records the outcome of a call to ep at now: ok when the access
// point answered (an answer about the request itself is an answer), not ok
// on a connect or read timeout or UNAVAILABLE. Every access point's
// results rank it; the preferred one's, and the current one's while away
// from it, are judged by the success-rate window at each evaluation; a
// failure of the current one's is judged by the fast rule at once.
func (m *Machine) Observe(now time.Time, ep Endpoint, ok bool) {
	m.ObserveTimed(now, ep, ok, 0)
}

// ObserveTimed is Observe with the time the call took: an answered call's
// time (connect included) goes into ep's average answer time, which ranks
// access points that are otherwise alike. 0 says nothing of the time.
func (m *Machine) ObserveTimed(now time.Time, ep Endpoint, ok bool, took time.Duration) {
	if !m.valid(ep) {
		return
	}
	m.seen(now)
	if ok && took > 0 {
		m.recs[ep].addTook(took)
	}
	m.recs[ep].add(result{at: now, ok: ok}, m.cfg.WindowSize)
	if !ok && ep == m.current && len(m.sites) > 1 && m.cfg.Strategy != Probe {
		m.fastTrip(now, ep)
	}
}

// fastTrip moves away from ep, the current access point, when more than
// FastFailPercent of its results within FastWindow failed, with
// FastMinResults of them at least.
func (m *Machine) fastTrip(now time.Time, ep Endpoint) {
	failed, total, over := m.fastFailing(ep)
	if over {
		m.leave(now, ep, RuleFast, fmt.Sprintf("fast: %d of %d failed within %v, over %d%%", failed, total, m.cfg.FastWindow, m.cfg.FastFailPercent))
	}
}

// leave moves the client off from, the current access point, which a
// rule found failing: from the preferred to the best other, whatever its
// record (as from a failing primary to the backup); from another, to the
// best other but the preferred (whose return is otherwise the probes' and
// the success rate's), unless there is none or it is failing too; then to
// the preferred if it answers the calls that fail over to it (with two
// access points, a failing backup hands back to a primary that serves its
// retries, without waiting for a probe round); else nowhere.
func (m *Machine) leave(now time.Time, from Endpoint, rule Rule, reason string) {
	if from != m.current {
		return
	}
	if from == m.preferred {
		to, _ := m.best(from, false)
		m.switchTo(now, to, rule, reason)
		return
	}
	if to, ok := m.best(from, true); ok && !m.down(to) {
		m.switchTo(now, to, rule, reason)
		return
	}
	if m.answering(m.preferred) {
		m.switchTo(now, m.preferred, rule, reason+"; the "+m.preferredName()+" answers")
	}
}

// answering reports whether ep answered calls within FastWindow and is
// not over the fast rule's threshold.
func (m *Machine) answering(ep Endpoint) bool {
	failed, total, over := m.fastFailing(ep)
	return total > failed && !over
}

// Tick advances the machine to now and judges the success-rate window if
// an evaluation is due. Call it before Pick and ProbeDue; it is cheap when
// nothing is due.
func (m *Machine) Tick(now time.Time) {
	m.seen(now)
	if len(m.sites) == 1 || m.cfg.Strategy == Probe || now.Before(m.nextEval) {
		return
	}
	for !m.nextEval.After(now) {
		m.nextEval = m.nextEval.Add(m.cfg.EvalInterval)
	}
	m.stats.EvalRounds++
	ok, total := m.count(m.preferred, now)
	switch {
	case total >= m.cfg.MinResults && ok*100 < m.cfg.MinSuccessPercent*total:
		m.leave(now, m.preferred, RuleSuccessRate, fmt.Sprintf("success rate %d%% of %d < %d%%", ok*100/total, total, m.cfg.MinSuccessPercent))
	case m.cfg.Strategy == SuccessRate:
		reason := fmt.Sprintf("success rate %d%% of %d >= %d%%", pct(ok, total), total, m.cfg.MinSuccessPercent)
		if total < m.cfg.MinResults {
			reason = fmt.Sprintf("%d results of the %s within %v, fewer than %d: nothing against it", total, m.preferredName(), m.cfg.WindowAge, m.cfg.MinResults)
		}
		m.switchTo(now, m.preferred, RuleSuccessRate, reason)
	}
	if m.current == m.preferred {
		return
	}
	// Away: the current access point's own window.
	ok, total = m.count(m.current, now)
	if total >= m.cfg.MinResults && ok*100 < m.cfg.MinSuccessPercent*total {
		m.leave(now, m.current, RuleSuccessRate, fmt.Sprintf("success rate %d%% of %d < %d%%", ok*100/total, total, m.cfg.MinSuccessPercent))
	}
}

// preferredName names the preferred access point in reasons: "primary"
// without sites, as it always has.
func (m *Machine) preferredName() string {
	if m.home == "" {
		return "primary"
	}
	return "preferred access point"
}

func pct(ok, total int) int {
	if total == 0 {
		return 100
	}
	return ok * 100 / total
}

// count returns the successes and the results of ep's window no older
// than WindowAge at now.
func (m *Machine) count(ep Endpoint, now time.Time) (ok, total int) {
	return m.recs[ep].since(now.Add(-m.cfg.WindowAge))
}

// ProbeDue reports whether the driver should start a probe round now:
// ProbeCount probes of each of ProbeTargets. It says yes once per
// ProbeInterval and not again until ProbeResults reports the round.
func (m *Machine) ProbeDue(now time.Time) bool {
	m.seen(now)
	if len(m.sites) == 1 || m.cfg.Strategy == SuccessRate || m.probing || now.Before(m.nextProbe) {
		return false
	}
	m.probing = true
	m.targets = append(m.targets[:0], m.preferred)
	if m.sites[m.current] != m.home {
		// Across: every access point of the home site, so that the client
		// comes home to any that answers.
		for i, site := range m.sites {
			if site == m.home && Endpoint(i) != m.preferred {
				m.targets = append(m.targets, Endpoint(i))
			}
		}
	}
	return true
}

// ProbeTargets returns the access points the round ProbeDue asked for
// probes, in order: the preferred one, and while the client is in another
// site than its home, the home site's others in list order.
func (m *Machine) ProbeTargets() []Endpoint {
	if !m.probing {
		return nil
	}
	return slices.Clone(m.targets)
}

// ProbeResult reports a round of the preferred access point alone:
// ProbeResults with failed for it, every other target taken as failed.
func (m *Machine) ProbeResult(now time.Time, failed int) {
	all := make([]int, len(m.targets))
	for i := range all {
		all[i] = m.cfg.ProbeCount
	}
	if len(all) > 0 {
		all[0] = failed
	}
	m.ProbeResults(now, all)
}

// ProbeResults reports the round ProbeDue asked for, finished at now:
// failed[i] of ProbeCount probes of ProbeTargets()[i] failed (a missing
// one counts as all failed). A failed round of the preferred access point
// moves the client away from it (if it is there), a passing one back to
// it; while the client is across, a home access point whose round passed
// brings it home when the preferred's failed, the first in list order.
// The next round is due one ProbeInterval after now.
func (m *Machine) ProbeResults(now time.Time, failed []int) {
	if !m.probing {
		return
	}
	m.seen(now)
	m.probing = false
	m.nextProbe = now.Add(m.cfg.ProbeInterval)
	m.stats.ProbeRounds++
	failedOf := func(i int) int {
		if i < len(failed) {
			return failed[i]
		}
		return m.cfg.ProbeCount
	}
	reason := fmt.Sprintf("probe: %d of %d failed", failedOf(0), m.cfg.ProbeCount)
	if failedOf(0) < m.cfg.ProbeFailures {
		m.switchTo(now, m.preferred, RuleProbe, reason)
		return
	}
	m.leave(now, m.preferred, RuleProbe, reason)
	if m.sites[m.current] == m.home {
		return
	}
	for i, ep := range m.targets[1:] {
		if f := failedOf(i + 1); f < m.cfg.ProbeFailures {
			m.switchTo(now, ep, RuleProbe, fmt.Sprintf("probe: %d of %d failed on the %s, %d of %d on %v of the home site", failedOf(0), m.cfg.ProbeCount, m.preferredName(), f, m.cfg.ProbeCount, ep))
			return
		}
	}
}

// switchTo makes to current unless it is already, or damping holds it
// back.
func (m *Machine) switchTo(now time.Time, to Endpoint, rule Rule, reason string) {
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
	_, _, fromFailing := m.fastFailing(m.current)
	_, _, toFailing := m.fastFailing(to)
	escape := fromFailing && !toFailing
	if !escape && (room < 1 || (to == m.preferred && room < 2)) {
		m.stats.Damped++
		return
	}
	if len(m.switches) < m.cfg.MaxSwitches { // escapes need no more to be counted
		m.switches = append(m.switches, now)
	}
	if to == m.preferred {
		// What its window holds was judged before the switch back; the
		// preferred access point starts afresh (its answer time kept).
		m.recs[to] = record{results: m.recs[to].results[:0], took: m.recs[to].took}
	}
	m.events = append(m.events, Event{At: now, From: m.current, To: to, Rule: rule, Reason: reason})
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
	s.Current, s.Preferred = m.current, m.preferred
	return s
}
