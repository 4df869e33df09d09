package platform_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
)

// TestSiteCopy: a cross-site copy of a cell's database streams through a
// site link, asynchronously (a commit on the primary never waits for it:
// with the link cut, commits go on); what crossed before the cut is on
// it, what was committed after is not. With the cell's site killed -9
// (its process and its primary), the copy promoted takes writes, and the
// cell, its database moved there, starts on it.
func TestSiteCopy(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := fakesConfig(t, ctx)
	cfg.Cells = cfg.Cells[:1]
	cfg.NoBackupGTR = true
	cfg.NoStandby = true
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
	link := platform.NewSiteLink(10 * time.Millisecond)
	defer link.Close()
	port := freePorts(t, 1)[0]
	sc, err := p.StartSiteCopy(ctx, cell, link, port)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Cluster().Port() != port {
		t.Fatalf("copy on port %d, want %d", sc.Cluster().Port(), port)
	}
	if names, err := p.Postgres(cell).SynchronousStandby(ctx); err != nil || names != "" {
		t.Fatalf("synchronous_standby_names = %q, %v: the copy must not be waited for", names, err)
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
	testutil.Eventually(t, 20*time.Second, "the copy caught up", func() bool {
		lag, err := sc.Lag(ctx)
		return err == nil && lag.Streaming && lag.Bytes == 0
	})

	link.Cut()
	cut := time.Now()
	for i := 100; i < 110; i++ {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := app.Exec(wctx, "INSERT INTO t VALUES ($1)", i)
		wcancel()
		if err != nil {
			t.Fatalf("a commit with the link cut: %v", err)
		}
	}
	var lsn string
	if err := app.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the primary sees the copy cut off and behind", func() bool {
		lag, err := sc.Lag(ctx)
		return err == nil && !lag.Streaming && lag.Bytes > 0
	})
	if err := p.KillCellSite(cell); err != nil {
		t.Fatal(err)
	}
	if p.Process(cell).Running() || p.Postgres(cell).Running() {
		t.Fatal("the cell or its primary survived KillCellSite")
	}
	behind, err := sc.BytesBehind(ctx, lsn)
	if err != nil || behind <= 0 {
		t.Fatalf("copy behind the lost primary by %d bytes, %v; want some", behind, err)
	}
	r, err := sc.Replayed(ctx)
	if err != nil || r.LastCommit.IsZero() || r.LastCommit.After(cut) {
		t.Fatalf("replayed %+v, %v: want the last commit before the cut at %v", r, err, cut)
	}
	t.Logf("copy %d bytes behind the lost primary; its last commit replayed %v before the cut", behind, cut.Sub(r.LastCommit))

	if err := sc.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.MoveCellDatabase(cell, sc.DatabaseURL(), sc.MigrateDatabaseURL()); err != nil {
		t.Fatal(err)
	}
	if p.CellDatabaseURL(cell) != sc.DatabaseURL() || p.CellMigrateDatabaseURL(cell) != sc.MigrateDatabaseURL() {
		t.Fatal("the cell's URLs are not the copy's after MoveCellDatabase")
	}
	moved := connectURL(t, ctx, p.CellDatabaseURL(cell))
	var n int
	if err := moved.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 100 {
		t.Fatalf("rows on the promoted copy: %d, %v; want the 100 committed before the cut", n, err)
	}
	if _, err := moved.Exec(ctx, "INSERT INTO t VALUES (100)"); err != nil {
		t.Fatalf("a write on the promoted copy: %v", err)
	}
	// The cell starts on its moved database (the stand-in connects to
	// both URLs before it serves), with them in its environment.
	if err := p.Process(cell).Restart(ctx); err != nil {
		t.Fatal(err)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.Process(cell).Pid()))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []string{"CELL_DATABASE_URL=" + sc.DatabaseURL(), "CELL_MIGRATE_DATABASE_URL=" + sc.MigrateDatabaseURL()} {
		if !bytes.Contains(environ, append([]byte(kv), 0)) {
			t.Errorf("the restarted cell's environment lacks %s", kv[:bytes.IndexByte([]byte(kv), '=')])
		}
	}
	if bytes.Count(environ, []byte("CELL_DATABASE_URL=")) != 1 {
		t.Error("the restarted cell's environment names its database more than once")
	}
}
