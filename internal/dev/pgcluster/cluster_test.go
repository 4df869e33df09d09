package pgcluster_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/cellpay/cellpay/internal/dev/pgcluster"
	"github.com/cellpay/cellpay/internal/dev/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func startCluster(t *testing.T, ctx context.Context, cfg pgcluster.Config) *pgcluster.Cluster {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = filepath.Join(t.TempDir(), "data")
	}
	c, err := pgcluster.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return c
}

func exec(t *testing.T, ctx context.Context, url, sql string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, ctx context.Context, url, table string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func TestStartCreateDatabaseStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := startCluster(t, ctx, pgcluster.Config{NoSync: true, Settings: map[string]string{"work_mem": "8MB"}})

	if c.Port() == 0 || c.Port() == 5432 {
		t.Fatalf("Port() = %d, want a private port", c.Port())
	}
	want := "postgres://postgres@127.0.0.1:" + strconv.Itoa(c.Port()) + "/app?sslmode=disable"
	if got := c.URL("app"); got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
	for range 2 { // idempotent
		if err := c.CreateDatabase(ctx, "app"); err != nil {
			t.Fatalf("CreateDatabase: %v", err)
		}
	}
	exec(t, ctx, c.URL("app"), "CREATE TABLE t (id int)")

	conn, err := pgx.Connect(ctx, c.URL("app"))
	if err != nil {
		t.Fatal(err)
	}
	var maxConns, workMem, enc string
	if err := conn.QueryRow(ctx, "SELECT current_setting('max_connections'), current_setting('work_mem'), pg_encoding_to_char(encoding) FROM pg_database WHERE datname = 'app'").Scan(&maxConns, &workMem, &enc); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if maxConns != "200" || workMem != "8MB" || enc != "UTF8" {
		t.Errorf("settings: max_connections=%s work_mem=%s encoding=%s", maxConns, workMem, enc)
	}

	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if c.Running() {
		t.Fatal("Running after Stop")
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := pgx.Connect(ctx, c.URL("app")); err == nil {
		t.Fatal("connected after Stop")
	}
}

func TestRestartKeepsData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "nested", "data")
	c := startCluster(t, ctx, pgcluster.Config{DataDir: dir}) // fsync on: the default
	port := c.Port()
	if err := c.CreateDatabase(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	exec(t, ctx, c.URL("app"), "CREATE TABLE t (id int); INSERT INTO t VALUES (1)")

	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("Restart after Stop: %v", err)
	}
	if c.Port() != port {
		t.Fatalf("port changed on restart: %d -> %d", port, c.Port())
	}
	exec(t, ctx, c.URL("app"), "INSERT INTO t VALUES (2)")

	// Restarting a running cluster stops it first.
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("Restart while running: %v", err)
	}
	if n := count(t, ctx, c.URL("app"), "t"); n != 2 {
		t.Fatalf("rows after restart = %d, want 2", n)
	}

	// A second Start on the same directory reuses the cluster.
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	c2 := startCluster(t, ctx, pgcluster.Config{DataDir: dir})
	if n := count(t, ctx, c2.URL("app"), "t"); n != 2 {
		t.Fatalf("rows after reopening = %d, want 2", n)
	}
}

func TestKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := startCluster(t, ctx, pgcluster.Config{})
	if err := c.CreateDatabase(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	// A committed row survives a crash; an open connection sees it die.
	exec(t, ctx, c.URL("app"), "CREATE TABLE t (id int); INSERT INTO t VALUES (1)")
	conn, err := pgx.Connect(ctx, c.URL("app"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	if err := c.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if c.Running() {
		t.Fatal("Running after Kill")
	}
	// The postmaster is reaped when Kill returns, but a backend serving an
	// open connection may take a moment longer to die: wait for the effect.
	testutil.Eventually(t, 10*time.Second, "the open connection fails after Kill", func() bool {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return conn.Ping(pctx) != nil
	})
	if _, err := pgx.Connect(ctx, c.URL("app")); err == nil {
		t.Fatal("a new connection succeeded on a killed server")
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("Restart after Kill: %v", err)
	}
	if n := count(t, ctx, c.URL("app"), "t"); n != 1 {
		t.Fatalf("rows after crash = %d, want 1", n)
	}
}

func TestStartFailureIsReported(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := pgcluster.Config{
		DataDir:  filepath.Join(t.TempDir(), "data"),
		NoSync:   true,
		Settings: map[string]string{"no_such_setting": "1"},
	}
	c, err := pgcluster.Start(ctx, cfg)
	if err == nil {
		c.Stop()
		t.Fatal("Start succeeded with a bad setting")
	}
	if !strings.Contains(err.Error(), "no_such_setting") {
		t.Errorf("error does not quote the server log: %v", err)
	}

	if _, err := pgcluster.Start(ctx, pgcluster.Config{DataDir: t.TempDir(), Settings: map[string]string{"port": "1"}}); err == nil {
		t.Error("Start accepted a managed setting")
	}
	if _, err := pgcluster.Start(ctx, pgcluster.Config{}); err == nil {
		t.Error("Start accepted an empty DataDir")
	}
}

func TestStartHonoursContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	_, err := pgcluster.Start(ctx, pgcluster.Config{DataDir: filepath.Join(t.TempDir(), "data"), NoSync: true})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start with an expiring context: %v, want DeadlineExceeded", err)
	}
}

// TestInRecoveryKeepsItsSession: checks run on one session (no backend
// start per check), fail while the server is down, and connect again once
// it is back.
func TestInRecoveryKeepsItsSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := startCluster(t, ctx, pgcluster.Config{NoSync: true})
	sessions := func() int64 {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.URL("template1")) // not counted with postgres's
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var n int64
		if err := conn.QueryRow(ctx, "SELECT sessions FROM pg_stat_database WHERE datname = 'postgres'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	check := func() error {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		rec, err := c.InRecovery(cctx)
		if err == nil && rec {
			return errors.New("a primary in recovery")
		}
		return err
	}
	if err := check(); err != nil {
		t.Fatal(err)
	}
	before := sessions()
	for range 20 {
		if err := check(); err != nil {
			t.Fatal(err)
		}
	}
	// A backend reports its session to pg_stat_database when it flushes
	// its statistics (at exit, or idle at most once a second), so the kept
	// session may be counted in between: one, where 20 checks that each
	// connected would count 20.
	if n := sessions() - before; n > 1 {
		t.Fatalf("20 checks started %d sessions, want at most 1 (one session kept)", n)
	}

	// A crash, not Kill (which closes the session first): the kept
	// session breaks under the checks, which must fail and then connect
	// again.
	if err := c.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// A backend may take a moment longer than its postmaster to die.
	testutil.Eventually(t, 10*time.Second, "checks of the crashed server fail", func() bool { return !c.Running() && check() != nil })
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := check(); err != nil {
		t.Fatalf("a check after the restart: %v", err)
	}
}
