package health

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	hs "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type recorder struct {
	mu      sync.Mutex
	changes []change
}

func (r *recorder) on(id string, share int) {
	r.mu.Lock()
	r.changes = append(r.changes, change{id, share})
	r.mu.Unlock()
}

func (r *recorder) shares(id string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int
	for _, c := range r.changes {
		if c.id == id {
			out = append(out, c.share)
		}
	}
	return out
}

// healthServer serves gRPC health on loopback; set flips its status.
func healthServer(t *testing.T) (addr string, set func(serving bool)) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	h := hs.NewServer()
	healthpb.RegisterHealthServer(s, h)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String(), func(serving bool) {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if serving {
			st = healthpb.HealthCheckResponse_SERVING
		}
		h.SetServingStatus("", st)
	}
}

func newMonitor(t *testing.T, clock *fakeClock, rec *recorder, cells ...Cell) *Monitor {
	t.Helper()
	m, err := New(Config{Now: clock.Now, OnChange: rec.on, CheckTimeout: time.Second, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	m.SetCells(cells)
	t.Cleanup(m.close)
	return m
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestConsecutiveFailuresEjectThenRampBack(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	rec := &recorder{}
	addrA, _ := healthServer(t)
	addrB, _ := healthServer(t)
	m := newMonitor(t, clock, rec, Cell{ID: "a", Addr: addrA, Pool: "p"}, Cell{ID: "b", Addr: addrB, Pool: "p"})
	m.Observe("a", false)
	m.Observe("a", false)
	if m.Share("a") != 100 {
		t.Fatal("ejected before the threshold")
	}
	m.Observe("a", false)
	if m.Share("a") != 0 {
		t.Fatal("not ejected after 3 consecutive failures")
	}
	wantEjections(t, m, "a", CauseConsecutiveFailures, 1)
	// Still inside the back-off: a healthy check does not re-admit it.
	clock.Add(500 * time.Millisecond)
	m.checkAll(ctxT(t))
	if m.Share("a") != 0 {
		t.Fatal("re-admitted inside the back-off")
	}
	// After it: re-admitted on 10%, doubling every step up to 100.
	clock.Add(600 * time.Millisecond)
	m.checkAll(ctxT(t))
	for _, want := range []int{10, 20, 40, 80, 100, 100} {
		if got := m.Share("a"); got != want {
			t.Fatalf("share = %d, want %d (changes %v)", got, want, rec.shares("a"))
		}
		clock.Add(time.Second)
		m.checkAll(ctxT(t))
	}
	if got := rec.shares("a"); len(got) != 6 || got[0] != 0 {
		t.Fatalf("reported changes %v", got)
	}
}

func TestBackoffGrows(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	rec := &recorder{}
	addrA, _ := healthServer(t)
	addrB, _ := healthServer(t)
	m := newMonitor(t, clock, rec, Cell{ID: "a", Addr: addrA, Pool: "p"}, Cell{ID: "b", Addr: addrB, Pool: "p"})
	eject := func() {
		for range 3 {
			m.Observe("a", false)
		}
	}
	eject()
	clock.Add(1100 * time.Millisecond)
	m.checkAll(ctxT(t))
	if m.Share("a") != 10 {
		t.Fatalf("share = %d after the first back-off", m.Share("a"))
	}
	eject() // fails again while ramping: the back-off doubles
	clock.Add(1100 * time.Millisecond)
	m.checkAll(ctxT(t))
	if m.Share("a") != 0 {
		t.Fatal("second back-off did not grow")
	}
	clock.Add(time.Second)
	m.checkAll(ctxT(t))
	if m.Share("a") != 10 {
		t.Fatalf("share = %d after the second back-off", m.Share("a"))
	}
	wantEjections(t, m, "a", CauseConsecutiveFailures, 2)
}

// wantEjections fails unless the monitor counted n ejections of cell, all
// for cause.
func wantEjections(t *testing.T, m *Monitor, cell string, cause Cause, n uint64) {
	t.Helper()
	var want [NumCauses]uint64
	want[cause] = n
	if got := m.Ejections(cell); got != want {
		t.Errorf("ejections of %s by cause = %v, want %d %s", cell, got, n, cause)
	}
}

func TestLastCellOfPoolIsNeverEjected(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	rec := &recorder{}
	addrA, _ := healthServer(t)
	addrB, _ := healthServer(t)
	addrC, _ := healthServer(t)
	m := newMonitor(t, clock, rec, Cell{ID: "a", Addr: addrA, Pool: "p"}, Cell{ID: "b", Addr: addrB, Pool: "p"}, Cell{ID: "c", Addr: addrC, Pool: "q"})
	for range 3 {
		m.Observe("a", false)
		m.Observe("b", false)
		m.Observe("c", false)
	}
	if m.Share("a")+m.Share("b") != 100 {
		t.Fatalf("pool p: shares a=%d b=%d, want exactly one cell left", m.Share("a"), m.Share("b"))
	}
	if m.Share("c") != 100 {
		t.Fatal("the only cell of pool q was ejected")
	}
	wantEjections(t, m, "c", CauseConsecutiveFailures, 0) // refused: not counted
}

func TestActiveCheckEjects(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	rec := &recorder{}
	addrA, setA := healthServer(t)
	addrB, _ := healthServer(t)
	m := newMonitor(t, clock, rec, Cell{ID: "a", Addr: addrA, Pool: "p"}, Cell{ID: "b", Addr: addrB, Pool: "p"})
	setA(false)
	m.checkAll(ctxT(t))
	if m.Share("a") != 0 {
		t.Fatal("NOT_SERVING did not eject")
	}
	wantEjections(t, m, "a", CauseCheckDown, 1)
	// An unreachable address is down too.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l.Addr().String()
	l.Close()
	m.SetCells([]Cell{{ID: "a", Addr: addrA, Pool: "p"}, {ID: "b", Addr: addrB, Pool: "p"}, {ID: "d", Addr: dead, Pool: "p"}})
	m.checkAll(ctxT(t))
	if m.Share("d") != 0 {
		t.Fatal("unreachable cell not ejected")
	}
	setA(true)
	clock.Add(1100 * time.Millisecond)
	m.checkAll(ctxT(t))
	if m.Share("a") != 10 {
		t.Fatalf("share = %d, want re-admitted on 10", m.Share("a"))
	}
}

func TestFailureRateWindow(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	rec := &recorder{}
	addrA, _ := healthServer(t)
	addrB, _ := healthServer(t)
	m := newMonitor(t, clock, rec, Cell{ID: "a", Addr: addrA, Pool: "p"}, Cell{ID: "b", Addr: addrB, Pool: "p"})
	// Alternating outcomes never make 3 in a row, but half fail.
	for i := range 9 {
		m.Observe("a", i%2 == 0)
		clock.Add(100 * time.Millisecond)
	}
	if m.Share("a") != 100 {
		t.Fatal("ejected before MinRequests")
	}
	m.Observe("a", false)
	if m.Share("a") != 0 {
		t.Fatal("a 50% failure rate over the window did not eject")
	}
	wantEjections(t, m, "a", CauseFailureRate, 1)
	// Old failures age out of the window.
	m2 := newMonitor(t, clock, rec, Cell{ID: "x", Addr: addrA, Pool: "p2"}, Cell{ID: "y", Addr: addrB, Pool: "p2"})
	for i := range 8 {
		m2.Observe("x", i%2 == 0)
	}
	clock.Add(6 * time.Second)
	for range 2 {
		m2.Observe("x", false)
		m2.Observe("x", true)
	}
	if m2.Share("x") != 100 {
		t.Fatal("failures outside the window counted")
	}
}

func TestSuccessRateOverLastN(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	rec := &recorder{}
	addrA, _ := healthServer(t)
	addrB, _ := healthServer(t)
	m, err := New(Config{Now: clock.Now, OnChange: rec.on, SuccessWindow: 20, SuccessRate: 0.9, FailureRate: 1, MinRequests: 1000})
	if err != nil {
		t.Fatal(err)
	}
	m.SetCells([]Cell{{ID: "a", Addr: addrA, Pool: "p"}, {ID: "b", Addr: addrB, Pool: "p"}})
	t.Cleanup(m.close)
	// 3 failures in 20 (85%) with no run of 3: below 90% success.
	for i := range 20 {
		m.Observe("a", i%7 != 5) // failures at 5, 12, 19
		clock.Add(time.Second)   // spread out so the time window sees little
	}
	if m.Share("a") != 0 {
		t.Fatal("success rate over the last N did not eject")
	}
	wantEjections(t, m, "a", CauseSuccessRate, 1)
	wantEjections(t, m, "b", CauseSuccessRate, 0)
}

func TestRunStops(t *testing.T) {
	rec := &recorder{}
	addrA, _ := healthServer(t)
	m, err := New(Config{OnChange: rec.on, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m.SetCells([]Cell{{ID: "a", Addr: addrA, Pool: "p"}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop")
	}
	// A table change read as Run ends (the GTR's follower) dials nothing:
	// no connection is left that no one closes.
	m.SetCells([]Cell{{ID: "b", Addr: addrA, Pool: "p"}})
	if n := len(*m.cells.Load()); n != 0 {
		t.Fatalf("%d cells watched after Run ended", n)
	}
}

// slowHealth answers gRPC health checks SERVING, after delay while slow is
// set.
type slowHealth struct {
	healthpb.UnimplementedHealthServer
	slow  atomic.Bool
	delay time.Duration
}

func (h *slowHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if h.slow.Load() {
		select {
		case <-time.After(h.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// serveSlowHealth serves a slowHealth (5 s late while slow) on loopback
// until the test ends.
func serveSlowHealth(t *testing.T) (*slowHealth, string) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &slowHealth{delay: 5 * time.Second}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, h)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return h, lis.Addr().String()
}

// TestSlowChecksAreNotDeath: a cell whose health check times out once or
// twice (busy) keeps its share; one that stays silent for SlowChecks checks
// in a row is ejected.
func TestSlowChecksAreNotDeath(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	rec := &recorder{}
	h, addrA := serveSlowHealth(t)
	addrB, _ := healthServer(t)
	m, err := New(Config{Now: clock.Now, OnChange: rec.on, CheckTimeout: 100 * time.Millisecond, SlowChecks: 3, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	m.SetCells([]Cell{{ID: "a", Addr: addrA, Pool: "p"}, {ID: "b", Addr: addrB, Pool: "p"}})
	t.Cleanup(m.close)
	m.checkAll(ctxT(t)) // connections up
	h.slow.Store(true)
	for i := range 2 {
		m.checkAll(ctxT(t))
		if m.Share("a") != 100 {
			t.Fatalf("ejected after %d slow checks, want to tolerate 2", i+1)
		}
	}
	h.slow.Store(false)
	m.checkAll(ctxT(t)) // an answer resets the run
	h.slow.Store(true)
	for range 2 {
		m.checkAll(ctxT(t))
	}
	if m.Share("a") != 100 {
		t.Fatal("a run of slow checks was not reset by an answer")
	}
	m.checkAll(ctxT(t))
	if m.Share("a") != 0 {
		t.Fatalf("share %d after 3 silent checks in a row, want ejected", m.Share("a"))
	}
	wantEjections(t, m, "a", CauseChecksUnanswered, 1)
}

// TestBusyCellIsNotEjected: a cell whose health checks time out while it
// answers transactions is busy, not dead, and keeps its share; timeouts of
// transactions are no sign of life; once its answers stop for
// SlowChecks × Interval, the next slow check ejects it, naming why.
func TestBusyCellIsNotEjected(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	rec := &recorder{}
	h, addrA := serveSlowHealth(t)
	addrB, _ := healthServer(t)
	var logged strings.Builder
	var logMu sync.Mutex
	m, err := New(Config{Now: clock.Now, OnChange: rec.on, Interval: 250 * time.Millisecond, CheckTimeout: 50 * time.Millisecond, SlowChecks: 3,
		Log: slog.New(slog.NewTextHandler(&lockedWriter{w: &logged, mu: &logMu}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	m.SetCells([]Cell{{ID: "a", Addr: addrA, Pool: "p"}, {ID: "b", Addr: addrB, Pool: "p"}})
	t.Cleanup(m.close)
	m.checkAll(ctxT(t)) // connections up
	h.slow.Store(true)
	for i := range 8 {
		clock.Add(250 * time.Millisecond)
		m.Record("a", Answered)
		m.Record("a", TimedOut)
		m.checkAll(ctxT(t))
		if m.Share("a") != 100 {
			t.Fatalf("a cell answering transactions was ejected after %d slow checks", i+1)
		}
	}
	// Only timeouts from here: after 750 ms without an answer it is dead.
	for range 3 {
		clock.Add(250 * time.Millisecond)
		m.Record("a", TimedOut)
		m.checkAll(ctxT(t))
	}
	if m.Share("a") != 0 {
		t.Fatalf("share %d after 750 ms of silence from checks and transactions, want ejected", m.Share("a"))
	}
	logMu.Lock()
	defer logMu.Unlock()
	if l := logged.String(); !strings.Contains(l, "busy, not ejected") || !strings.Contains(l, "no answer in time") {
		t.Fatalf("the log does not say the cell was busy, then why it was ejected:\n%s", l)
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestStatsIsTheWindowThatEjects: the success rate Stats reports (what
// gtrctl cells shows) is the one the ejection decides on, and an ejection
// resets it, so a cell ramping back is not judged by the failures that
// took it out.
func TestStatsIsTheWindowThatEjects(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	rec := &recorder{}
	m, err := New(Config{Now: clock.Now, OnChange: rec.on, SuccessWindow: 20, SuccessRate: 0.9, FailureRate: 1, MinRequests: 1000,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	m.SetCells([]Cell{{ID: "a", Addr: "127.0.0.1:1", Pool: "p"}, {ID: "b", Addr: "127.0.0.1:2", Pool: "p"}})
	t.Cleanup(m.close)
	if st := m.Stats("a"); st.Recent != 0 || st.SuccessRate != -1 {
		t.Fatalf("fresh cell: %+v", st)
	}
	// Failures at 1 and 11, never two in a row: 18 of 20, exactly 90%.
	for i := range 20 {
		m.Observe("a", i%10 != 1)
		clock.Add(time.Second)
	}
	if st := m.Stats("a"); st.Recent != 20 || st.SuccessRate != 0.9 || m.Share("a") != 100 {
		t.Fatalf("at the threshold: %+v, share %d", st, m.Share("a"))
	}
	// One more failure pushes out an ok: 17 of 20 is below 90%, by the
	// same window Stats reports.
	m.Observe("a", false)
	if m.Share("a") != 0 {
		t.Fatalf("not ejected at 85%% success (stats %+v)", m.Stats("a"))
	}
	if st := m.Stats("a"); st.Recent != 0 || st.SuccessRate != -1 || st.WindowRequests != 0 {
		t.Fatalf("window not reset on ejection: %+v", st)
	}
	if got := rec.shares("a"); len(got) != 1 || got[0] != 0 {
		t.Fatalf("reported %v", got)
	}
}

// TestObserveConcurrentWithChecks runs the payment path's observations
// against active checks and cell changes, for the race detector, and
// checks that a pool never loses its last cell.
func TestObserveConcurrentWithChecks(t *testing.T) {
	addr, _ := healthServer(t)
	rec := &recorder{}
	m, err := New(Config{OnChange: rec.on, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	cells := []Cell{{ID: "a", Addr: addr, Pool: "p"}, {ID: "b", Addr: addr, Pool: "p"}, {ID: "c", Addr: addr, Pool: "p"}}
	m.SetCells(cells)
	t.Cleanup(m.close)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				m.Observe(cells[(g+i)%3].ID, false)
			}
		})
	}
	wg.Go(func() {
		for range 5 {
			m.checkAll(ctxT(t))
			m.SetCells(cells)
		}
	})
	wg.Wait()
	up := 0
	for _, c := range cells {
		if m.Share(c.ID) > 0 {
			up++
		}
	}
	if up == 0 {
		t.Fatal("every cell of the pool ejected")
	}
}
