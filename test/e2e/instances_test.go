package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// instancesTarget starts a platform of its own as make run does, with
// NATS and two orchestrator instances per cell (cell-a and cell-a-2, ...),
// and the GTR's table listing both, balanced round robin.
func instancesTarget(t *testing.T) faultTarget {
	t.Helper()
	if platform.FindNATSServer(env.bin) == "" {
		t.Fatal("nats-server is not installed: the cell's instances share NATS")
	}
	ctx := ctxFor(t, 2*time.Minute)
	dir := platformDir(t, "cellpay-instances-")
	ports, err := testutil.FreePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	cells := []platform.CellSpec{{ID: "cell-a", Addr: addr(pairPort(t))}, {ID: "cell-b", Addr: addr(pairPort(t))}}
	table := "version: 1\ncells:\n"
	for _, c := range cells {
		host, port, _ := net.SplitHostPort(c.Addr)
		n, _ := strconv.Atoi(port)
		table += fmt.Sprintf("  - {id: %s, addrs: [%q, %q], pool: main}\n", c.ID, c.Addr, net.JoinHostPort(host, strconv.Itoa(n+100)))
	}
	table += "pools:\n  - {name: main, balancer: round_robin}\nrules:\n  - {name: everything, pool: main, hash_on: partner}\n"
	gtrConfig := filepath.Join(dir, "gtr.yaml")
	if err := os.WriteFile(gtrConfig, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	pgBase, err := testutil.FreePortRun(2 * len(cells)) // primaries, then standbys
	if err != nil {
		t.Fatal(err)
	}
	p, err := platform.Start(ctx, platform.Config{
		NoFsync: true, // tests: see platform.Config.NoFsync
		BinDir:  env.bin, DataDir: filepath.Join(dir, "data"), GTRConfig: gtrConfig,
		RefData: filepath.Join(env.root, "config", "refdata.json"), Cells: cells, CellInstances: 2,
		IssuerAddr: addr(ports[0]), GTRAddr: addr(ports[1]), AdminAddr: addr(ports[2]), PGBasePort: pgBase, StandbyBasePort: pgBase + len(cells),
		// One NATS server: see natsServersHere.
		NoBackupGTR: true, NATS: true, NATSAddr: addr(natsPortRun(t)), NATSServers: 1,
		RefDataSource: filepath.Join(env.root, "config", "refdata"), CallbackAddr: addr(ports[4]),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })
	ownLogs(p)
	gtrOpts, err := p.GTRDialOptions()
	if err != nil {
		t.Fatal(err)
	}
	opsTLS, err := p.ClientTLS(platform.OpsCertName)
	if err != nil {
		t.Fatal(err)
	}
	return faultTarget{
		p: p, gtrAddr: addr(ports[1]), gtrOpts: gtrOpts, cells: cells,
		payments: cellpayv1.NewPaymentsClient(dialPlatformGTR(t, p, addr(ports[1]))),
		issuer:   issuerproto.NewIssuerClient(dial(addr(ports[0]), opsTLS)),
	}
}

// pairPort is a free loopback port p with p+100 free too: a cell's first
// and second instance.
func pairPort(t *testing.T) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+100))
		l.Close()
		if err == nil {
			l2.Close()
			return p
		}
	}
	t.Fatal("no free port pair p, p+100 in 50 tries")
	return 0
}

// TestCellInstances: a cell of two instances sharing one Postgres rides
// through the loss of either, under load, with every invariant held and
// no partner seeing an error: kill -9 of one instance (and its restart), a
// rolling restart of both, kill -9 of the cell's primary Postgres (both
// instances move to the promoted standby), and duplicates of in-flight
// transactions that land on the other instance.
func TestCellInstances(t *testing.T) {
	target := instancesTarget(t)

	t.Run("kill one instance", func(t *testing.T) {
		answers := runFaultOn(t, target, fault{
			name: "instkill",
			break_: func(t *testing.T, _ context.Context) {
				if err := target.p.Process("cell-a-2").Kill(); err != nil {
					t.Fatal(err)
				}
				testutil.Eventually(t, 15*time.Second, "cell-a-2 down", func() bool { return !target.serving("cell-a-2", 300*time.Millisecond) })
				if !target.serving("cell-a", time.Second) {
					t.Fatal("cell-a's first instance went down with the second")
				}
			},
			hold: 3 * time.Second,
			heal: func(t *testing.T, ctx context.Context) {
				if err := target.p.Process("cell-a-2").Restart(ctx); err != nil {
					t.Fatal(err)
				}
				testutil.Eventually(t, 30*time.Second, "cell-a-2 serving again", func() bool { return target.serving("cell-a-2", time.Second) })
			},
		})
		noFailuresShown(t, answers)
	})

	t.Run("rolling restart", func(t *testing.T) {
		answers := runFaultOn(t, target, fault{
			name: "instroll",
			break_: func(t *testing.T, ctx context.Context) {
				for _, in := range target.p.Instances("cell-b") {
					if err := target.p.Process(in.Name).Restart(ctx); err != nil {
						t.Fatal(err)
					}
					testutil.Eventually(t, 30*time.Second, in.Name+" serving after its restart", func() bool { return target.serving(in.Name, time.Second) })
				}
			},
			heal: func(*testing.T, context.Context) {},
		})
		noFailuresShown(t, answers)
	})

	// Both instances of cell-a lose their database at once and move to the
	// promoted standby (the lease table and the reconciler's lock with it).
	// With two cells only, a few transactions caught by the kill have been
	// seen UNAVAILABLE (never started: safe to retry; the checker verifies
	// it), which this case allows up to 1% of; TestFaultKillPrimaryPostgres
	// (three cells) allows none.
	t.Run("kill the primary database", func(t *testing.T) { killPrimary(t, target, "cell-a", 0.01) })

	t.Run("duplicate on the other instance", func(t *testing.T) {
		var mu sync.Mutex
		var dups []checker.Answer
		answers := runFaultOn(t, target, fault{
			name: "instdup",
			break_: func(t *testing.T, ctx context.Context) {
				for i := range 5 {
					// Not instdup-N: the load's IDs are those (load.Config.RunID).
					a := duplicateOnSibling(t, ctx, target, "cell-a", fmt.Sprintf("sibling-dup-%d", i))
					mu.Lock()
					dups = append(dups, a...)
					mu.Unlock()
				}
			},
			heal:  func(*testing.T, context.Context) {},
			extra: func() []checker.Answer { mu.Lock(); defer mu.Unlock(); return dups },
		})
		noFailuresShown(t, answers)
	})
}

