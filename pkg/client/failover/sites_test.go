package failover

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func newSites(t *testing.T, cfg Config, sites []string, home string) (*Machine, *clock) {
	t.Helper()
	c := &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	m, err := NewSites(cfg, sites, home, c.now)
	if err != nil {
		t.Fatal(err)
	}
	return m, c
}

// observeOn records ok answers, then failed failures, of ep at now.
func observeOn(m *Machine, now time.Time, ep Endpoint, ok, failed int) {
	for range ok {
		m.Observe(now, ep, true)
	}
	for range failed {
		m.Observe(now, ep, false)
	}
}

// failProbes runs a due probe round in which every probe failed.
func failProbes(t *testing.T, m *Machine, c *clock) {
	t.Helper()
	if !m.ProbeDue(c.advance(time.Minute)) {
		t.Fatal("probe round not due after a minute")
	}
	m.ProbeResult(c.now, m.Config().ProbeCount)
}

// TestSitesStartAtHome: the client starts on the first listed access
// point of the home site, wherever it is in the list, and its split and
// its retries go to another of the home site before any other site.
func TestSitesStartAtHome(t *testing.T) {
	for _, tt := range []struct {
		sites      []string
		home       string
		want, next Endpoint // preferred; the split's and the retry's
	}{
		{[]string{"a", "b"}, "a", 0, 1},
		{[]string{"a", "b"}, "b", 1, 0},
		{[]string{"b", "a", "a"}, "a", 1, 2},
		{[]string{"b", "b", "a"}, "a", 2, 0},
		{[]string{"a", "b", "a", "b", "a", "b"}, "b", 1, 3},
		{[]string{"solo"}, "solo", 0, 0},
	} {
		t.Run(fmt.Sprintf("%v home %s", tt.sites, tt.home), func(t *testing.T) {
			m, _ := newSites(t, Config{SplitRatio: 50}, tt.sites, tt.home)
			if m.Current() != tt.want || m.Preferred() != tt.want || m.Site(m.Current()) != tt.home {
				t.Fatalf("on %v (preferred %v), want %v in %s", m.Current(), m.Preferred(), tt.want, tt.home)
			}
			if got := m.Pick(49); got != tt.want {
				t.Errorf("roll 49 went to %v, want %v", got, tt.want)
			}
			if got := m.Pick(50); got != tt.next {
				t.Errorf("roll 50 (the split) went to %v, want %v", got, tt.next)
			}
			o, ok := m.Other(tt.want)
			if len(tt.sites) == 1 {
				if ok {
					t.Errorf("one access point has another: %v", o)
				}
				return
			}
			if !ok || o != tt.next {
				t.Errorf("Other(%v) = %v, %v; want %v", tt.want, o, ok, tt.next)
			}
		})
	}
}

// TestSitesRanking: where the retry of a call that failed goes: not
// known failing first, then the home site, then the fewest failures in
// the last FastWindow, then list order.
func TestSitesRanking(t *testing.T) {
	type obs struct {
		ep         Endpoint
		ok, failed int
		ago        time.Duration
	}
	for _, tt := range []struct {
		name  string
		sites []string
		obs   []obs
		from  Endpoint
		want  Endpoint
	}{
		{"home site before fewer failures", []string{"a", "a", "b"}, []obs{{1, 5, 3, 0}}, 0, 1},
		{"a failing one ranks last, home or not", []string{"a", "a", "b"}, []obs{{1, 4, 6, 0}, {2, 0, 4, 0}}, 0, 2},
		{"fewest failures within the site", []string{"a", "b", "b"}, []obs{{1, 8, 2, 0}, {2, 8, 1, 0}}, 0, 2},
		{"then list order", []string{"a", "b", "b"}, []obs{{1, 8, 1, 0}, {2, 8, 1, 0}}, 0, 1},
		{"failures older than 5s do not count", []string{"a", "b", "b"}, []obs{{1, 0, 9, 6 * time.Second}, {2, 8, 1, 0}}, 0, 1},
		{"from another: the home site's, the preferred too", []string{"a", "a", "b"}, nil, 1, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, c := newSites(t, Config{}, tt.sites, "a")
			start := c.now
			c.advance(time.Minute)
			for _, o := range tt.obs {
				at := c.now.Add(-o.ago)
				if at.Before(start) {
					at = start
				}
				observeOn(m, at, o.ep, o.ok, o.failed)
			}
			m.Tick(c.now)
			if got, _ := m.Other(tt.from); got != tt.want {
				t.Fatalf("Other(%v) = %v, want %v", tt.from, got, tt.want)
			}
		})
	}
	t.Run("away from the preferred, it ranks last", func(t *testing.T) {
		m, c := newSites(t, Config{}, []string{"a", "a", "b"}, "a")
		failProbes(t, m, c)
		if m.Current() != 1 {
			t.Fatalf("on %v after a failed round, want 1", m.Current())
		}
		if got, _ := m.Other(1); got != 2 {
			t.Fatalf("Other(1) = %v while the preferred is failing, want 2 (the other site)", got)
		}
	})
}

