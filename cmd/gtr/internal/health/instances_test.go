package health

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	hs "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cellpay/cellpay/internal/dev/testutil"
)

// stoppableHealth serves gRPC health on loopback until stop.
func stoppableHealth(t *testing.T) (addr string, set func(bool), stop func()) {
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
	return lis.Addr().String(), func(ok bool) {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if ok {
			st = healthpb.HealthCheckResponse_SERVING
		}
		h.SetServingStatus("", st)
	}, s.Stop
}

func states(in []InstanceHealth) string {
	var b []string
	for _, i := range in {
		st := map[InstanceState]string{InstanceUnknown: "?", InstanceUp: "up", InstanceDown: "down"}[i.State]
		if i.Detail != "" {
			st += "(" + i.Detail + ")"
		}
		b = append(b, st)
	}
	return strings.Join(b, " ")
}

// TestCellHealthyWhileAnyInstanceIs: each instance is probed on its own
// and shown; the cell keeps its share while one serves, is ejected when
// none does (as a one-instance cell is), and is re-admitted when one
// serves again.
func TestCellHealthyWhileAnyInstanceIs(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	rec := &recorder{}
	a1, set1, stop1 := stoppableHealth(t)
	a2, _, stop2 := stoppableHealth(t)
	b, _, _ := stoppableHealth(t)
	m := newMonitor(t, clock, rec, Cell{ID: "a", Addrs: []string{a1, a2}, Pool: "p"}, Cell{ID: "b", Addr: b, Pool: "p"})
	if got := m.Instances("a"); len(got) != 2 || got[0].Addr != a1 || got[1].Addr != a2 || got[0].State != InstanceUnknown {
		t.Fatalf("before any check: %+v", got)
	}
	m.checkAll(ctxT(t))
	if got := states(m.Instances("a")); got != "up up" {
		t.Fatalf("instances %s, want up up", got)
	}
	set1(false)
	m.checkAll(ctxT(t))
	if got := states(m.Instances("a")); got != "down(NOT_SERVING) up" || m.Share("a") != 100 {
		t.Fatalf("one instance NOT_SERVING: instances %s, share %d; want the cell at 100", got, m.Share("a"))
	}
	stop2()
	m.checkAll(ctxT(t))
	if got := states(m.Instances("a")); got != "down(NOT_SERVING) down(Unavailable)" || m.Share("a") != 0 {
		t.Fatalf("no instance serving: instances %s, share %d; want ejected", got, m.Share("a"))
	}
	if got := rec.shares("a"); !slices.Equal(got, []int{0}) {
		t.Fatalf("share changes %v, want one ejection", got)
	}
	set1(true)
	clock.Add(1100 * time.Millisecond)
	m.checkAll(ctxT(t))
	if m.Share("a") != 10 {
		t.Fatalf("share %d, want re-admitted on 10 with one instance serving", m.Share("a"))
	}
	stop1()
	if got := m.Instances("b"); len(got) != 1 || got[0].Addr != b || got[0].State != InstanceUp {
		t.Fatalf("one-address cell: %+v", got)
	}
	if m.Instances("nope") != nil {
		t.Fatal("instances of an unknown cell")
	}
}

// TestDNSInstances: a dns:/// cell is probed at every address its name
// resolves to, and is up while one serves.
func TestDNSInstances(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	a, _, _ := stoppableHealth(t)
	b, _, _ := stoppableHealth(t)
	_, port, _ := net.SplitHostPort(a)
	m := newMonitor(t, clock, &recorder{}, Cell{ID: "a", Addr: "dns:///localhost:" + port, Pool: "p"}, Cell{ID: "b", Addr: b, Pool: "p"})
	m.checkAll(ctxT(t))
	var found bool
	for _, in := range m.Instances("a") {
		if in.Addr == a {
			found = in.State == InstanceUp
		}
	}
	if !found || m.Share("a") != 100 {
		t.Fatalf("instances %+v, share %d: want %s up", m.Instances("a"), m.Share("a"), a)
	}
	m.SetCells([]Cell{{ID: "a", Addr: "dns:///no-such-host.invalid:1", Pool: "p"}, {ID: "b", Addr: b, Pool: "p"}})
	m.checkAll(ctxT(t))
	if m.Share("a") != 0 || len(m.Instances("a")) != 0 {
		t.Fatalf("a name that does not resolve: share %d, instances %+v", m.Share("a"), m.Instances("a"))
	}
}

// serveHealth serves gRPC health, SERVING, at addr ("127.0.0.1:0" for any
// port) until the returned stop; it returns the address it listens on.
func serveHealth(t *testing.T, addr string) (string, func()) {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, hs.NewServer())
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String(), s.Stop
}

// TestReadmittedSoonAfterALongOutage: a cell that was down long enough for
// gRPC's default reconnect back-off to reach several seconds (it grows to
// two minutes) is re-admitted within about its own ejection once it serves
// again: the monitor dials with hop.ReconnectWithin its check interval.
// With gRPC's default, the attempt after a 12 s outage comes about 3.8 s
// after the cell is back (at 15.8 s), and never before 12.6 s.
func TestReadmittedSoonAfterALongOutage(t *testing.T) {
	t.Parallel()
	addr, stop := serveHealth(t, "127.0.0.1:0")
	other, _ := serveHealth(t, "127.0.0.1:0")
	rec := &recorder{}
	m, err := New(Config{OnChange: rec.on, Interval: 50 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	m.SetCells([]Cell{{ID: "a", Addr: addr, Pool: "p"}, {ID: "b", Addr: other, Pool: "p"}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	testutil.Eventually(t, 5*time.Second, "a checked", func() bool { return states(m.Instances("a")) == "up" })
	stop()
	testutil.Eventually(t, 5*time.Second, "a ejected", func() bool { return m.Share("a") == 0 })
	time.Sleep(12 * time.Second)
	serveHealth(t, addr)
	back := time.Now()
	// The ejection is BaseEjection (1 s) from the last failed check; the
	// bound allows 1.5 s more for the reconnect (within 50 ms) and the
	// checks.
	testutil.Eventually(t, 2500*time.Millisecond, "a re-admitted", func() bool { return m.Share("a") > 0 })
	t.Logf("re-admitted %v after the cell served again", time.Since(back).Round(10*time.Millisecond))
}
