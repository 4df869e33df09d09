package pgcluster

import (
	"context"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellpay/cellpay/internal/dev/testutil"
)

// TestSignalAndKillReachEveryProcess: a postmaster's children each run in
// a session of their own, so signalling the postmaster's process group
// would freeze or kill the postmaster alone. Signal(SIGSTOP) stops every
// process of the server (a query then waits), SIGCONT resumes them all,
// and Kill leaves none of them alive.
func TestSignalAndKillReachEveryProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := Start(ctx, Config{DataDir: filepath.Join(t.TempDir(), "data")})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	kids := childrenOf(c.Pid())
	if len(kids) < 3 { // checkpointer, background writer, WAL writer, this session's backend...
		t.Fatalf("postmaster %d has %d children (%v), want the server's processes", c.Pid(), len(kids), kids)
	}

	query := func(d time.Duration) error {
		qctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		var one int
		return conn.QueryRow(qctx, "SELECT 1").Scan(&one)
	}
	if err := c.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP: %v", err)
	}
	// A child listed before the signal may have exited since (an
	// autovacuum worker ending, say): with its postmaster stopped it stays
	// a zombie, which is not running either. What must hold is that no
	// process of the server still runs: neither one listed before the
	// signal nor one there now.
	stopped := append([]int{c.Pid()}, kids...)
	testutil.Eventually(t, 10*time.Second, "every process of the server stopped", func() bool {
		now := append(slices.Clone(stopped), childrenOf(c.Pid())...)
		return !slices.ContainsFunc(now, func(pid int) bool { return alive(pid) && !testutil.Stopped(pid) })
	})
	if err := query(300 * time.Millisecond); err == nil {
		t.Fatal("a query was answered by a stopped server")
	}
	if err := c.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT: %v", err)
	}
	// The timed-out query cost the session (pgx closes a connection whose
	// query it abandoned); a new one is answered.
	conn2, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatalf("connect after SIGCONT: %v", err)
	}
	defer conn2.Close(context.Background())
	if _, err := conn2.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("query after SIGCONT: %v", err)
	}

	kids = childrenOf(c.Pid())
	if err := c.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if left := slices.DeleteFunc(kids, func(pid int) bool { return !alive(pid) }); len(left) > 0 {
		t.Fatalf("processes %v of the killed server still alive when Kill returned", left)
	}
}