// TestSitesEachRuleStaysHomeFirst: whichever rule finds the preferred
// access point failing, the client moves to the other access point of the
// home site, listed after one of the other site.
func TestSitesEachRuleStaysHomeFirst(t *testing.T) {
	for _, tt := range []struct {
		rule Rule
		fail func(*Machine, *clock)
	}{
		{RuleFast, func(m *Machine, c *clock) { observeOn(m, c.now, 0, 4, 6) }},
		{RuleProbe, func(m *Machine, c *clock) { m.ProbeDue(c.advance(time.Minute)); m.ProbeResult(c.now, 3) }},
		{RuleSuccessRate, func(m *Machine, c *clock) {
			observeOn(m, c.now, 0, 80, 20)
			m.Tick(c.advance(time.Minute))
		}},
	} {
		t.Run(string(tt.rule), func(t *testing.T) {
			cfg := Config{}
			if tt.rule == RuleSuccessRate {
				cfg.FastFailPercent = 100
			}
			m, c := newSites(t, cfg, []string{"a", "b", "a"}, "a")
			tt.fail(m, c)
			if m.Current() != 2 {
				t.Fatalf("on %v, want 2 (site a) before 1 (site b)", m.Current())
			}
			ev := m.Events()
			if len(ev) != 1 || ev[0].From != 0 || ev[0].To != 2 || ev[0].Rule != tt.rule || ev[0].At != c.now {
				t.Fatalf("events %+v", ev)
			}
		})
	}
}

// TestSitesCrossWhenTheHomeSiteFails: the home site's access points
// failing one after the other take the client to the other site's best
// (the fewest recent failures), and there it stays while the others fail.
func TestSitesCrossWhenTheHomeSiteFails(t *testing.T) {
	m, c := newSites(t, Config{}, []string{"a", "a", "b", "b"}, "a")
	observeOn(m, c.now, 2, 9, 1) // a split call to b's first failed
	observeOn(m, c.now, 0, 4, 6)
	if m.Current() != 1 {
		t.Fatalf("on %v after 0 failed, want 1 (site a)", m.Current())
	}
	c.advance(time.Second)
	observeOn(m, c.now, 1, 4, 6)
	if m.Current() != 3 {
		t.Fatalf("on %v after 1 failed, want 3 (site b, no failures)", m.Current())
	}
	ev := m.Events()
	if len(ev) != 2 || ev[1].From != 1 || ev[1].To != 3 || ev[1].Rule != RuleFast || !strings.Contains(ev[1].Reason, "fast: 6 of 10 failed within 5s") {
		t.Fatalf("events %+v", ev)
	}
	// The failed access points of site a still fail when b's does: no
	// move to a failing one.
	observeOn(m, c.now, 2, 0, 10)
	observeOn(m, c.now, 3, 4, 6)
	if m.Current() != 3 || len(m.Events()) != 0 {
		t.Fatalf("on %v, moved to a failing access point", m.Current())
	}
}

