package payments

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	hs "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cellpay/cellpay/cmd/gtr/internal/health"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

// serveInstance serves f with gRPC health (SERVING) on loopback, as one
// instance of a cell; stop takes it away.
func serveInstance(t *testing.T, f *fakeCell) (addr string, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	cellproto.RegisterCellServer(s, f)
	healthpb.RegisterHealthServer(s, hs.NewServer())
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String(), s.Stop
}

// TestCellWithTwoInstances: the home cell has two instances. Its
// transactions spread over both; with one stopped they all go to the
// other on their first attempt, none fails and the cell stays healthy;
// with both stopped they are re-routed before the PNR to the next cell,
// and the cell is ejected as a one-instance cell would be.
func TestCellWithTwoInstances(t *testing.T) {
	home1, home2, next := &fakeCell{}, &fakeCell{}, &fakeCell{}
	s, _ := setup(t, home1, next)
	home2.id = home1.id
	for _, f := range []*fakeCell{home1, home2, next} {
		f.do = func(r *cellproto.ProcessRequest, st srv) error { return approve(r, st, f.id) }
	}
	addr1, stop1 := serveInstance(t, home1)
	addr2, stop2 := serveInstance(t, home2)
	spec := s.cfg.Table().Spec()
	var cells []health.Cell
	for i := range spec.Cells {
		c := &spec.Cells[i]
		switch c.ID {
		case home1.id:
			c.Addr, c.Addrs = "", []string{addr1, addr2}
		case next.id: // with health, so that the monitor keeps it up
			c.Addr, _ = serveInstance(t, next)
		}
		cells = append(cells, health.Cell{ID: c.ID, Addr: c.Addr, Addrs: c.Addrs, Pool: c.Pool})
	}
	table, err := routing.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	s.cfg.Table = func() *routing.Table { return table }
	mon, err := health.New(health.Config{Interval: 20 * time.Millisecond, OnChange: func(string, int) {}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	mon.SetCells(cells)
	runCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { mon.Run(runCtx) })
	defer wg.Wait()
	defer cancel()
	s.cfg.Health = mon

	n := 0
	submit := func() *cellpayv1.Transaction {
		t.Helper()
		n++
		got, err := s.SubmitTransaction(ctx(t), req("t-inst-"+string(rune('a'+n/26))+string(rune('a'+n%26))))
		if err != nil {
			t.Fatalf("transaction %d: %v", n, err)
		}
		return got
	}
	testutil.Eventually(t, 5*time.Second, "both instances taking transactions", func() bool {
		submit()
		return home1.calls.Load() > 0 && home2.calls.Load() > 0
	})
	stop1()
	before1, before2 := home1.calls.Load(), home2.calls.Load()
	// The first transaction after the stop may still be sent on the dying
	// instance's connection before the GTR has read that it closed: it
	// fails before the PNR and is re-routed, as any attempt would be. No
	// other is, and none fails.
	rerouted := 0
	for range 20 {
		switch got := submit(); {
		case got.GetCellId() == home1.id && got.GetAttempts() == 1:
		case got.GetCellId() == next.id && got.GetAttempts() == 2 && rerouted == 0:
			rerouted++
		default:
			t.Fatalf("one instance down: answered by %s on attempt %d, want the home cell on attempt 1", got.GetCellId(), got.GetAttempts())
		}
	}
	if home1.calls.Load() != before1 || home2.calls.Load() != before2+20-int32(rerouted) {
		t.Fatalf("calls %d, %d after stopping the first instance, want %d on the second", home1.calls.Load()-before1, home2.calls.Load()-before2, 20-rerouted)
	}
	nextBefore := next.calls.Load()
	time.Sleep(100 * time.Millisecond) // several rounds of checks
	if mon.Share(home1.id) != 100 {
		t.Fatalf("share %d with one instance serving, want 100", mon.Share(home1.id))
	}
	if in := mon.Instances(home1.id); len(in) != 2 || in[0].State != health.InstanceDown || in[1].State != health.InstanceUp {
		t.Fatalf("instances %+v, want the first down and the second up", in)
	}

	stop2()
	got := submit()
	if got.GetCellId() != next.id || got.GetAttempts() != 2 || next.calls.Load() != nextBefore+1 {
		t.Fatalf("both instances down: answered by %s on attempt %d, want re-routed to %s on attempt 2", got.GetCellId(), got.GetAttempts(), next.id)
	}
	testutil.Eventually(t, 5*time.Second, "the cell ejected", func() bool { return mon.Share(home1.id) == 0 })
}
