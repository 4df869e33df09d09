package failover

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// clock is the fake clock of these tests: time moves only when a test
// says so.
type clock struct{ now time.Time }

func (c *clock) advance(d time.Duration) time.Time { c.now = c.now.Add(d); return c.now }

func newMachine(t *testing.T, cfg Config) (*Machine, *clock) {
	t.Helper()
	c := &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	m, err := New(cfg, c.now)
	if err != nil {
		t.Fatal(err)
	}
	return m, c
}

func observe(m *Machine, now time.Time, ok, failed int) {
	for range ok {
		m.Observe(now, Primary, true)
	}
	for range failed {
		m.Observe(now, Primary, false)
	}
}

func TestDefaultsAreTheGuides(t *testing.T) {
	m, _ := newMachine(t, Config{})
	got := m.Config()
	want := Config{Endpoints: 2, Strategy: Both, WindowSize: 100, WindowAge: 10 * time.Minute, EvalInterval: time.Minute,
		MinSuccessPercent: 90, MinResults: 10, ProbeInterval: time.Minute, ProbeCount: 5, ProbeFailures: 3,
		SplitRatio: 99, MaxSwitches: 4, DampWindow: 10 * time.Minute, FastWindow: 5 * time.Second, FastFailPercent: 50, FastMinResults: 10}
	if got != want {
		t.Fatalf("defaults\n got %+v\nwant %+v", got, want)
	}
}

func TestInvalidConfig(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  Config
	}{
		{"three endpoints", Config{Endpoints: 3}},
		{"unknown strategy", Config{Strategy: "coin"}},
		{"min results over window", Config{WindowSize: 5, MinResults: 6}},
		{"percent over 100", Config{MinSuccessPercent: 101}},
		{"failures over probes", Config{ProbeCount: 2, ProbeFailures: 3}},
		{"split over 100", Config{SplitRatio: 101}},
		{"negative split", Config{SplitRatio: -1}},
		{"one switch", Config{MaxSwitches: 1}},
		{"negative interval", Config{EvalInterval: -time.Second}},
		{"fast percent over 100", Config{FastFailPercent: 101}},
		{"fast min results over window", Config{WindowSize: 5, MinResults: 5, FastMinResults: 6}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg, time.Now()); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestSplit(t *testing.T) {
	for _, tt := range []struct {
		name        string
		cfg         Config
		onBackup    bool
		wantBackups int // of rolls 0..99
	}{
		{"default keeps 1% on the backup", Config{}, false, 1},
		{"ratio 90", Config{SplitRatio: 90}, false, 10},
		{"ratio 100 sends nothing to the backup", Config{SplitRatio: 100}, false, 0},
		{"on the backup everything goes there", Config{}, true, 100},
		{"one endpoint: always the primary", Config{Endpoints: 1}, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, c := newMachine(t, tt.cfg)
			if tt.onBackup {
				m.ProbeDue(c.advance(time.Minute))
				m.ProbeResult(c.now, 5)
				if m.Current() != Backup {
					t.Fatal("setup: not on the backup")
				}
			}
			backups := 0
			for roll := range 100 {
				if m.Pick(roll) == Backup {
					backups++
				}
			}
			if backups != tt.wantBackups {
				t.Fatalf("%d of 100 rolls to the backup, want %d", backups, tt.wantBackups)
			}
		})
	}
}

func TestOther(t *testing.T) {
	m, _ := newMachine(t, Config{})
	if o, ok := m.Other(Primary); !ok || o != Backup {
		t.Errorf("Other(primary) = %v, %v", o, ok)
	}
	if o, ok := m.Other(Backup); !ok || o != Primary {
		t.Errorf("Other(backup) = %v, %v", o, ok)
	}
	one, _ := newMachine(t, Config{Endpoints: 1})
	if _, ok := one.Other(Primary); ok {
		t.Error("one endpoint has another")
	}
}

