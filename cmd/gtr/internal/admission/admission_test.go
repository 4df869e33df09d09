package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/cmd/gtr/internal/auth"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/pkg/api/apierr"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClock() *fakeClock { return &fakeClock{t: time.Unix(1_800_000_000, 0)} }

// feed releases n attempts of the given latency, with the cell kept at its
// limit (a loaded cell): each round acquires as many as the limit admits,
// then releases them. at, if set, is called before each round's releases
// with the round's size.
func feed(t *testing.T, l *CellLimit, n int, latency time.Duration, o Outcome) {
	t.Helper()
	feedWith(t, l, n, latency, o, nil)
}

func feedWith(t *testing.T, l *CellLimit, n int, latency time.Duration, o Outcome, at func(k int)) {
	t.Helper()
	for n > 0 {
		k := 0
		for k < n && l.Acquire() {
			k++
		}
		if k == 0 {
			t.Fatalf("Acquire refused with %d in flight, limit %d", l.InFlight(), l.Limit())
		}
		if at != nil {
			at(k)
		}
		for range k {
			l.Release(latency, o)
		}
		n -= k
	}
}

func TestCellLimitAdapts(t *testing.T) {
	cells := NewCells(CellConfig{InitialLimit: 32, MinLimit: 4, MaxLimit: 256, Window: 10})
	l := cells.Cell("c1")
	if l != cells.Cell("c1") {
		t.Fatal("Cell returned a new limit for the same cell")
	}
	// Unloaded: 2 ms answers; the limit grows.
	feed(t, l, 200, 2*time.Millisecond, Served)
	grown := l.Limit()
	if grown <= 32 {
		t.Fatalf("limit %d after fast answers, want above the initial 32", grown)
	}
	// Queueing: 20 ms answers (10× the unloaded latency); the limit falls.
	feed(t, l, 200, 20*time.Millisecond, Served)
	if l.Limit() >= grown/2 {
		t.Fatalf("limit %d after slow answers, want well under %d", l.Limit(), grown)
	}
	// Timeouts: the limit halves per window, down to the floor.
	feed(t, l, 100, time.Second, Dropped)
	if l.Limit() != 4 {
		t.Fatalf("limit %d after timeouts, want the floor 4", l.Limit())
	}
	// Answers about the request say nothing about load.
	before := l.Limit()
	feed(t, l, 100, time.Hour, Ignored)
	if l.Limit() != before {
		t.Fatalf("ignored samples moved the limit: %d → %d", before, l.Limit())
	}
	// Recovery: fast answers again raise it, within the ceiling.
	feed(t, l, 2000, 2*time.Millisecond, Served)
	if l.Limit() <= 64 || l.Limit() > 256 {
		t.Fatalf("limit %d after recovery, want in (64, 256]", l.Limit())
	}
}

func TestCellLimitSheds(t *testing.T) {
	cells := NewCells(CellConfig{InitialLimit: 4, MinLimit: 4, Window: 1000})
	l := cells.Cell("c1")
	for range 4 {
		if !l.Acquire() {
			t.Fatal("refused under the limit")
		}
	}
	if l.Acquire() {
		t.Fatal("admitted a fifth attempt at limit 4")
	}
	if l.Shed() != 1 {
		t.Fatalf("shed = %d, want 1", l.Shed())
	}
	l.Release(time.Millisecond, Served)
	if !l.Acquire() {
		t.Fatal("refused after a slot came back")
	}
	// A disabled limiter and a nil one admit everything.
	off := NewCells(CellConfig{InitialLimit: 1, Disabled: true}).Cell("c1")
	var none *CellLimit
	for range 100 {
		if !off.Acquire() || !none.Acquire() {
			t.Fatal("a disabled or nil limit refused")
		}
	}
}