// duplicateOnSibling plays the GTR on two instances of cell: an attempt
// at the first instance is held between its durable sending state and
// the GTR's Proceed, and a duplicate of it (another GTR call, as from the
// other GTR replica or a partner's retry) starts at the second instance.
// The duplicate must wait on the durable record, not answer PENDING or
// re-route, and then answer what the first attempt answered; the issuer
// charges once. It returns both answers for the checker.
func duplicateOnSibling(t *testing.T, ctx context.Context, target faultTarget, cell, id string) []checker.Answer {
	t.Helper()
	in := target.p.Instances(cell)
	if len(in) < 2 {
		t.Fatalf("%s has %d instances, want 2", cell, len(in))
	}
	asGTR, err := target.p.ClientTLS(platform.GTR) // a cell serves Process to the GTR's identity only
	if err != nil {
		t.Fatal(err)
	}
	req := request(id, freshPAN())
	start := func(addr, call string) cellproto.Cell_ProcessClient {
		conn, err := grpc.NewClient(addr, asGTR)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		stream, err := cellproto.NewCellClient(conn).Process(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&cellproto.ProcessInput{Input: &cellproto.ProcessInput_Start{Start: &cellproto.ProcessRequest{
			Request: req, Attempt: 1, RouteRule: "everything", CallId: call,
		}}}); err != nil {
			t.Fatal(err)
		}
		return stream
	}
	first := start(in[0].Addr, "e2e-"+runID+"-"+id+"-first")
	if ev, err := first.Recv(); err != nil || ev.GetPointOfNoReturn() == nil {
		t.Fatalf("%s at %s: want its point of no return, got %v %v", id, in[0].Name, ev, err)
	}
	dup := start(in[1].Addr, "e2e-"+runID+"-"+id+"-dup")
	type recv struct {
		ev  *cellproto.ProcessEvent
		err error
		at  time.Time
	}
	got := make(chan recv, 1)
	go func() {
		ev, err := dup.Recv()
		got <- recv{ev, err, time.Now()}
	}()
	// The first attempt is in sending at the other instance, which may yet
	// step back: any answer now (PENDING, a re-route) would be wrong.
	select {
	case r := <-got:
		t.Fatalf("the duplicate at %s answered while the attempt at %s was before its Proceed: %v %v", in[1].Name, in[0].Name, r.ev, r.err)
	case <-time.After(500 * time.Millisecond):
	}
	proceeded := time.Now()
	if err := first.Send(&cellproto.ProcessInput{Input: &cellproto.ProcessInput_Proceed{Proceed: &cellproto.Proceed{}}}); err != nil {
		t.Fatal(err)
	}
	ev, err := first.Recv()
	if err == nil && ev.GetProceeding() != nil {
		ev, err = first.Recv()
	}
	if err != nil || ev.GetResult() == nil {
		t.Fatalf("%s at %s after Proceed: %v %v, want its result", id, in[0].Name, ev, err)
	}
	a := ev.GetResult()
	var r recv
	select {
	case r = <-got:
	case <-time.After(15 * time.Second):
		t.Fatalf("the duplicate at %s did not answer within 15 s of the first attempt's Proceed", in[1].Name)
	}
	b := r.ev.GetResult()
	if r.err != nil || b == nil {
		t.Fatalf("the duplicate at %s: %v %v, want a result", in[1].Name, r.ev, r.err)
	}
	if r.at.Before(proceeded) {
		t.Fatalf("the duplicate at %s answered before the first attempt's Proceed", in[1].Name)
	}
	if a.GetStatus() == cellpayv1.TransactionStatus_PENDING || b.GetStatus() != a.GetStatus() || b.GetAuthCode() != a.GetAuthCode() || b.GetDeclineReason() != a.GetDeclineReason() {
		t.Fatalf("%s answered %v/%s%s at %s and %v/%s%s at %s; want one final answer", id,
			a.GetStatus(), a.GetAuthCode(), a.GetDeclineReason(), in[0].Name, b.GetStatus(), b.GetAuthCode(), b.GetDeclineReason(), in[1].Name)
	}
	eff, _ := effectsOn(t, ctx, target.issuer, req.GetPartnerId(), req.GetTransactionId())
	if eff > 1 || a.GetStatus() == cellpayv1.TransactionStatus_APPROVED && eff != 1 {
		t.Fatalf("%s %v: the issuer applied it %d times", id, a.GetStatus(), eff)
	}
	return []checker.Answer{
		checker.AnswerOf(req.GetPartnerId(), req.GetTransactionId(), a, nil),
		checker.AnswerOf(req.GetPartnerId(), req.GetTransactionId(), b, nil),
	}
}