// TestSitesFastRule: the dynamic rule (more than 50% of 10 or more
// results within 5 s failed) on the preferred access point and on another
// the client is on.
func TestSitesFastRule(t *testing.T) {
	for _, tt := range []struct {
		name       string
		away       bool // on 1 (after a failed probe round), not on 0
		ok, failed int
		spread     time.Duration // between failures
		want       Endpoint
	}{
		{"preferred: 6 of 10 within a second", false, 4, 6, 100 * time.Millisecond, 1},
		{"preferred: half of 10", false, 5, 5, 0, 0},
		{"preferred: 9 of 9", false, 0, 9, 0, 0},
		{"preferred: spread over 6 s", false, 0, 12, 600 * time.Millisecond, 0},
		{"away: 6 of 10 within a second", true, 4, 6, 100 * time.Millisecond, 2},
		{"away: half of 10", true, 5, 5, 0, 1},
		{"away: 9 of 9", true, 0, 9, 0, 1},
		{"away: spread over 6 s", true, 0, 12, 600 * time.Millisecond, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, c := newSites(t, Config{}, []string{"a", "a", "b"}, "a")
			if tt.away {
				failProbes(t, m, c)
			}
			ep := m.Current()
			observeOn(m, c.now, ep, tt.ok, 0)
			for range tt.failed {
				m.Observe(c.advance(tt.spread), ep, false)
			}
			if m.Current() != tt.want {
				t.Fatalf("on %v, want %v: %+v", m.Current(), tt.want, m.Events())
			}
		})
	}
	t.Run("not the current one's", func(t *testing.T) {
		m, c := newSites(t, Config{}, []string{"a", "a", "b"}, "a")
		observeOn(m, c.now, 1, 0, 20)
		if m.Current() != 0 {
			t.Fatalf("on %v: another's failures moved the client", m.Current())
		}
	})
}

// TestSitesAwayWindow: away from the preferred access point, the current
// one's success-rate window is judged at the evaluation too.
func TestSitesAwayWindow(t *testing.T) {
	m, c := newSites(t, Config{FastFailPercent: 100}, []string{"a", "a", "b"}, "a")
	failProbes(t, m, c)
	m.Tick(c.now) // the evaluation of the first minute: nothing to judge
	observeOn(m, c.now, 1, 85, 15)
	m.Tick(c.advance(30 * time.Second))
	if m.Current() != 1 {
		t.Fatal("moved before the evaluation")
	}
	m.Tick(c.advance(30 * time.Second))
	if m.Current() != 2 {
		t.Fatalf("on %v after 1's window fell to 85%%, want 2", m.Current())
	}
}

// TestSitesFailback: probes of the preferred access point, wherever the
// client is, bring it home when they pass; while they fail it stays where
// it is. The success-rate strategy returns when the failures age out.
func TestSitesFailback(t *testing.T) {
	t.Run("probes", func(t *testing.T) {
		m, c := newSites(t, Config{}, []string{"b", "a", "a"}, "a")
		failProbes(t, m, c) // 1 -> 2
		observeOn(m, c.now, 2, 0, 10)
		if m.Current() != 0 {
			t.Fatalf("on %v, want 0 (site b) once site a failed", m.Current())
		}
		failProbes(t, m, c)
		if m.Current() != 0 {
			t.Fatalf("a failed probe round moved the client from %v", m.Current())
		}
		m.ProbeDue(c.advance(time.Minute))
		m.ProbeResult(c.now, 2)
		if m.Current() != 1 {
			t.Fatalf("on %v after a passing round, want home (1)", m.Current())
		}
		ev := m.Events()
		last := ev[len(ev)-1]
		if len(ev) != 3 || last.From != 0 || last.To != 1 || last.Rule != RuleProbe || last.Reason != "probe: 2 of 5 failed" {
			t.Fatalf("events %+v", ev)
		}
		// Its window starts afresh: its failures from before are gone.
		m.Tick(c.advance(time.Minute))
		if m.Current() != 1 {
			t.Fatal("the window from before the switch back was judged again")
		}
	})
	t.Run("success rate", func(t *testing.T) {
		m, c := newSites(t, Config{Strategy: SuccessRate, FastFailPercent: 100}, []string{"a", "a", "b"}, "a")
		observeOn(m, c.now, 0, 0, 20)
		m.Tick(c.advance(time.Minute))
		observeOn(m, c.now, 1, 0, 20)
		m.Tick(c.advance(time.Minute))
		if m.Current() != 2 {
			t.Fatalf("on %v, want 2", m.Current())
		}
		m.Tick(c.advance(8 * time.Minute))
		if m.Current() != 2 {
			t.Fatalf("on %v while 0's failures are in its window, want 2", m.Current())
		}
		m.Tick(c.advance(2 * time.Minute))
		if m.Current() != 0 {
			t.Fatalf("on %v once 0's failures aged out, want 0", m.Current())
		}
	})
}