// TestRetryAfterFollowsLatency: the retry hint of a refusal is the
// latency the limit last served at, within its bounds; before any
// sample, and for a nil or disabled limit, the floor.
func TestRetryAfterFollowsLatency(t *testing.T) {
	l := NewCells(CellConfig{Window: 10}).Cell("c1")
	var none *CellLimit
	off := NewCells(CellConfig{Disabled: true}).Cell("c1")
	if l.RetryAfter() != MinRetryAfter || none.RetryAfter() != MinRetryAfter || off.RetryAfter() != MinRetryAfter {
		t.Fatalf("before any sample: %v, nil %v, disabled %v; want %v", l.RetryAfter(), none.RetryAfter(), off.RetryAfter(), MinRetryAfter)
	}
	for _, c := range []struct{ latency, want time.Duration }{
		{700 * time.Millisecond, 700 * time.Millisecond},
		{time.Millisecond, MinRetryAfter},
		{time.Minute, MaxRetryAfter},
	} {
		feed(t, l, 10, c.latency, Served)
		if got := l.RetryAfter(); got != c.want {
			t.Fatalf("after a window served at %v: RetryAfter %v, want %v", c.latency, got, c.want)
		}
	}
	// Timeouts are no latency to wait out: the hint stays the last served.
	feed(t, l, 10, time.Hour, Dropped)
	if got := l.RetryAfter(); got != MaxRetryAfter {
		t.Fatalf("after a window of timeouts: %v, want the last served latency's %v", got, MaxRetryAfter)
	}
}

// feedAt is feed at rate attempts a second of the clock.
func feedAt(t *testing.T, c *fakeClock, l *CellLimit, n int, rate float64, latency time.Duration) {
	t.Helper()
	feedWith(t, l, n, latency, Served, func(k int) { c.Add(time.Duration(float64(k) * float64(time.Second) / rate)) })
}

func TestCellLimitLearnsASlowerNormal(t *testing.T) {
	t.Run("windows", func(t *testing.T) {
		l := NewCells(CellConfig{InitialLimit: 32, Window: 10, LongWindows: 10}).Cell("c1")
		feed(t, l, 100, time.Millisecond, Served)
		feed(t, l, 3000, 10*time.Millisecond, Served)
		if l.Limit() < 32 {
			t.Fatalf("limit %d: a permanently slower cell is starved", l.Limit())
		}
	})
	c := newClock()
	l := NewCells(CellConfig{InitialLimit: 32, Window: 10, Baseline: time.Second, Now: c.Now}).Cell("c1")
	feedAt(t, c, l, 100, 100, time.Millisecond)
	// The cell becomes slower for good (say, a bigger table): its new
	// normal is learned within a few Baselines, and the limit recovers
	// instead of starving it.
	feedAt(t, c, l, 1000, 100, 10*time.Millisecond)
	if l.Limit() < 32 {
		t.Fatalf("limit %d: a permanently slower cell is starved", l.Limit())
	}
}

// TestShedBaselineWhileShedding: ShedBaseline slows the long-term
// average's rise only while the limit refuses attempts. A cell kept at its
// limit (every round refuses one) whose latency rises tenfold learns it
// more slowly with ShedBaseline than without; a cell below its limit
// learns it as fast with as without.
func TestShedBaselineWhileShedding(t *testing.T) {
	long := func(shedBaseline time.Duration, atLimit bool) float64 {
		c := newClock()
		l := NewCells(CellConfig{InitialLimit: 64, MaxLimit: 64, Window: 20, Baseline: 10 * time.Second, ShedBaseline: shedBaseline, Now: c.Now}).Cell("c1")
		run := func(n int, latency time.Duration) {
			if atLimit {
				feedAt(t, c, l, n, 1000, latency)
				return
			}
			for range n / 3 { // three at a time: under the floor of 4, never at the limit
				for range 3 {
					if !l.Acquire() {
						t.Fatalf("refused below the limit (%d in flight, limit %d)", l.InFlight(), l.Limit())
					}
				}
				c.Add(3 * time.Millisecond)
				for range 3 {
					l.Release(latency, Served)
				}
			}
		}
		run(2000, 2*time.Millisecond)
		run(3000, 20*time.Millisecond)
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.long
	}
	plain, slow := long(0, true), long(time.Minute, true)
	if !(slow < plain*0.7) {
		t.Fatalf("at the limit: the average rose to %.1f ms with ShedBaseline, %.1f ms without; want well below", slow*1e3, plain*1e3)
	}
	if a, b := long(0, false), long(time.Minute, false); a != b {
		t.Fatalf("below the limit: %.2f ms with ShedBaseline, %.2f ms without; want the same", b*1e3, a*1e3)
	}
}

