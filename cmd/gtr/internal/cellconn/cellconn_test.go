package cellconn

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	hs "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// instance is a fake cell instance over real gRPC on loopback: it serves
// grpc.health.v1 and answers Get with its own name, so a test sees which
// instance served each request. While hold is above zero it keeps that
// many Get calls waiting until release is closed.
type instance struct {
	cellproto.UnimplementedCellServer
	name    string
	addr    string
	srv     *grpc.Server
	health  *hs.Server
	hits    atomic.Int32
	hold    atomic.Int32
	held    atomic.Int32
	release chan struct{}
}

func (in *instance) Get(ctx context.Context, _ *cellproto.GetRequest) (*cellpayv1.Transaction, error) {
	in.hits.Add(1)
	if in.hold.Add(-1) >= 0 {
		in.held.Add(1)
		select {
		case <-in.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &cellpayv1.Transaction{CellId: in.name}, nil
}

func startInstance(t *testing.T, name string, opts ...grpc.ServerOption) *instance {
	t.Helper()
	return startInstanceAt(t, name, "127.0.0.1:0", opts...)
}

// startInstanceAt is startInstance listening on addr.
func startInstanceAt(t *testing.T, name, addr string, opts ...grpc.ServerOption) *instance {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{name: name, addr: lis.Addr().String(), srv: grpc.NewServer(opts...), health: hs.NewServer(), release: make(chan struct{})}
	cellproto.RegisterCellServer(in.srv, in)
	healthpb.RegisterHealthServer(in.srv, in.health)
	go in.srv.Serve(lis)
	t.Cleanup(in.srv.Stop)
	return in
}

func (in *instance) serving(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	in.health.SetServingStatus("", st)
}

// cellOf is a two-instance cell's client from a fresh pool, balanced by b.
func cellOf(t *testing.T, b routing.Balancer, insts ...*instance) cellproto.CellClient {
	t.Helper()
	return cellWith(t, b, nil, insts...)
}

// cellWith is cellOf with the pool's dial options.
func cellWith(t *testing.T, b routing.Balancer, opts []grpc.DialOption, insts ...*instance) cellproto.CellClient {
	t.Helper()
	p := New(opts...)
	t.Cleanup(p.Close)
	c := &routing.Cell{ID: "cell-a", Pool: "main"}
	for _, in := range insts {
		c.Addrs = append(c.Addrs, in.addr)
	}
	cl, err := p.Client(c, b)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// get sends one request and names the instance that served it, "" on an
// error.
func get(t *testing.T, c cellproto.CellClient) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	txn, err := c.Get(ctx, &cellproto.GetRequest{PartnerId: "p", TransactionId: "t"})
	if err != nil {
		return ""
	}
	return txn.GetCellId()
}

// count sends n requests one after the other and counts them by the
// instance that served them ("" for failures).
func count(t *testing.T, c cellproto.CellClient, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		got[get(t, c)]++
	}
	return got
}

// TestRoundRobin: requests alternate over the healthy instances; a
// NOT_SERVING instance takes none until it serves again.
func TestRoundRobin(t *testing.T) {
	a, b := startInstance(t, "a"), startInstance(t, "b")
	c := cellOf(t, routing.BalanceRoundRobin, a, b)
	testutil.Eventually(t, 5*time.Second, "both instances serving", func() bool { got := count(t, c, 4); return got["a"] > 0 && got["b"] > 0 })
	if got := count(t, c, 40); got["a"] != 20 || got["b"] != 20 {
		t.Fatalf("40 requests went %v, want 20 to each", got)
	}
	a.serving(false)
	testutil.Eventually(t, 5*time.Second, "a out of the rotation", func() bool { return count(t, c, 2)["a"] == 0 })
	if got := count(t, c, 20); got["b"] != 20 {
		t.Fatalf("with a NOT_SERVING: %v, want all on b", got)
	}
	a.serving(true)
	testutil.Eventually(t, 5*time.Second, "a back in the rotation", func() bool { return count(t, c, 4)["a"] == 2 })
}

// TestLeastRequest: with requests outstanding on one instance, most new
// ones go to the other. least_request samples two instances at random
// (with replacement) and takes the less loaded, so a quarter land on the
// loaded one; round robin would put half there.
func TestLeastRequest(t *testing.T) {
	a, b := startInstance(t, "a"), startInstance(t, "b")
	c := cellOf(t, routing.BalanceLeastRequest, a, b)
	testutil.Eventually(t, 5*time.Second, "both instances serving", func() bool { got := count(t, c, 8); return got["a"] > 0 && got["b"] > 0 })
	const held = 3
	a.hold.Store(held)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(a.release)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for a.held.Load() < held {
		// Requests until a holds three: those b gets return at once.
		wg.Go(func() { _, _ = c.Get(ctx, &cellproto.GetRequest{}) })
		time.Sleep(time.Millisecond)
		if a.hits.Load() > 1000 {
			t.Fatal("a never held its requests")
		}
	}
	got := count(t, c, 200)
	if got["b"] < 125 || got[""] != 0 {
		t.Fatalf("with %d outstanding on a: %v, want at least 125 of 200 on b", held, got)
	}
}

// TestPriority: everything goes to the first instance while it serves;
// to the second while the first is NOT_SERVING or stopped; and back to
// the first as soon as it serves again.
func TestPriority(t *testing.T) {
	a, b := startInstance(t, "a"), startInstance(t, "b")
	c := cellOf(t, routing.BalancePriority, a, b)
	testutil.Eventually(t, 5*time.Second, "a serving", func() bool { return get(t, c) == "a" })
	if got := count(t, c, 20); got["a"] != 20 {
		t.Fatalf("both serving: %v, want all on a", got)
	}
	a.serving(false)
	testutil.Eventually(t, 5*time.Second, "b taking over", func() bool { return get(t, c) == "b" })
	if got := count(t, c, 20); got["b"] != 20 {
		t.Fatalf("a NOT_SERVING: %v, want all on b", got)
	}
	a.serving(true)
	testutil.Eventually(t, 5*time.Second, "a back", func() bool { return get(t, c) == "a" })
	if got := count(t, c, 20); got["a"] != 20 {
		t.Fatalf("a serving again: %v, want all on a", got)
	}
	a.srv.Stop()
	testutil.Eventually(t, 5*time.Second, "b taking over", func() bool { return get(t, c) == "b" })
	if got := count(t, c, 20); got["b"] != 20 {
		t.Fatalf("a stopped: %v, want all on b", got)
	}
}

// TestInstanceDiesUnderLoad: an instance stopped while requests flow
// costs at most the requests in flight on it; every later one goes to the
// survivor.
func TestInstanceDiesUnderLoad(t *testing.T) {
	a, b := startInstance(t, "a"), startInstance(t, "b")
	c := cellOf(t, routing.BalanceRoundRobin, a, b)
	testutil.Eventually(t, 5*time.Second, "both instances serving", func() bool { got := count(t, c, 4); return got["a"] > 0 && got["b"] > 0 })
	const workers = 4
	var failed, served atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if get(t, c) == "" {
					failed.Add(1)
				} else {
					served.Add(1)
				}
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	a.srv.Stop()
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if f := failed.Load(); f > workers {
		t.Fatalf("%d requests failed (of %d), more than the %d that may have been in flight on a", f, f+served.Load(), workers)
	}
	if got := count(t, c, 20); got["b"] != 20 {
		t.Fatalf("after a stopped: %v, want all on b", got)
	}
}

// TestReconnectsSoonAfterALongOutage: a cell that was down long enough
// for gRPC's default reconnect back-off to reach several seconds (it grows
// to two minutes) serves payments again within about a second of coming
// back: the pool dials with hop.Reconnect. With gRPC's default, the
// attempt after a 12 s outage comes about 3.8 s after the cell is back (at
// 15.8 s), and never before 12.6 s.
func TestReconnectsSoonAfterALongOutage(t *testing.T) {
	t.Parallel()
	a := startInstance(t, "a")
	c := cellOf(t, routing.BalanceRoundRobin, a)
	testutil.Eventually(t, 5*time.Second, "a serving", func() bool { return get(t, c) == "a" })
	a.srv.Stop()
	down := time.Now()
	for time.Since(down) < 12*time.Second { // the GTR keeps trying the cell
		if got := get(t, c); got != "" {
			t.Fatalf("served by %q while down", got)
		}
		time.Sleep(500 * time.Millisecond)
	}
	startInstanceAt(t, "a", a.addr)
	back := time.Now()
	testutil.Eventually(t, 2500*time.Millisecond, "a serving again", func() bool { return get(t, c) == "a" })
	t.Logf("served again %v after the cell came back", time.Since(back).Round(10*time.Millisecond))
}

// TestPoolRedialsOnChange: a cell's connection is reused while its
// addresses and balancer stay, replaced when they change, and dropped
// when the cell leaves the table.
func TestPoolRedialsOnChange(t *testing.T) {
	a, b := startInstance(t, "a"), startInstance(t, "b")
	p := New()
	defer p.Close()
	c := &routing.Cell{ID: "cell-a", Addrs: []string{a.addr, b.addr}}
	first, _ := p.Client(c, routing.BalancePriority)
	same, _ := p.Client(&routing.Cell{ID: "cell-a", Addrs: []string{a.addr, b.addr}}, routing.BalancePriority)
	if first != same {
		t.Fatal("same addresses and balancer, new connection")
	}
	if a := testing.AllocsPerRun(100, func() { _, _ = p.Client(c, routing.BalancePriority) }); a != 0 {
		t.Fatalf("Client allocates %v times for a known cell", a)
	}
	reordered, _ := p.Client(&routing.Cell{ID: "cell-a", Addrs: []string{b.addr, a.addr}}, routing.BalancePriority)
	if reordered == first {
		t.Fatal("reordered instances kept the connection")
	}
	// A connecting priority balancer takes whichever instance is ready
	// first, then the first in order once it is.
	testutil.Eventually(t, 5*time.Second, "the new order in force", func() bool { return get(t, reordered) == "b" })
	if rr, _ := p.Client(&routing.Cell{ID: "cell-a", Addrs: []string{b.addr, a.addr}}, routing.BalanceRoundRobin); rr == reordered {
		t.Fatal("another balancer kept the connection")
	}
	p.Forget(func(string) bool { return false })
	if len(p.conns) != 0 {
		t.Fatal("Forget kept a connection")
	}
}

// TestInstancesOverMutualTLS: as the platform runs it, each instance
// serves mutual TLS with the cells' policy and a certificate for its own
// host; the GTR's connection authenticates every instance, health-checks
// each (NOT_SERVING takes one out), and reaches both.
func TestInstancesOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Issue("gtr", []string{hop.GTR}, pki.Client); err != nil {
		t.Fatal(err)
	}
	if err := ca.Issue("cell-a", []string{"127.0.0.1", hop.Cell("cell-a")}, pki.Server); err != nil {
		t.Fatal(err)
	}
	files := func(name string) tlsconf.Files {
		return tlsconf.Files{Cert: pki.CertFile(dir, name), Key: pki.KeyFile(dir, name), CA: ca.CertFile()}
	}
	srvOpts, stopSrv, err := hop.ServerOptions(files("cell-a"), hop.CellPolicy)
	if err != nil {
		t.Fatal(err)
	}
	defer stopSrv()
	dial, stopDial, err := hop.DialOption(files("gtr"), hop.Only(hop.Cell("cell-a")))
	if err != nil {
		t.Fatal(err)
	}
	defer stopDial()
	a, b := startInstance(t, "a", srvOpts...), startInstance(t, "b", srvOpts...)
	c := cellWith(t, routing.BalanceRoundRobin, []grpc.DialOption{dial}, a, b)
	testutil.Eventually(t, 5*time.Second, "both instances serving over mutual TLS", func() bool { got := count(t, c, 4); return got["a"] > 0 && got["b"] > 0 })
	a.serving(false)
	testutil.Eventually(t, 5*time.Second, "a out of the rotation", func() bool { return count(t, c, 2)["a"] == 0 })
	if got := count(t, c, 10); got["b"] != 10 {
		t.Fatalf("with a NOT_SERVING over mutual TLS: %v, want all on b", got)
	}
}