// TestSitesLimits: one to six access points with their sites; the home
// site one of theirs. Every refusal names what it refuses.
func TestSitesLimits(t *testing.T) {
	six := []string{"a", "a", "a", "b", "b", "b"}
	if m, err := NewSites(Config{}, six, "b", time.Now()); err != nil || m.Config().Endpoints != 6 || m.Preferred() != 3 {
		t.Fatalf("six access points: %v", err)
	}
	for _, tt := range []struct {
		name  string
		cfg   Config
		sites []string
		home  string
		want  string
	}{
		{"seven", Config{}, append(six, "b"), "a", "sites: 7 access points, want 1 to 6"},
		{"none", Config{}, nil, "", "sites: 0 access points"},
		{"home not among them", Config{}, []string{"a", "b"}, "c", `home site "c": no access point is in it`},
		{"no home", Config{}, []string{"a", "b"}, "", `home site ""`},
		{"endpoints disagree", Config{Endpoints: 2}, []string{"a", "a", "b"}, "a", "endpoints 2: 3 sites given"},
		{"a bad number", Config{SplitRatio: 101}, []string{"a", "b"}, "a", "split ratio 101"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewSites(tt.cfg, tt.sites, tt.home, time.Now())
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewSites = %v, want ErrInvalidConfig saying %q", err, tt.want)
			}
		})
	}
	if _, err := New(Config{Endpoints: 3}, time.Now()); err == nil || !strings.Contains(err.Error(), "endpoints 3") {
		t.Fatalf("New with three: %v", err)
	}
}

// TestTwoSitesAreAPrimaryAndABackup: a machine over two access points in
// two sites decides exactly as New's primary and backup, the home site's
// being the primary wherever it is listed, over random sequences of
// outcomes, evaluations and probe rounds under every strategy.
func TestTwoSitesAreAPrimaryAndABackup(t *testing.T) {
	for _, strategy := range []Strategy{Both, SuccessRate, Probe} {
		for _, homeSecond := range []bool{false, true} {
			for seed := range uint64(20) {
				name := fmt.Sprintf("%s/home second %v/seed %d", strategy, homeSecond, seed)
				t.Run(name, func(t *testing.T) {
					cfg := Config{Strategy: strategy, MinResults: 5, FastMinResults: 5, SplitRatio: 90,
						WindowAge: time.Minute, EvalInterval: 10 * time.Second, ProbeInterval: 20 * time.Second, DampWindow: 2 * time.Minute}
					old, c := newMachine(t, cfg)
					sites, home := []string{"x", "y"}, "x"
					if homeSecond {
						home = "y"
					}
					m, _ := newSites(t, cfg, sites, home)
					// as maps New's endpoint to the sites machine's.
					as := func(e Endpoint) Endpoint {
						if homeSecond {
							return 1 - e
						}
						return e
					}
					rng := rand.New(rand.NewPCG(seed, 39))
					for step := range 2000 {
						now := c.advance(time.Duration(rng.IntN(400)) * time.Millisecond)
						switch op := rng.IntN(10); {
						case op < 6:
							// Phases of 150 steps: all answered, a
							// third failing, three quarters failing.
							ep, ok := Endpoint(rng.IntN(2)), []bool{true, rng.IntN(3) > 0, rng.IntN(4) == 0}[step/150%3]
							old.Observe(now, ep, ok)
							m.Observe(now, as(ep), ok)
						case op < 8:
							old.Tick(now)
							m.Tick(now)
						default:
							d1, d2 := old.ProbeDue(now), m.ProbeDue(now)
							if d1 != d2 {
								t.Fatalf("step %d: probe due %v and %v", step, d1, d2)
							}
							if d1 {
								failed := rng.IntN(6)
								old.ProbeResult(now, failed)
								m.ProbeResult(now, failed)
							}
						}
						roll := rng.IntN(100)
						if a, b := old.Pick(roll), m.Pick(roll); as(a) != b {
							t.Fatalf("step %d: roll %d to %v and %v", step, roll, a, b)
						}
						for _, ep := range []Endpoint{Primary, Backup} {
							if a, _ := old.Other(ep); as(a) != func() Endpoint { o, _ := m.Other(as(ep)); return o }() {
								t.Fatalf("step %d: other of %v differs", step, ep)
							}
						}
						e1, e2 := old.Events(), m.Events()
						if len(e1) != len(e2) {
							t.Fatalf("step %d: events %+v and %+v", step, e1, e2)
						}
						for i := range e1 {
							a, b := e1[i], e2[i]
							if a.At != b.At || as(a.From) != b.From || as(a.To) != b.To || a.Rule != b.Rule ||
								a.Reason != strings.Replace(b.Reason, "preferred access point", "primary", 1) {
								t.Fatalf("step %d: event %+v and %+v", step, a, b)
							}
						}
						s1, s2 := old.Stats(), m.Stats()
						if as(s1.Current) != s2.Current || s1.Switches != s2.Switches || s1.Damped != s2.Damped || s1.ProbeRounds != s2.ProbeRounds || s1.EvalRounds != s2.EvalRounds {
							t.Fatalf("step %d: stats %+v and %+v", step, s1, s2)
						}
					}
					if st := old.Stats(); st.Switches == 0 {
						t.Fatalf("no switch in the sequence: it proves nothing (stats %+v)", st)
					}
				})
			}
		}
	}
}