// TestCellLimitShedsASustainedQueue: with Baseline, at a high rate, a
// latency ten times the normal for a second is a queue, not a new normal:
// the limit falls and stays down. With a Baseline of 30 ms, about what
// the default rule (30 windows of 20) spans at this rate, the limit grows
// back while the queue goes on and the test fails.
func TestCellLimitShedsASustainedQueue(t *testing.T) {
	c := newClock()
	l := NewCells(CellConfig{InitialLimit: 64, MinLimit: 4, Window: 20, Baseline: 10 * time.Second, Now: c.Now}).Cell("c1")
	feedAt(t, c, l, 2000, 2000, 2*time.Millisecond)
	before := l.Limit()
	feedAt(t, c, l, 2000, 2000, 20*time.Millisecond)
	if l.Limit() > 8 {
		t.Fatalf("limit %d (from %d) after a second of queueing at 2,000/s, want near the floor 4", l.Limit(), before)
	}
	// When the queue drains, the limit comes back.
	feedAt(t, c, l, 4000, 2000, 2*time.Millisecond)
	if l.Limit() < before {
		t.Fatalf("limit %d after the queue drained, want back to at least %d", l.Limit(), before)
	}
}

func partner(id string, rate float64, burst, inflight int) *partners.Partner {
	return &partners.Partner{ID: id, Status: partners.StatusActive, Limits: partners.Limits{RatePerSecond: rate, Burst: burst, MaxInFlight: inflight}}
}

func TestPartnerRateAndInFlight(t *testing.T) {
	clk := newClock()
	a := NewPartners(false, clk.Now)
	p := partner("p", 10, 5, 3)
	// The in-flight cap: three at once, the fourth refused.
	for range 3 {
		if v := a.Acquire(p); !v.OK {
			t.Fatalf("refused under the in-flight cap: %+v", v)
		}
	}
	if v := a.Acquire(p); v.OK || v.Reason != "in_flight" {
		t.Fatalf("fourth in flight: %+v", v)
	}
	for range 3 {
		a.Release("p")
	}
	// The rate: a burst of 5 (3 used), then 10/s.
	for range 2 {
		if v := a.Acquire(p); !v.OK {
			t.Fatalf("refused within the burst: %+v", v)
		}
		a.Release("p")
	}
	v := a.Acquire(p)
	if v.OK || v.Reason != "rate" || v.RetryAfter <= 0 || v.RetryAfter > 100*time.Millisecond {
		t.Fatalf("over the burst: %+v", v)
	}
	clk.Add(100 * time.Millisecond) // one token
	if v := a.Acquire(p); !v.OK {
		t.Fatalf("refused after a token came: %+v", v)
	}
	a.Release("p")
	// Another partner has its own bucket.
	if v := a.Acquire(partner("q", 10, 5, 3)); !v.OK {
		t.Fatalf("another partner refused: %+v", v)
	}
	// New limits in the registry apply at once.
	clk.Add(time.Second)
	bigger := partner("p", 1000, 100, 100)
	for i := range 50 {
		if v := a.Acquire(bigger); !v.OK {
			t.Fatalf("request %d refused after the limit was raised: %+v", i, v)
		}
		a.Release("p")
	}
	if a.Shed("p") != 2 {
		t.Fatalf("shed = %d, want 2", a.Shed("p"))
	}
}

