package platform_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"

	"github.com/cellpay/cellpay/internal/dev/pgcluster"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
)

// TestPlatformFailover: kill -9 of a cell's primary with its data dir
// moved away. The watchdog promotes the standby unaided; the cell's URL
// finds it; every committed row is there; the old primary's node comes
// back as the new synchronous standby, which takes no writes; the old
// primary never runs again.
func TestPlatformFailover(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := fakesConfig(t, ctx)
	cfg.Cells = cfg.Cells[:1]
	cfg.NoBackupGTR = true
	var out testutil.Buffer
	cfg.Stderr = &out
	p, err := platform.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}()
	const cell = "cell-a"
	old, sb := p.Postgres(cell), p.Standby(cell)
	if sb == nil || old.Port() != cfg.PGBasePort || sb.Port() != cfg.StandbyBasePort {
		t.Fatalf("primary %v, standby %v; want them on %d and %d", old, sb, cfg.PGBasePort, cfg.StandbyBasePort)
	}
	if names, err := old.SynchronousStandby(ctx); err != nil || names != "cellpay_standby" {
		t.Fatalf("synchronous_standby_names = %q, %v", names, err)
	}
	owner := connectURL(t, ctx, p.CellMigrateDatabaseURL(cell))
	if _, err := owner.Exec(ctx, "CREATE TABLE t (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	app := connectURL(t, ctx, p.CellDatabaseURL(cell))
	for i := range 100 {
		if _, err := app.Exec(ctx, "INSERT INTO t VALUES ($1)", i); err != nil {
			t.Fatal(err)
		}
	}

	// kill -9 of the postmaster and every backend, and the data dir gone.
	if err := old.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(old.DataDir(), old.DataDir()+".moved"); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	testutil.Eventually(t, 30*time.Second, "the standby promoted", func() bool { return len(p.Failovers(cell)) == 1 })
	f := p.Failovers(cell)[0]
	t.Logf("failover: %s, promoted %v after the kill (%v after detection)", f.Reason, f.Promoted.Sub(killed), f.Took())
	if p.Postgres(cell) != sb {
		t.Fatal("Postgres() is not the promoted standby")
	}
	// A new connection on the cell's URL lands on the new primary, with
	// every committed row, and writes.
	app2 := connectURL(t, ctx, p.CellDatabaseURL(cell))
	var n int
	if err := app2.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 100 {
		t.Fatalf("rows on the new primary: %d, %v; want 100", n, err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	if _, err := app2.Exec(wctx, "INSERT INTO t VALUES (100)"); err != nil {
		t.Fatalf("write on the new primary: %v", err)
	}
	wcancel()

	// The old primary's node returns as the synchronous standby.
	testutil.Eventually(t, 90*time.Second, "a new standby", func() bool { return !p.Degraded(cell) && p.Standby(cell) != nil })
	nsb := p.Standby(cell)
	if nsb.Port() != cfg.PGBasePort {
		t.Fatalf("new standby on port %d, want %d", nsb.Port(), cfg.PGBasePort)
	}
	if names, err := sb.SynchronousStandby(ctx); err != nil || names != "cellpay_standby" {
		t.Fatalf("synchronous_standby_names on the new primary = %q, %v", names, err)
	}
	// Fenced: the old primary's port takes no writes, and it never runs.
	direct := connectURL(t, ctx, hostURL(t, p.CellDatabaseURL(cell), cfg.PGBasePort))
	if _, err := direct.Exec(ctx, "INSERT INTO t VALUES (101)"); sqlStateOf(err) != "25006" {
		t.Fatalf("write on the old primary's port: %v, want read_only_sql_transaction", err)
	}
	if err := old.Restart(ctx); !errors.Is(err, pgcluster.ErrFenced) {
		t.Fatalf("Restart of the old primary: %v, want ErrFenced", err)
	}
	// A standby that crashes is not waited for: degraded, then back.
	if err := nsb.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "degraded after the standby's crash", func() bool { return p.Degraded(cell) })
	wctx, wcancel = context.WithTimeout(ctx, 3*time.Second)
	if _, err := app2.Exec(wctx, "INSERT INTO t VALUES (102)"); err != nil {
		t.Fatalf("a commit without the standby: %v", err)
	}
	wcancel()
	testutil.Eventually(t, 60*time.Second, "the standby back", func() bool { return !p.Degraded(cell) && p.Standby(cell) != nil })
	if names, err := sb.SynchronousStandby(ctx); err != nil || names != "cellpay_standby" {
		t.Fatalf("synchronous_standby_names after the standby's return = %q, %v", names, err)
	}

	ri := p.RunInfo()
	if ri.Cells[0].Primary != fmt.Sprintf("127.0.0.1:%d", cfg.StandbyBasePort) {
		t.Errorf("run info: primary %s", ri.Cells[0].Primary)
	}
	if log := out.String(); !strings.Contains(log, "FAILOVER cell-a") || !strings.Contains(log, "RESTORED") {
		t.Errorf("the launcher's log does not say it:\n%s", log)
	}

	// With its standby stopped, a primary that dies is not failed over,
	// and the watchdog says so once.
	if err := p.Standby(cell).Stop(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if n := len(p.Failovers(cell)); n != 1 {
		t.Errorf("%d failovers without a standby to promote, want still 1", n)
	}
	if n := strings.Count(out.String(), "NO STANDBY"); n != 1 {
		t.Errorf("the watchdog said %d times that there is no standby, want once", n)
	}
}

// hostURL is u on one host, 127.0.0.1:port, whatever it serves.
func hostURL(t *testing.T, u string, port int) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	pu.Host = fmt.Sprintf("127.0.0.1:%d", port)
	q := pu.Query()
	q.Set("target_session_attrs", "any")
	pu.RawQuery = q.Encode()
	return pu.String()
}

func sqlStateOf(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
