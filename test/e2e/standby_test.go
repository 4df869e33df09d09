package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc/codes"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/dev/testutil"
)

// failoverBound is how long a cell may take, from kill -9 of its primary
// Postgres, to serve again on the promoted standby: the watchdog's
// detection (an exit is seen within one 500 ms check), the promotion,
// and the GTR's health checks (every 250 ms).
const failoverBound = 15 * time.Second

// finalRows reads a cell's transactions in a final state, by partner and
// ID: those never change again.
func finalRows(t *testing.T, ctx context.Context, conn *pgx.Conn) map[[2]string]string {
	t.Helper()
	rows, err := conn.Query(ctx, "SELECT partner_id, transaction_id, state FROM transactions WHERE state IN ('approved', 'declined', 'failed')")
	if err != nil {
		t.Fatal(err)
	}
	out := map[[2]string]string{}
	for rows.Next() {
		var p, id, st string
		if err := rows.Scan(&p, &id, &st); err != nil {
			t.Fatal(err)
		}
		out[[2]string{p, id}] = st
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFaultKillPrimaryPostgres: under load through the GTR, kill -9 of a
// cell's primary Postgres (postmaster and backends) with its data dir
// moved away. The launcher promotes the synchronous standby unaided; every
// transaction final on the primary before the kill is on the new primary,
// equal; the cell serves again within failoverBound and commits new
// transactions there; the checker finds every answer a partner received
// still readable and equal (GetTransaction), nothing lost or applied
// twice, no re-route after a PNR, PENDING all resolved. The old primary's
// node returns as the synchronous standby and takes no writes.
func TestFaultKillPrimaryPostgres(t *testing.T) { killPrimary(t, sharedTarget(), "cell-b", 0) }

// killPrimary is TestFaultKillPrimaryPostgres on target's cell. At most a
// share maxRetryable of the answers may be UNAVAILABLE, which the GTR says
// were never started (retry unchanged) and the checker has verified
// nothing of was applied; with 0, no partner may see an error.
func killPrimary(t *testing.T, target faultTarget, cell string, maxRetryable float64) {
	t.Helper()
	p := target.p
	if p.Standby(cell) == nil {
		t.Fatalf("%s has no standby", cell)
	}
	var (
		before   map[[2]string]string
		killed   time.Time
		promoted time.Time
		oldDir   string
	)
	answers := runFaultOn(t, target, fault{
		name: "pgprimary",
		break_: func(t *testing.T, ctx context.Context) {
			prim := p.Postgres(cell)
			before = finalRows(t, ctx, target.db(t, ctx, cell))
			oldDir = prim.DataDir()
			killed = time.Now()
			if err := syscall.Kill(-prim.Pid(), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(oldDir, oldDir+".moved"); err != nil {
				t.Fatal(err)
			}
		},
		// A short hold: heal measures how soon the cell serves again.
		hold: 100 * time.Millisecond,
		heal: func(t *testing.T, ctx context.Context) {
			// Nobody heals it: the launcher must have failed over by itself.
			testutil.Eventually(t, failoverBound, "the standby promoted", func() bool { return len(p.Failovers(cell)) > 0 })
			f := p.Failovers(cell)[len(p.Failovers(cell))-1]
			promoted = f.Promoted
			if !testutil.Within(failoverBound, func() bool { return target.serving(cell, time.Second) }) {
				// Why, for a run whose logs are gone: the cell's health
				// changes and the launcher's failover.
				t.Logf("%s's warnings and errors, last 20:\n%s", cell, warnings(filepath.Join(p.LogDir(), cell+".log"), 20))
				t.Logf("platform.log, its end:\n%s", tail(filepath.Join(p.LogDir(), "platform.log")))
				t.Fatalf("not within %v: %s serving on its promoted standby", failoverBound, cell)
			}
			t.Logf("%s: %s; promoted %d ms after the kill (%d ms after detection), serving %d ms after the kill",
				cell, f.Reason, f.Promoted.Sub(killed).Milliseconds(), f.Took().Milliseconds(), time.Since(killed).Milliseconds())
			if time.Since(killed) > failoverBound {
				t.Fatalf("%s served again %v after the kill, bound %v", cell, time.Since(killed), failoverBound)
			}
		},
	})
	noFailuresShown(t, retryableAllowed(t, answers, maxRetryable))
	ctx := ctxFor(t, 3*time.Minute)
	if len(before) == 0 {
		t.Fatalf("%s had no final transaction before the kill: the fault tested nothing", cell)
	}
	after := finalRows(t, ctx, target.db(t, ctx, cell))
	for k, st := range before {
		if after[k] != st {
			t.Errorf("%s/%s was %s on the old primary, %q on the new one", k[0], k[1], st, after[k])
		}
	}
	t.Logf("%s: %d transactions final before the kill, all on the new primary", cell, len(before))

	// The cell takes traffic again: transactions created after the
	// promotion are committed there (a short second load, since the GTR
	// brings a returning cell back on a small share first).
	conn := target.db(t, ctx, cell)
	newRows := func() int {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM transactions WHERE created_at > $1", promoted).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if newRows() == 0 {
		cfg := load.Config{
			Target: load.TargetGTR, Addr: target.gtrAddr, DialOptions: target.gtrOpts, Mode: load.ModeOpen,
			Rate: 50, Concurrency: 64, Count: 150, Duration: 3 * time.Second, Seed: uint64(time.Now().UnixNano()),
			RunID: runID + "-pgprimary-after-" + cell, PerRequestTimeout: 12 * time.Second,
		}
		if _, err := load.Run(ctx, cfg, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := newRows(); n == 0 {
		t.Fatalf("%s committed no transaction on its new primary", cell)
	} else {
		t.Logf("%s: %d transactions committed on the new primary", cell, n)
	}

	// The old primary's node comes back as the synchronous standby,
	// read-only; the old data dir is never started.
	testutil.Eventually(t, 90*time.Second, "a new synchronous standby for "+cell, func() bool {
		return !p.Degraded(cell) && p.Standby(cell) != nil
	})
	sb := p.Standby(cell)
	if sb.DataDir() != oldDir {
		t.Errorf("new standby in %s, want the old primary's node %s", sb.DataDir(), oldDir)
	}
	su, err := pgx.Connect(ctx, sb.URL("cellpay"))
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close(ctx)
	if _, err := su.Exec(ctx, "CREATE TABLE fenced_probe (id int)"); err == nil || !isReadOnly(err) {
		t.Fatalf("a write on the old primary's node: %v, want read_only_sql_transaction", err)
	}
	if names, err := p.Postgres(cell).SynchronousStandby(ctx); err != nil || names != "cellpay_standby" {
		t.Fatalf("synchronous_standby_names on the new primary = %q, %v", names, err)
	}
}

// retryableAllowed returns answers without their UNAVAILABLE ones when
// those are at most a share max of them (logged), and all of answers
// otherwise, for noFailuresShown to report.
func retryableAllowed(t *testing.T, answers []checker.Answer, max float64) []checker.Answer {
	t.Helper()
	var rest []checker.Answer
	for _, a := range answers {
		if a.Code != codes.Unavailable {
			rest = append(rest, a)
		}
	}
	n := len(answers) - len(rest)
	if n == 0 || float64(n) > max*float64(len(answers)) {
		return answers
	}
	t.Logf("%d of %d answers UNAVAILABLE (never started, retryable; allowed up to %.1f%%)", n, len(answers), 100*max)
	return rest
}

func isReadOnly(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25006"
}
