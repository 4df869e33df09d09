package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/natsauth"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// The NATS cluster's tests: the platform's NATS is three servers, and
// every stream and bucket has a replica on each (the transaction
// directory, the GTR's routing and partners' bucket, reference data, the
// audit log). Losing any one server, even the one a component is
// connected to, changes nothing a partner sees: the components move to
// another server, the streams whose leader it was elect another, and the
// server catches up when it returns. Each fault runs under load with the
// checker after it.

// platformStreams are the streams every platform has once it serves,
// each with a replica on every NATS server.
var platformStreams = []string{"KV_" + natsauth.DirectoryBucket, "KV_" + natsauth.GTRBucket, refdata.Stream, natsauth.AuditStream}

// TestNATSServerKill: kill -9 each NATS server in turn under load,
// restarted between, each back in the cluster with every stream's replica
// current before the next is killed.
func TestNATSServerKill(t *testing.T) {
	servers := natsServers(t)
	for _, n := range servers {
		answers := runFault(t, fault{
			name: "kill-" + n.Name,
			break_: func(t *testing.T, _ context.Context) {
				if err := n.Kill(); err != nil {
					t.Fatal(err)
				}
			},
			hold: 3 * time.Second,
			heal: func(t *testing.T, ctx context.Context) { restartNATS(t, ctx, n) },
		})
		noFailuresShown(t, answers)
	}
}

// TestNATSServerFreeze: one NATS server frozen (SIGSTOP) for 10 s under
// load: its clients give it up after their missed pings and move to
// another server, and it catches up once thawed.
func TestNATSServerFreeze(t *testing.T) {
	n := natsServers(t)[0]
	answers := runFault(t, fault{
		name: "freeze-" + n.Name,
		break_: func(t *testing.T, _ context.Context) {
			if err := n.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		},
		hold: 10 * time.Second,
		load: 18 * time.Second, // frozen from 6 s to 16 s
		heal: func(t *testing.T, ctx context.Context) {
			if err := n.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			waitNATSCurrent(t, ctx, env.p)
		},
	})
	noFailuresShown(t, answers)
}

// TestNATSServerAndCellKill: one NATS server and one whole cell killed
// together: the cell's transactions before their point of no return are
// re-routed as usual, the directory's claims going on on the two servers
// left.
func TestNATSServerAndCellKill(t *testing.T) {
	n := natsServers(t)[1]
	answers := runFault(t, fault{
		name: "kill-" + n.Name + "-and-cell-b",
		break_: func(t *testing.T, _ context.Context) {
			if err := n.Kill(); err != nil {
				t.Fatal(err)
			}
			if err := env.p.Process("cell-b").Kill(); err != nil {
				t.Fatal(err)
			}
			waitCellDown(t, "cell-b", "killed")
		},
		hold: 3 * time.Second,
		heal: func(t *testing.T, ctx context.Context) {
			// The cell first: its supervisor restarts it whatever NATS
			// does, and while it is away the entries it owns hold
			// their transactions (docs/design/transaction-directory.md,
			// "What it costs in availability").
			restartCell(t, ctx, "cell-b")
			restartNATS(t, ctx, n)
		},
	})
	noFailuresShown(t, answers)
}

// natsServers are the shared platform's NATS servers, three of them.
func natsServers(t *testing.T) []*platform.Proc {
	t.Helper()
	servers := env.p.NATSServers()
	if len(servers) != 3 {
		t.Fatalf("the platform runs %d NATS servers, want 3", len(servers))
	}
	return servers
}

// restartNATS restarts a NATS server and waits until every stream has a
// current replica on it again.
func restartNATS(t *testing.T, ctx context.Context, n *platform.Proc) {
	t.Helper()
	if err := n.Restart(ctx); err != nil {
		t.Fatalf("restart %s: %v", n.Name, err)
	}
	waitNATSCurrent(t, ctx, env.p)
}

