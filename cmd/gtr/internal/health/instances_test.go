package health

import (
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	hs "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
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