// TestSitesRankByAnswerTime: among access points otherwise alike, the one
// whose answers come back soonest ranks first, by classes of answer time
// (a millisecond decides nothing); one never heard from is not taken for
// a slow one; failures and the home site still come first.
func TestSitesRankByAnswerTime(t *testing.T) {
	type timed struct {
		ep   Endpoint
		took time.Duration
		n    int
	}
	for _, tt := range []struct {
		name  string
		sites []string
		calls []timed
		want  Endpoint
	}{
		{"the quicker of the home site", []string{"a", "a", "a", "b"}, []timed{{1, 40 * time.Millisecond, 5}, {2, 5 * time.Millisecond, 5}}, 2},
		{"alike answer by list order", []string{"a", "a", "a", "b"}, []timed{{1, 21 * time.Millisecond, 5}, {2, 20 * time.Millisecond, 5}}, 1},
		{"never heard from is not slow", []string{"a", "a", "a", "b"}, []timed{{2, 30 * time.Millisecond, 5}}, 1},
		{"the home site before a quicker other site", []string{"a", "a", "b"}, []timed{{1, 80 * time.Millisecond, 5}, {2, time.Millisecond, 5}}, 1},
		{"the quicker of the other site", []string{"a", "b", "b"}, []timed{{1, 60 * time.Millisecond, 5}, {2, 9 * time.Millisecond, 5}}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, c := newSites(t, Config{}, tt.sites, "a")
			for _, call := range tt.calls {
				for range call.n {
					m.ObserveTimed(c.now, call.ep, true, call.took)
				}
			}
			if got, _ := m.Other(0); got != tt.want {
				t.Fatalf("Other(0) = %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("a quick one that fails ranks after a slow one", func(t *testing.T) {
		m, c := newSites(t, Config{}, []string{"a", "a", "a"}, "a")
		for range 5 {
			m.ObserveTimed(c.now, 1, true, 50*time.Millisecond)
			m.ObserveTimed(c.now, 2, true, 2*time.Millisecond)
		}
		m.ObserveTimed(c.now, 2, false, 0)
		if got, _ := m.Other(0); got != 1 {
			t.Fatalf("Other(0) = %v, want 1 (no failures)", got)
		}
	})
	t.Run("the average follows the access point", func(t *testing.T) {
		m, c := newSites(t, Config{}, []string{"a", "a", "a"}, "a")
		for range 5 {
			m.ObserveTimed(c.now, 1, true, 3*time.Millisecond)
			m.ObserveTimed(c.now, 2, true, 30*time.Millisecond)
		}
		if got, _ := m.Other(0); got != 1 {
			t.Fatalf("Other(0) = %v, want 1", got)
		}
		for range 20 { // 1 slows down, 2 speeds up
			m.ObserveTimed(c.now, 1, true, 100*time.Millisecond)
			m.ObserveTimed(c.now, 2, true, 3*time.Millisecond)
		}
		if got, _ := m.Other(0); got != 2 {
			t.Fatalf("Other(0) = %v after 1 slowed down, want 2", got)
		}
	})
}

// TestSitesProbeTheHomeSiteWhileAcross: a client that crossed because
// every access point of its home site failed probes them all, and comes
// home to one that answers while the preferred one stays down; at home
// (on another than the preferred), it probes the preferred alone.
func TestSitesProbeTheHomeSiteWhileAcross(t *testing.T) {
	m, c := newSites(t, Config{}, []string{"a", "a", "b", "a"}, "a")
	observeOn(m, c.now, 0, 4, 6)
	observeOn(m, c.now, 1, 4, 6)
	observeOn(m, c.now, 3, 4, 6)
	if m.Current() != 2 {
		t.Fatalf("on %v after the home site failed, want 2 (site b)", m.Current())
	}
	m.Events()
	if !m.ProbeDue(c.advance(time.Minute)) {
		t.Fatal("no probe round after a minute")
	}
	if got := m.ProbeTargets(); !slices.Equal(got, []Endpoint{0, 1, 3}) {
		t.Fatalf("probe targets %v across, want [0 1 3]: every access point of the home site", got)
	}
	n := m.Config().ProbeCount
	m.ProbeResults(c.now, []int{n, n, 0})
	if m.Current() != 3 {
		t.Fatalf("on %v after 3 of the home site passed its probes, want 3", m.Current())
	}
	ev := m.Events()
	if len(ev) != 1 || ev[0].From != 2 || ev[0].To != 3 || ev[0].Rule != RuleProbe ||
		ev[0].Reason != "probe: 5 of 5 failed on the preferred access point, 0 of 5 on endpoint-3 of the home site" {
		t.Fatalf("events %+v", ev)
	}
	// At home, on another than the preferred: the preferred alone (after
	// the damping window: four switches so far).
	if !m.ProbeDue(c.advance(m.Config().DampWindow)) {
		t.Fatal("no probe round after a minute")
	}
	if got := m.ProbeTargets(); !slices.Equal(got, []Endpoint{0}) {
		t.Fatalf("probe targets %v at home, want [0]", got)
	}
	m.ProbeResults(c.now, []int{0})
	if m.Current() != 0 {
		t.Fatalf("on %v after the preferred passed, want 0", m.Current())
	}
	if m.ProbeTargets() != nil {
		t.Fatal("targets of a round reported")
	}
}

// TestSitesProbeAcrossNothingAnswers: across, a round in which no home
// access point passes leaves the client where it is; the one-number
// ProbeResult counts the home site's others as failed.
func TestSitesProbeAcrossNothingAnswers(t *testing.T) {
	m, c := newSites(t, Config{}, []string{"a", "a", "b"}, "a")
	observeOn(m, c.now, 0, 4, 6)
	observeOn(m, c.now, 1, 4, 6)
	m.Events()
	n := m.Config().ProbeCount
	for _, report := range []func(){
		func() { m.ProbeResults(c.now, []int{n, n - 1}) },
		func() { m.ProbeResult(c.now, n) },
		func() { m.ProbeResults(c.now, []int{n}) }, // the home site's other unreported
	} {
		if !m.ProbeDue(c.advance(time.Minute)) {
			t.Fatal("no probe round after a minute")
		}
		report()
		if m.Current() != 2 || len(m.Events()) != 0 {
			t.Fatalf("on %v after a round nothing of the home site passed, want 2", m.Current())
		}
	}
}