// TestSuccessRate: every rule of the success-rate window, one step at a
// time: (results observed, time advanced) then the expected endpoint.
func TestSuccessRate(t *testing.T) {
	type step struct {
		ok, failed int
		backupFail int // results on the backup, never judged
		advance    time.Duration
		want       Endpoint
	}
	for _, tt := range []struct {
		name  string
		steps []step
	}{
		{"89% switches at the evaluation, not before", []step{
			{ok: 89, failed: 11, advance: 59 * time.Second, want: Primary},
			{advance: time.Second, want: Backup},
		}},
		{"exactly 90% stays", []step{
			{ok: 90, failed: 10, advance: time.Minute, want: Primary},
		}},
		{"only the last 100 results count", []step{
			{failed: 50, want: Primary},
			{ok: 100, advance: time.Minute, want: Primary},
		}},
		{"results older than 10 minutes are forgotten", []step{
			{failed: 50, advance: 10*time.Minute + time.Second, want: Primary},
		}},
		{"fewer than MinResults are not judged", []step{
			{failed: 9, advance: time.Minute, want: Primary},
			{failed: 1, advance: time.Minute, want: Backup},
		}},
		{"the backup's failures are not the primary's", []step{
			{ok: 20, backupFail: 100, advance: time.Minute, want: Primary},
		}},
		{"back to the primary when its failures age out", []step{
			{failed: 20, advance: time.Minute, want: Backup},
			{advance: 8 * time.Minute, want: Backup},
			{advance: 2 * time.Minute, want: Primary},
		}},
		{"back to the primary when its rate recovers", []step{
			{failed: 20, advance: time.Minute, want: Backup},
			{ok: 100, advance: time.Minute, want: Primary},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The fast rule off (100%: never over): these are the
			// evaluation's cases, bursts of results at one instant.
			m, c := newMachine(t, Config{Strategy: SuccessRate, FastFailPercent: 100})
			for i, s := range tt.steps {
				observe(m, c.now, s.ok, s.failed)
				for range s.backupFail {
					m.Observe(c.now, Backup, false)
				}
				m.Tick(c.advance(s.advance))
				if got := m.Current(); got != s.want {
					t.Fatalf("step %d: on %v, want %v (stats %+v)", i, got, s.want, m.Stats())
				}
			}
		})
	}
}

func TestSuccessRateIgnoresProbes(t *testing.T) {
	m, c := newMachine(t, Config{Strategy: SuccessRate})
	if m.ProbeDue(c.advance(time.Hour)) {
		t.Fatal("the success-rate strategy asked for a probe")
	}
}

func TestProbe(t *testing.T) {
	for _, tt := range []struct {
		name   string
		rounds []int // failed probes of 5, one round a minute
		want   []Endpoint
	}{
		{"3 of 5 failing switches", []int{3}, []Endpoint{Backup}},
		{"2 of 5 stays", []int{2}, []Endpoint{Primary}},
		{"fewer than 3 switch back", []int{5, 4, 2}, []Endpoint{Backup, Backup, Primary}},
		{"a clean round switches back", []int{3, 0}, []Endpoint{Backup, Primary}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, c := newMachine(t, Config{Strategy: Probe})
			for i, failed := range tt.rounds {
				if !m.ProbeDue(c.advance(time.Minute)) {
					t.Fatalf("round %d not due after a minute", i)
				}
				m.ProbeResult(c.now, failed)
				if got := m.Current(); got != tt.want[i] {
					t.Fatalf("round %d (%d failed): on %v, want %v", i, failed, got, tt.want[i])
				}
			}
		})
	}
}

func TestProbeSchedule(t *testing.T) {
	m, c := newMachine(t, Config{Strategy: Probe})
	if m.ProbeDue(c.advance(59 * time.Second)) {
		t.Fatal("due before the interval")
	}
	if !m.ProbeDue(c.advance(time.Second)) {
		t.Fatal("not due at the interval")
	}
	if m.ProbeDue(c.advance(time.Hour)) {
		t.Fatal("a second round while the first is out")
	}
	m.ProbeResult(c.now, 0)
	if m.ProbeDue(c.advance(59 * time.Second)) {
		t.Fatal("the next round is due an interval after the last one finished")
	}
	if !m.ProbeDue(c.advance(time.Second)) {
		t.Fatal("next round not due")
	}
	// The probe strategy does not judge calls.
	observe(m, c.now, 0, 100)
	m.Tick(c.advance(time.Hour))
	if m.Current() != Primary {
		t.Fatal("the probe strategy judged the calls")
	}
}

