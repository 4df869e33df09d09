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

	"github.com/cellpay/cellpay/internal/platform"
	"github.com/cellpay/cellpay/internal/testutil"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// instancesTarget starts a platform of its own as make run does, with
// NATS and two orchestrator instances per cell (cell-a and cell-a-2, ...),
// and the GTR's table listing both, balanced round robin.
func instancesTarget(t *testing.T) faultTarget {
	t.Helper()
	if platform.FindNATSServer() == "" {
		t.Fatal("nats-server is not installed: the cell's instances share NATS")
	}
	ctx := ctxFor(t, 2*time.Minute)
	dir, err := os.MkdirTemp("", "cellpay-instances-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the postgres user must traverse it
		t.Fatal(err)
	}
	ports, err := freePorts(6)
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
	pgBase, err := testutil.FreePortRun(len(cells))
	if err != nil {
		t.Fatal(err)
	}
	p, err := platform.Start(ctx, platform.Config{
		BinDir: env.bin, DataDir: filepath.Join(dir, "data"), GTRConfig: gtrConfig,
		RefData: filepath.Join(env.root, "config", "refdata.json"), Cells: cells, CellInstances: 2,
		IssuerAddr: addr(ports[0]), GTRAddr: addr(ports[1]), AdminAddr: addr(ports[2]), PGBasePort: pgBase,
		NoBackupGTR: true, NATS: true, NATSAddr: addr(ports[3]),
		RefDataSource: filepath.Join(env.root, "config", "refdata"), CallbackAddr: addr(ports[4]),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })
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
// rolling restart of both, and duplicates of in-flight transactions that
// land on the other instance.
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

	t.Run("duplicate on the other instance", func(t *testing.T) {
		ctx := ctxFor(t, time.Minute)
		// A slow issuer keeps each first attempt in flight while its
		// duplicate arrives; round robin sends the two calls to the two
		// instances.
		if _, err := target.issuer.SetFaults(ctx, &issuerproto.Faults{LatencyMs: 400}); err != nil {
			t.Fatal(err)
		}
		defer target.issuer.SetFaults(context.Background(), &issuerproto.Faults{})
		const n = 20
		var wg sync.WaitGroup
		answers := make([][2]*cellpayv1.Transaction, n)
		errs := make([][2]error, n)
		for i := range n {
			req := request(fmt.Sprintf("instdup-%d", i), freshPAN())
			for j := range 2 {
				wg.Go(func() { answers[i][j], errs[i][j] = target.payments.SubmitTransaction(ctx, req) })
			}
		}
		wg.Wait()
		for i := range n {
			a, b := answers[i][0], answers[i][1]
			if errs[i][0] != nil || errs[i][1] != nil {
				t.Fatalf("duplicate %d: errors %v, %v", i, errs[i][0], errs[i][1])
			}
			if a.GetStatus() != cellpayv1.TransactionStatus_APPROVED || b.GetStatus() != a.GetStatus() || a.GetAuthCode() != b.GetAuthCode() || a.GetCellId() != b.GetCellId() {
				t.Fatalf("duplicate %d answered %v/%s on %s and %v/%s on %s; want one APPROVED answer", i,
					a.GetStatus(), a.GetAuthCode(), a.GetCellId(), b.GetStatus(), b.GetAuthCode(), b.GetCellId())
			}
		}
		// One charge per transaction, for the two calls.
		refs := make([]*issuerproto.TransactionRef, n)
		for i := range n {
			refs[i] = &issuerproto.TransactionRef{PartnerId: "p-001", TransactionId: runID + "-" + fmt.Sprintf("instdup-%d", i)}
		}
		resp, err := target.issuer.Effects(ctx, &issuerproto.EffectsRequest{Transactions: refs})
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, e := range resp.GetEffects() {
			seen++
			if e.GetEffects() != 1 {
				t.Fatalf("%s charged %d times", e.GetTransactionId(), e.GetEffects())
			}
		}
		if seen != n {
			t.Fatalf("issuer knows %d of the %d transactions", seen, n)
		}
	})
}