// servePayments serves srv with opts on a loopback port until the test
// ends, and returns a plaintext client of it. Keys over plaintext only in
// these tests of admission: the metadata is set by hand, and gRPC's
// transport-security check applies to per-RPC credentials only.
func servePayments(t *testing.T, srv cellpayv1.PaymentsServer, opts []grpc.ServerOption) cellpayv1.PaymentsClient {
	t.Helper()
	gs := grpc.NewServer(opts...)
	cellpayv1.RegisterPaymentsServer(gs, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return cellpayv1.NewPaymentsClient(conn)
}

type okPayments struct {
	cellpayv1.UnimplementedPaymentsServer
	hold chan struct{}
}

func (s okPayments) SubmitTransaction(ctx context.Context, r *cellpayv1.SubmitTransactionRequest) (*cellpayv1.Transaction, error) {
	if s.hold != nil {
		<-s.hold
	}
	return &cellpayv1.Transaction{TransactionId: r.GetTransactionId()}, nil
}

// TestRefusalOverGRPC: a partner over its rate, or at its in-flight cap,
// gets RESOURCE_EXHAUSTED at once, saying a retry is safe, with the retry
// hint as a RetryInfo detail (and in the pushback trailer when the
// interceptor refused it; the tap's early answer has no trailers); another
// partner is served meanwhile. With the tap, each call still costs one
// rate token, not two; a call with a wrong key is refused UNAUTHENTICATED
// (by the tap, before any interceptor, when there is one), and one that
// acts for another partner PERMISSION_DENIED by the interceptors, which
// alone see the request.
func TestRefusalOverGRPC(t *testing.T) {
	for _, withTap := range []bool{false, true} {
		t.Run("tap="+strconv.FormatBool(withTap), func(t *testing.T) { testRefusalOverGRPC(t, withTap) })
	}
}

func testRefusalOverGRPC(t *testing.T, withTap bool) {
	reg := &partners.Registry{Version: 1}
	keys := map[string]string{}
	for _, id := range []string{"a", "b"} {
		k, key, _ := partners.NewKey(nil, time.Now())
		keys[id] = k
		p := partners.Partner{ID: id, Status: partners.StatusActive, Keys: []partners.Key{key}, Limits: partners.Limits{RatePerSecond: 1, Burst: 3, MaxInFlight: 2}}
		reg.Partners = append(reg.Partners, p)
	}
	ix, err := partners.Compile(reg)
	if err != nil {
		t.Fatal(err)
	}
	au := &auth.Partners{Index: func() *partners.Index { return ix }}
	lim := NewPartners(false, nil)
	var shed []string
	var mu sync.Mutex
	onShed := func(r string) { mu.Lock(); shed = append(shed, r); mu.Unlock() }
	var reached atomic.Int32
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		reached.Add(1)
		return h(ctx, req)
	}
	opts := append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(count)}, au.ServerOptions()...)
	opts = append(opts, grpc.ChainUnaryInterceptor(lim.UnaryInterceptor(onShed)))
	if withTap {
		opts = append(opts, grpc.InTapHandle(lim.Tap(au.FromHeader, RouterLimit{}, onShed)))
	}
	hold := make(chan struct{})
	c := servePayments(t, okPayments{hold: hold}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	callAs := func(key, p string, i int) (metadata.MD, error) {
		var tr metadata.MD
		_, err := c.SubmitTransaction(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key),
			&cellpayv1.SubmitTransactionRequest{PartnerId: p, TransactionId: p + strconv.Itoa(i)}, grpc.Trailer(&tr))
		return tr, err
	}
	call := func(p string, i int) (metadata.MD, error) { return callAs(keys[p], p, i) }
	refused := func(what string, tr metadata.MD, err error, maxRetry time.Duration) {
		t.Helper()
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("%s: %v, want RESOURCE_EXHAUSTED", what, err)
		}
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "not sent to any cell") {
			t.Fatalf("%s: the error does not say a retry is safe: %q", what, msg)
		}
		var retry *errdetails.RetryInfo
		for _, d := range status.Convert(err).Details() {
			if r, ok := d.(*errdetails.RetryInfo); ok {
				retry = r
			}
		}
		if d := retry.GetRetryDelay().AsDuration(); retry == nil || d <= 0 || d > maxRetry {
			t.Fatalf("%s: RetryInfo %v, want a delay in (0, %v]", what, retry, maxRetry)
		}
		// The trailer tells who refused: the tap's early answer has none.
		if ms := tr.Get(PushbackKey); withTap != (len(ms) == 0) {
			t.Fatalf("%s: %s trailer %v, want one only without the tap", what, PushbackKey, ms)
		}
	}

	// The in-flight cap: two held, the third refused.
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			if _, err := call("a", i); err != nil {
				t.Errorf("held call within the cap: %v", err)
			}
		})
	}
	testutil.Eventually(t, 5*time.Second, "two of a's calls in flight", func() bool { inflight, _ := lim.Share("a"); return inflight == 2 })
	tr, err := call("a", 2)
	refused("at the in-flight cap", tr, err, time.Second)
	close(hold)
	wg.Wait()
	// The rate: a burst of 3 (2 used, none by the refusal), then 1/s.
	if _, err := call("a", 3); err != nil {
		t.Fatalf("within the burst: %v", err)
	}
	tr, err = call("a", 4)
	refused("over the rate", tr, err, time.Second)
	if _, err := call("b", 0); err != nil {
		t.Fatalf("another partner: %v", err)
	}
	before := reached.Load()
	if _, err := callAs("not-a-key", "a", 5); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a wrong key: %v, want UNAUTHENTICATED", err)
	}
	if got := reached.Load() - before; withTap != (got == 0) {
		t.Fatalf("a wrong key reached the interceptors %d times; want none only with the tap", got)
	}
	if _, err := callAs(keys["b"], "a", 6); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("b's key for a: %v, want PERMISSION_DENIED", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(shed) != 2 || shed[0] != "partner_in_flight" || shed[1] != "partner_rate" {
		t.Fatalf("onShed: %v", shed)
	}
	if got := lim.Shed("a"); got != 2 {
		t.Fatalf("Shed(a) = %d, want 2", got)
	}
}