func TestBoth(t *testing.T) {
	t.Run("failing calls switch; a clean probe round switches back and clears the window", func(t *testing.T) {
		m, c := newMachine(t, Config{})
		observe(m, c.now, 0, 50)
		m.Tick(c.advance(time.Minute))
		if !m.ProbeDue(c.now) {
			t.Fatal("probe not due")
		}
		if m.Current() != Backup {
			t.Fatal("failing window did not switch")
		}
		m.ProbeResult(c.now, 0)
		if m.Current() != Primary {
			t.Fatal("clean round did not switch back")
		}
		m.Tick(c.advance(time.Minute))
		if m.Current() != Primary {
			t.Fatal("the window from before the switch back was judged again")
		}
	})
	t.Run("failing probes switch; the window never switches back", func(t *testing.T) {
		m, c := newMachine(t, Config{})
		m.ProbeDue(c.advance(time.Minute))
		m.ProbeResult(c.now, 3)
		if m.Current() != Backup {
			t.Fatal("failing round did not switch")
		}
		m.Tick(c.advance(time.Hour))
		if m.Current() != Backup {
			t.Fatal("an empty window switched back under Both")
		}
	})
}

func TestDamping(t *testing.T) {
	m, c := newMachine(t, Config{Strategy: Probe, ProbeInterval: time.Second, MaxSwitches: 4, DampWindow: time.Minute})
	// A primary flapping every round: fail, pass, fail, ...
	var path []Endpoint
	for i := range 20 {
		if !m.ProbeDue(c.advance(time.Second)) {
			t.Fatal("not due")
		}
		m.ProbeResult(c.now, 5*(1-i%2))
		path = append(path, m.Current())
	}
	st := m.Stats()
	if st.Switches != 3 || m.Current() != Backup {
		// away, back, away: a fourth (back) would leave no room to leave
		// a failing primary again.
		t.Fatalf("switches %d, on %v; path %v", st.Switches, m.Current(), path)
	}
	if st.Damped == 0 {
		t.Fatal("nothing damped")
	}
	// Once the window has passed, the client may switch again.
	c.advance(time.Minute)
	m.ProbeDue(c.advance(time.Second))
	m.ProbeResult(c.now, 0)
	if m.Current() != Primary {
		t.Fatal("still damped after the window")
	}
}

func TestEvents(t *testing.T) {
	m, c := newMachine(t, Config{Strategy: Probe})
	m.ProbeDue(c.advance(time.Minute))
	m.ProbeResult(c.now, 4)
	away := c.now
	m.ProbeDue(c.advance(time.Minute))
	m.ProbeResult(c.now, 1)
	ev := m.Events()
	if len(ev) != 2 {
		t.Fatalf("events %+v", ev)
	}
	if ev[0].At != away || ev[0].From != Primary || ev[0].To != Backup || !strings.Contains(ev[0].Reason, "4 of 5 failed") {
		t.Errorf("first event %+v", ev[0])
	}
	if ev[1].At != c.now || ev[1].From != Backup || ev[1].To != Primary || !strings.Contains(ev[1].Reason, "1 of 5") {
		t.Errorf("second event %+v", ev[1])
	}
	if len(m.Events()) != 0 {
		t.Error("events are returned once")
	}
	if st := m.Stats(); st.Switches != 2 || st.ProbeRounds != 2 || st.Current != Primary {
		t.Errorf("stats %+v", st)
	}
}

func TestOneEndpointNeverSwitches(t *testing.T) {
	m, c := newMachine(t, Config{Endpoints: 1})
	observe(m, c.now, 0, 100)
	m.Tick(c.advance(time.Hour))
	if m.ProbeDue(c.now) || m.Current() != Primary {
		t.Fatal("one endpoint switched or probed")
	}
}

