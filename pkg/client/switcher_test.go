package client

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client/failover"
)

// accessPoint is a fake GTR with a health service, served over real gRPC
// on loopback.
type accessPoint struct {
	*fakeGTR
	addr   string
	health *health.Server
}

func serveAccessPoint(t *testing.T, submit func(n int) (*cellpayv1.Transaction, error)) *accessPoint {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &accessPoint{fakeGTR: &fakeGTR{submit: submit, get: func(int) (*cellpayv1.Transaction, error) { return approved(), nil }}, addr: lis.Addr().String(), health: health.NewServer()}
	s := grpc.NewServer()
	cellpayv1.RegisterPaymentsServer(s, a.fakeGTR)
	healthpb.RegisterHealthServer(s, a.health)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return a
}

func (a *accessPoint) calls() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.submits)
}

func always(err error) func(int) (*cellpayv1.Transaction, error) {
	return func(int) (*cellpayv1.Transaction, error) {
		if err != nil {
			return nil, err
		}
		return approved(), nil
	}
}

// fastFailover is a failover config with intervals a test can wait for.
var fastFailover = failover.Config{Strategy: failover.Probe, ProbeInterval: 50 * time.Millisecond, EvalInterval: 50 * time.Millisecond, SplitRatio: 100}

func dialPair(t *testing.T, primary, backup string, cfg Config) *Client {
	t.Helper()
	cfg.Backoff, cfg.MaxBackoff = time.Millisecond, time.Millisecond
	if cfg.ProbeTimeout == 0 {
		cfg.ProbeTimeout = 100 * time.Millisecond
	}
	c, err := DialEndpoints([]string{primary, backup}, cfg, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestFailsOverOnceOnTheOtherAccessPoint(t *testing.T) {
	for _, tt := range []struct {
		name    string
		primary func(int) (*cellpayv1.Transaction, error)
		timeout time.Duration
	}{
		{"UNAVAILABLE", always(status.Error(codes.Unavailable, "down")), 0},
		// The primary answers only once the test ends. The call timeout
		// leaves room for the connection to be made first (at 50 ms, a
		// loaded host sometimes timed out before the request reached the
		// primary at all).
		{"read timeout", nil, time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			primary := tt.primary
			if primary == nil {
				release := make(chan struct{})
				t.Cleanup(func() { close(release) })
				primary = func(int) (*cellpayv1.Transaction, error) { <-release; return approved(), nil }
			}
			p, b := serveAccessPoint(t, primary), serveAccessPoint(t, always(nil))
			c := dialPair(t, p.addr, b.addr, Config{Failover: failover.Config{SplitRatio: 100}, CallTimeout: tt.timeout})
			txn, info, err := c.SubmitWithInfo(ctxT(t), req())
			if err != nil || txn.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
				t.Fatalf("got %v, %v", txn, err)
			}
			if info.Endpoint != b.addr || !info.FailedOver || info.Attempts != 2 {
				t.Fatalf("info %+v, want answered by the backup %s after one failover", info, b.addr)
			}
			if p.calls() != 1 || b.calls() != 1 || !proto.Equal(b.submits[0], req()) {
				t.Fatalf("primary %d calls, backup %d: want one each, the identical request", p.calls(), b.calls())
			}
		})
	}
}

func TestFailsOverToAnAccessPointThatIsNotThere(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	b := serveAccessPoint(t, always(nil))
	c := dialPair(t, dead, b.addr, Config{Failover: failover.Config{SplitRatio: 100}})
	_, info, err := c.SubmitWithInfo(ctxT(t), req())
	if err != nil || info.Endpoint != b.addr || !info.FailedOver {
		t.Fatalf("info %+v, err %v", info, err)
	}
}

func TestOnlyOneFailoverPerCall(t *testing.T) {
	p, b := serveAccessPoint(t, always(status.Error(codes.Unavailable, "down"))), serveAccessPoint(t, always(status.Error(codes.Unavailable, "down")))
	c := dialPair(t, p.addr, b.addr, Config{Failover: failover.Config{SplitRatio: 100}, MaxAttempts: 4})
	_, info, err := c.SubmitWithInfo(ctxT(t), req())
	if status.Code(err) != codes.Unavailable || info.Attempts != 4 {
		t.Fatalf("info %+v, err %v", info, err)
	}
	// One immediate failover to the backup; the back-off retries go where
	// the rules say: the primary.
	if p.calls() != 3 || b.calls() != 1 {
		t.Fatalf("primary %d calls, backup %d; want 3 and 1", p.calls(), b.calls())
	}
}