// waitNATSCurrent waits (up to 60 s) until every stream of
// platformStreams has a leader and a current, online replica on every
// other server: the cluster is whole again, the server that was lost
// caught up.
func waitNATSCurrent(t *testing.T, ctx context.Context, p *platform.Platform) {
	t.Helper()
	opts, err := p.NATSOptions()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(p.NATSURL(), append(opts, nats.Name("e2e nats check"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	want := len(p.NATSServers())
	var last string
	start := time.Now()
	ok := testutil.Within(60*time.Second, func() bool {
		last = streamsBehind(ctx, js, want)
		return last == ""
	})
	if !ok {
		t.Fatalf("NATS cluster not whole after %v: %s", time.Since(start).Round(time.Millisecond), last)
	}
	t.Logf("NATS cluster whole %v after healing: every stream's replicas current", time.Since(start).Round(time.Millisecond))
}

// streamsBehind says which stream lacks a leader or a current replica on
// one of want servers; "" when none does.
func streamsBehind(ctx context.Context, js jetstream.JetStream, want int) string {
	var behind []string
	for _, name := range platformStreams {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		s, err := js.Stream(cctx, name)
		cancel()
		if err != nil {
			behind = append(behind, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		ci := s.CachedInfo().Cluster
		switch {
		case ci == nil || ci.Leader == "":
			behind = append(behind, name+": no leader")
			continue
		case len(ci.Replicas) != want-1:
			behind = append(behind, fmt.Sprintf("%s: %d followers, want %d", name, len(ci.Replicas), want-1))
			continue
		}
		for _, r := range ci.Replicas {
			if !r.Current || r.Offline {
				behind = append(behind, fmt.Sprintf("%s: replica on %s current %v, offline %v, lag %d", name, r.Name, r.Current, r.Offline, r.Lag))
			}
		}
	}
	return strings.Join(behind, "; ")
}

// TestNATSAllDown: every NATS server killed for 30 s under load. Payments
// go on at their natural homes: no partner error while every cell serves,
// nothing decided twice. What the mode costs is failover (only a natural
// home decides, so a cell lost in it loses its keys until it returns; see
// docs/design/transaction-directory.md). Once NATS is back, each home files
// the entries of what it decided alone, and the directory holds every
// final answer of the run again.
func TestNATSAllDown(t *testing.T) {
	servers := natsServers(t)
	var unfiledAtHeal int
	answers := runFault(t, fault{
		name: "all-nats-down",
		break_: func(t *testing.T, _ context.Context) {
			for _, n := range servers {
				if err := n.Kill(); err != nil {
					t.Fatal(err)
				}
			}
		},
		hold: 30 * time.Second,
		load: 60 * time.Second, // NATS down from 20 s to 50 s
		heal: func(t *testing.T, ctx context.Context) {
			unfiledAtHeal = unfiledRows(t, ctx)
			var wg sync.WaitGroup
			for _, n := range servers {
				wg.Go(func() {
					if err := n.Restart(ctx); err != nil {
						t.Errorf("restart %s: %v", n.Name, err)
					}
				})
			}
			wg.Wait()
			back := time.Now()
			waitNATSCurrent(t, ctx, env.p)
			// The homes file what they decided alone, bounded: the
			// design says within a minute of NATS's return.
			var left int
			if !testutil.Within(60*time.Second, func() bool { left = unfiledRows(t, ctx); return left == 0 }) {
				t.Fatalf("%d of %d transactions decided in the outage still have no directory entry 60 s after NATS came back", left, unfiledAtHeal)
			}
			t.Logf("%d transactions decided in the outage filed in the directory %v after NATS came back", unfiledAtHeal, time.Since(back).Round(100*time.Millisecond))
		},
	})
	noFailuresShown(t, answers)
	if unfiledAtHeal == 0 {
		t.Fatal("no transaction was decided without the directory while NATS was down: the test proves nothing")
	}
	missing := entriesMissing(t, ctxFor(t, 2*time.Minute), answers)
	if len(missing) > 0 {
		t.Fatalf("%d final answers have no final directory entry, e.g. %v", len(missing), missing[:min(5, len(missing))])
	}
}

// unfiledRows counts the final records, in every cell, decided without a
// directory entry and not filed since.
func unfiledRows(t *testing.T, ctx context.Context) int {
	t.Helper()
	total := 0
	for _, c := range env.cells {
		conn, err := pgx.Connect(ctx, env.p.CellDatabaseURL(c.ID))
		if err != nil {
			t.Fatalf("%s's database: %v", c.ID, err)
		}
		var n int
		err = conn.QueryRow(ctx, `SELECT count(*) FROM transactions WHERE unfiled AND state IN ('approved', 'declined', 'failed')`).Scan(&n)
		conn.Close(ctx)
		if err != nil {
			t.Fatalf("%s's unfiled rows: %v", c.ID, err)
		}
		total += n
	}
	return total
}

// entriesMissing returns the keys of answers with a final status whose
// directory entry is missing or not final, read with NATS's administrator.
func entriesMissing(t *testing.T, ctx context.Context, answers []checker.Answer) []idempotency.Key {
	t.Helper()
	opts, err := env.p.NATSOptions()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(env.p.NATSURL(), append(opts, nats.Name("e2e directory check"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, natsauth.DirectoryBucket)
	if err != nil {
		t.Fatal(err)
	}
	var missing []idempotency.Key
	for _, a := range answers {
		switch a.Status {
		case cellpayv1.TransactionStatus_APPROVED, cellpayv1.TransactionStatus_DECLINED, cellpayv1.TransactionStatus_FAILED:
		default:
			continue
		}
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		v, err := kv.Get(gctx, directoryKey(a.Key()))
		cancel()
		var e struct { // the entry's envelope (package directory)
			E struct {
				State string `json:"state"`
			} `json:"e"`
		}
		if err != nil || json.Unmarshal(v.Value(), &e) != nil || e.E.State != "final" {
			missing = append(missing, a.Key())
		}
	}
	return missing
}

// directoryKey is k's key in the directory's bucket, as the cell's
// directory.Key makes it (a package internal to the cell).
func directoryKey(k idempotency.Key) string {
	h := sha256.New()
	h.Write([]byte(k.PartnerID))
	h.Write([]byte{0})
	h.Write([]byte(k.TransactionID))
	return "t." + hex.EncodeToString(h.Sum(nil)[:16])
}