// TestConnectBeforeTheFirstRequest: Connect opens every cell's connection
// of the table and WaitConnected returns once each has tried: ready for a
// live instance, failed for a port nothing listens on, without waiting
// out its context for the dead one.
func TestConnectBeforeTheFirstRequest(t *testing.T) {
	a := startInstance(t, "a")
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	table, err := routing.Compile(routing.Spec{Version: 1,
		Cells: []routing.Cell{{ID: "live", Addr: a.addr, Pool: "p"}, {ID: "dead", Addr: deadAddr, Pool: "p"}},
		Rules: []routing.Rule{{Name: "all", Pool: "p"}}})
	if err != nil {
		t.Fatal(err)
	}
	p := New()
	defer p.Close()
	p.Connect(table)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if waiting := p.WaitConnected(ctx); len(waiting) != 0 {
		t.Fatalf("still connecting after 10 s: %v", waiting)
	}
	if ctx.Err() != nil {
		t.Fatal("WaitConnected waited out its context for a dead cell")
	}
	p.mu.RLock()
	live, deadState := p.conns["live"].conn.GetState(), p.conns["dead"].conn.GetState()
	p.mu.RUnlock()
	if live != connectivity.Ready || deadState != connectivity.TransientFailure {
		t.Fatalf("states live %v, dead %v; want READY and TRANSIENT_FAILURE", live, deadState)
	}
	if a.hits.Load() != 0 {
		t.Fatal("connecting sent a request")
	}
}