// TestFastTrip: more than half of the primary's results within 5 s
// failed, of 10 at least, moves the client to the backup at the failure
// that tips it, before any evaluation; half, fewer than 10, or failures
// spread over more than 5 s do not; on the backup the probes bring it
// back (strategy both).
func TestFastTrip(t *testing.T) {
	t.Run("six of ten within a second", func(t *testing.T) {
		m, c := newMachine(t, Config{})
		observe(m, c.now, 4, 5)
		if m.Current() != Primary {
			t.Fatal("switched before the tenth result")
		}
		m.Observe(c.advance(time.Second), Primary, false)
		if m.Current() != Backup {
			t.Fatalf("on %v after 6 of 10 failed within 1 s, want the backup", m.Current())
		}
		ev := m.Events()
		if len(ev) != 1 || !strings.Contains(ev[0].Reason, "fast: 6 of 10 failed within 5s") {
			t.Fatalf("events %+v", ev)
		}
		if m.ProbeDue(c.advance(time.Minute)) {
			m.ProbeResult(c.now, 0)
		}
		if m.Current() != Primary {
			t.Fatalf("on %v after a passing probe round, want the primary", m.Current())
		}
	})
	for _, tt := range []struct {
		name       string
		ok, failed int
		spread     time.Duration // between results
	}{
		{"half of ten", 5, 5, 0},
		{"nine of nine", 0, 9, 0},
		{"failures spread over 6 s", 0, 12, 600 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, c := newMachine(t, Config{})
			observe(m, c.now, tt.ok, 0)
			for range tt.failed {
				m.Observe(c.advance(tt.spread), Primary, false)
			}
			if m.Current() != Primary {
				t.Fatalf("on %v, want the primary: %+v", m.Current(), m.Events())
			}
		})
	}
	t.Run("the backup's failures and the probe strategy", func(t *testing.T) {
		m, c := newMachine(t, Config{})
		for range 20 {
			m.Observe(c.now, Backup, false)
		}
		p, c2 := newMachine(t, Config{Strategy: Probe})
		observe(p, c2.now, 0, 20)
		if m.Current() != Primary || p.Current() != Primary {
			t.Fatalf("on %v and %v, want the primary", m.Current(), p.Current())
		}
	})
}

// TestEscapeFromAFailingBackup: on the backup, more than half of its calls
// failing within 5 s moves the client back to a primary that answers the
// calls failing over to it, without waiting for a probe round, and even
// when the damping has no room left; a primary that answers nothing keeps
// it where it is.
func TestEscapeFromAFailingBackup(t *testing.T) {
	failBackup := func(m *Machine, c *clock, primaryAnswers bool) {
		for range 10 {
			now := c.advance(100 * time.Millisecond)
			m.Observe(now, Backup, false)
			if primaryAnswers {
				m.Observe(now, Primary, true) // the call's retry
			}
		}
	}
	t.Run("the primary answers the retries", func(t *testing.T) {
		m, c := newMachine(t, Config{ProbeInterval: time.Hour})
		m.ProbeDue(c.advance(time.Hour))
		m.ProbeResult(c.now, 5)
		if m.Current() != Backup {
			t.Fatal("failed round did not switch")
		}
		m.Events()
		failBackup(m, c, true)
		ev := m.Events()
		if m.Current() != Primary || len(ev) != 1 || ev[0].Rule != RuleFast || !strings.Contains(ev[0].Reason, "the primary answers") {
			t.Fatalf("on %v, events %+v; want back on the primary by the fast rule", m.Current(), ev)
		}
	})
	t.Run("the primary answers nothing", func(t *testing.T) {
		m, c := newMachine(t, Config{ProbeInterval: time.Hour})
		m.ProbeDue(c.advance(time.Hour))
		m.ProbeResult(c.now, 5)
		failBackup(m, c, false)
		if m.Current() != Backup {
			t.Fatalf("on %v: left the backup for a primary with no answer", m.Current())
		}
	})
	t.Run("the damping has no room", func(t *testing.T) {
		m, c := newMachine(t, Config{ProbeInterval: time.Second, MaxSwitches: 4, DampWindow: time.Hour})
		for _, failed := range []int{5, 0, 5, 0} { // away, back, away, (back: damped)
			m.ProbeDue(c.advance(time.Second))
			m.ProbeResult(c.now, failed)
		}
		if st := m.Stats(); m.Current() != Backup || st.Damped != 1 {
			t.Fatalf("on %v, stats %+v; want the backup, one switch damped", m.Current(), st)
		}
		failBackup(m, c, true)
		if m.Current() != Primary {
			t.Fatalf("on %v: the damping held the client on a failing backup", m.Current())
		}
	})
}