// TestTapRefusesAtTheRouterLimit: with the GTR-wide limit full, the tap
// refuses a partner's call before it is decoded or reaches an
// interceptor, as RESOURCE_EXHAUSTED saying a retry is safe, and without
// taking one of the partner's rate tokens; with a slot free again, the
// call passes.
func TestTapRefusesAtTheRouterLimit(t *testing.T) {
	k, key, _ := partners.NewKey(nil, time.Now())
	ix, err := partners.Compile(&partners.Registry{Version: 1, Partners: []partners.Partner{
		{ID: "a", Status: partners.StatusActive, Keys: []partners.Key{key}, Limits: partners.Limits{RatePerSecond: 1, Burst: 1, MaxInFlight: 10}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	au := &auth.Partners{Index: func() *partners.Index { return ix }}
	lim := NewPartners(false, nil)
	whole := NewCells(CellConfig{InitialLimit: 1, MinLimit: 1, MaxLimit: 1}).Cell(WholeGTR)
	var reached atomic.Int32
	var shed []string
	var mu sync.Mutex
	onShed := func(r string) { mu.Lock(); shed = append(shed, r); mu.Unlock() }
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		reached.Add(1)
		return h(ctx, req)
	}
	opts := append(au.ServerOptions(), grpc.ChainUnaryInterceptor(count, lim.UnaryInterceptor(onShed)),
		grpc.InTapHandle(lim.Tap(au.FromHeader, RouterLimit{Limit: whole}, onShed)))
	c := servePayments(t, okPayments{}, opts)
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+k), 10*time.Second)
	defer cancel()
	// A window of calls served at 700 ms: the limit's latency, and so
	// its retry hint.
	feed(t, whole, 20, 700*time.Millisecond, Served)
	if !whole.Acquire() {
		t.Fatal("the GTR-wide limit refused its first slot")
	}
	_, err = c.SubmitTransaction(ctx, &cellpayv1.SubmitTransactionRequest{PartnerId: "a", TransactionId: "t-1"})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), RouterBusy) ||
		!strings.Contains(status.Convert(err).Message(), "not sent to any cell") {
		t.Fatalf("at the GTR-wide limit: %v, want RESOURCE_EXHAUSTED saying the router is busy and a retry is safe", err)
	}
	if reached.Load() != 0 {
		t.Fatal("a call refused at the GTR-wide limit reached the interceptors")
	}
	if d := retryDelay(err); d != 700*time.Millisecond {
		t.Fatalf("retry hint %v, want the limit's served latency of 700ms", d)
	}
	whole.Release(0, Ignored)
	// The refusal took no rate token: the burst of 1 is still there.
	if _, err := c.SubmitTransaction(ctx, &cellpayv1.SubmitTransactionRequest{PartnerId: "a", TransactionId: "t-2"}); err != nil {
		t.Fatalf("with a slot free: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(shed) != 1 || shed[0] != "gtr_busy" {
		t.Fatalf("onShed: %v, want [gtr_busy]", shed)
	}
}

// TestAcquireShareKeepsTheLightPartner: at the GTR-wide limit, the
// partner whose flood filled it is shed, and one within its fair share is
// still admitted, up to half the limit again.
func TestAcquireShareKeepsTheLightPartner(t *testing.T) {
	l := NewCells(CellConfig{InitialLimit: 20, MinLimit: 4, Window: 1000}).Cell(WholeGTR)
	for range 20 {
		if !l.AcquireShare(20, 2) {
			t.Fatal("refused under the limit")
		}
	}
	// The tap's advance check agrees, and takes nothing.
	if !l.WouldRefuse(21, 2) || l.WouldRefuse(1, 2) || l.InFlight() != 20 {
		t.Fatalf("WouldRefuse disagrees with AcquireShare (in flight %d)", l.InFlight())
	}
	if l.AcquireShare(21, 2) {
		t.Fatal("at the limit, the partner holding it all was admitted")
	}
	if l.AcquireShare(1, 1) {
		t.Fatal("at the limit, with one partner only, a request was admitted")
	}
	for i := range 10 {
		if !l.AcquireShare(int64(i%5)+1, 2) { // within its share, 20/2
			t.Fatalf("at the limit, the light partner's request %d was shed", i)
		}
	}
	if l.AcquireShare(1, 2) {
		t.Fatal("admitted past one and a half times the limit")
	}
}