func TestAnswersAboutTheRequestDoNotFailOver(t *testing.T) {
	for _, code := range []codes.Code{codes.InvalidArgument, codes.AlreadyExists, codes.PermissionDenied, codes.Unauthenticated} {
		p, b := serveAccessPoint(t, always(status.Error(code, "no"))), serveAccessPoint(t, always(nil))
		c := dialPair(t, p.addr, b.addr, Config{Failover: failover.Config{SplitRatio: 100}})
		if _, err := c.Submit(ctxT(t), req()); status.Code(err) != code {
			t.Fatalf("%v: err %v", code, err)
		}
		if b.calls() != 0 {
			t.Fatalf("%v went to the backup", code)
		}
		if st := c.FailoverStats(); st.Answered[p.addr] != 1 || st.Failed[p.addr] != 0 {
			t.Fatalf("%v: stats %+v: an answer about the request is the access point working", code, st)
		}
	}
}

func TestProbesSwitchAndSwitchBack(t *testing.T) {
	p, b := serveAccessPoint(t, always(nil)), serveAccessPoint(t, always(nil))
	var mu sync.Mutex
	var seen []Event
	c := dialPair(t, p.addr, b.addr, Config{Failover: fastFailover, OnSwitch: func(e Event) { mu.Lock(); seen = append(seen, e); mu.Unlock() }})
	current := func() string { return c.FailoverStats().Current }
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("not within 5s: %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	p.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	waitFor("switch to the backup", func() bool { return current() == b.addr })
	_, info, err := c.SubmitWithInfo(ctxT(t), req())
	if err != nil || info.Endpoint != b.addr || info.FailedOver {
		t.Fatalf("on the backup, a call: %+v, %v", info, err)
	}
	p.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	waitFor("switch back to the primary", func() bool { return current() == p.addr })
	// OnSwitch runs after the switch is in force: wait for its second call.
	waitFor("OnSwitch told of both switches", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) >= 2 })
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0].From != p.addr || seen[0].To != b.addr || seen[1].To != p.addr || seen[0].Reason == "" || seen[0].At.IsZero() {
		t.Fatalf("OnSwitch saw %+v", seen)
	}
	if ev := c.Events(); len(ev) != 2 || ev[0] != seen[0] {
		t.Fatalf("Events %+v", ev)
	}
}

func TestSplitSendsTheRestToTheBackup(t *testing.T) {
	p, b := serveAccessPoint(t, always(nil)), serveAccessPoint(t, always(nil))
	c := dialPair(t, p.addr, b.addr, Config{Failover: failover.Config{SplitRatio: 50}})
	for range 200 {
		if _, err := c.Submit(ctxT(t), req()); err != nil {
			t.Fatal(err)
		}
	}
	if p.calls() < 60 || b.calls() < 60 {
		t.Fatalf("split 50: primary %d, backup %d of 200", p.calls(), b.calls())
	}
}

func TestReadsFailOverToo(t *testing.T) {
	p, b := serveAccessPoint(t, always(nil)), serveAccessPoint(t, always(nil))
	p.get = func(int) (*cellpayv1.Transaction, error) { return nil, status.Error(codes.Unavailable, "down") }
	c := dialPair(t, p.addr, b.addr, Config{PartnerID: "p-001", Failover: failover.Config{SplitRatio: 100}})
	if _, err := c.Get(ctxT(t), "t-1"); err != nil {
		t.Fatal(err)
	}
}

func TestDialEndpointsRefusesBadLists(t *testing.T) {
	opt := grpc.WithTransportCredentials(insecure.NewCredentials())
	if _, err := DialEndpoints(nil, Config{}, opt); err == nil {
		t.Error("no access point accepted")
	}
	if _, err := DialEndpoints([]string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}, Config{}, opt); err == nil {
		t.Error("three access points accepted")
	}
	if _, err := DialEndpoints([]string{"127.0.0.1:1", "127.0.0.1:2"}, Config{Failover: failover.Config{SplitRatio: 101}}, opt); err == nil {
		t.Error("a bad failover config accepted")
	}
}

// ctxShort is for calls the test expects to end quickly.
func ctxShort(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestCallersDeadlineIsNotAFailover(t *testing.T) {
	p, b := serveAccessPoint(t, func(int) (*cellpayv1.Transaction, error) { time.Sleep(200 * time.Millisecond); return approved(), nil }), serveAccessPoint(t, always(nil))
	c := dialPair(t, p.addr, b.addr, Config{Failover: failover.Config{SplitRatio: 100}})
	ctx, cancel := context.WithTimeout(ctxShort(t), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Submit(ctx, req()); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err %v", err)
	}
	if b.calls() != 0 {
		t.Fatal("the caller's own deadline failed over")
	}
}