// TestPartnersShare counts requests in flight and the partners with any.
func TestPartnersShare(t *testing.T) {
	a := NewPartners(false, nil)
	pa, pb := partner("p-a", 1000, 1000, 100), partner("p-b", 1000, 1000, 100)
	for range 3 {
		if !a.Acquire(pa).OK {
			t.Fatal("refused")
		}
	}
	if !a.Acquire(pb).OK {
		t.Fatal("refused")
	}
	if mine, active := a.Share("p-a"); mine != 3 || active != 2 {
		t.Fatalf("Share(p-a) = %d, %d; want 3, 2", mine, active)
	}
	a.Release("p-b")
	if mine, active := a.Share("p-b"); mine != 0 || active != 1 {
		t.Fatalf("Share(p-b) after its release = %d, %d; want 0, 1", mine, active)
	}
	for range 3 {
		a.Release("p-a")
	}
	if _, active := a.Share("p-a"); active != 1 { // reported at least 1
		t.Fatalf("active %d with nothing in flight, want the floor 1", active)
	}
	if a.active.Load() != 0 {
		t.Fatalf("active count %d with nothing in flight, want 0", a.active.Load())
	}
}

// retryDelay is the RetryInfo delay of err's status, zero without one.
func retryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			return r.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// TestTapRefusalsLogged: the tap's refusals are logged under the request
// ID their answer carries, at most LogRefusals' rate (a burst of as many),
// and the next line logged says how many were not.
func TestTapRefusalsLogged(t *testing.T) {
	k, key, _ := partners.NewKey(nil, time.Now())
	ix, err := partners.Compile(&partners.Registry{Version: 1, Partners: []partners.Partner{{ID: "a", Status: partners.StatusActive, Keys: []partners.Key{key}}}})
	if err != nil {
		t.Fatal(err)
	}
	au := &auth.Partners{Index: func() *partners.Index { return ix }}
	clock := newClock()
	lim := NewPartners(false, clock.Now)
	var buf syncBuffer
	lim.LogRefusals(slog.New(slog.NewJSONHandler(&buf, nil)), 2)
	c := servePayments(t, okPayments{}, []grpc.ServerOption{grpc.InTapHandle(lim.Tap(au.FromHeader, RouterLimit{}, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wrong := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+k[:len(k)-1]+"x")
	ids := map[string]bool{}
	refuse := func() {
		_, err := c.SubmitTransaction(wrong, &cellpayv1.SubmitTransactionRequest{PartnerId: "a", TransactionId: "t"})
		if status.Code(err) != codes.Unauthenticated || apierr.ReasonOf(err) != apierr.APIKeyInvalid || apierr.RequestIDOf(err) == "" {
			t.Fatalf("a wrong key: %v (reason %q, request ID %q)", err, apierr.ReasonOf(err), apierr.RequestIDOf(err))
		}
		ids[apierr.RequestIDOf(err)] = true
	}
	for range 5 {
		refuse()
	}
	clock.Add(time.Second) // two more tokens
	refuse()
	type logLine struct {
		ID       string `json:"request_id"`
		Reason   string `json:"reason"`
		Unlogged int    `json:"unlogged_before"`
	}
	var lines []logLine
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var line logLine
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		lines = append(lines, line)
	}
	if len(lines) != 3 {
		t.Fatalf("%d lines logged for 6 refusals at 2 a second, want 3: %s", len(lines), buf.String())
	}
	for i, l := range lines {
		if !ids[l.ID] || l.Reason != string(apierr.APIKeyInvalid) {
			t.Errorf("line %d: request ID %q (one of the answers': %v), reason %q", i, l.ID, ids[l.ID], l.Reason)
		}
	}
	if lines[2].Unlogged != 3 {
		t.Errorf("the line after the burst says %d unlogged, want 3", lines[2].Unlogged)
	}
	if strings.Contains(buf.String(), k) {
		t.Error("a key in the log")
	}
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
