package pgcluster_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellpay/cellpay/internal/dev/pgcluster"
	"github.com/cellpay/cellpay/internal/dev/pgtest"
)

const (
	replUser     = pgtest.ReplicationUser
	replPassword = pgtest.ReplicationPassword
	standbyName  = pgtest.StandbyName
	slotName     = pgtest.SlotName
)

// startPair starts a pgtest.Pair: a primary and a synchronous standby, both
// with TLS.
func startPair(t *testing.T, ctx context.Context) (primary, standby *pgcluster.Cluster, ca string) {
	t.Helper()
	p := pgtest.StartPair(t, ctx)
	return p.Primary, p.Standby, p.CA
}

// TestStandbySynchronous: a commit that returns is on the standby; with
// the standby stopped, a commit does not return; once it is back, it does.
func TestStandbySynchronous(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	primary, standby, ca := startPair(t, ctx)

	if rec, err := standby.InRecovery(ctx); err != nil || !rec {
		t.Fatalf("standby in recovery: %v, %v", rec, err)
	}
	// Streamed over TLS as the replication role: nothing else may connect
	// for replication.
	su := connect(t, ctx, primary.URL("postgres"))
	var user string
	var ssl bool
	if err := su.QueryRow(ctx, `SELECT r.usename, s.ssl FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid)
		WHERE r.application_name = $1`, standbyName).Scan(&user, &ssl); err != nil || user != replUser || !ssl {
		t.Fatalf("replication connection: user %q ssl %v (%v); want %s over TLS", user, ssl, err, replUser)
	}

	// The replication role has no database session.
	if c, err := pgx.Connect(ctx, primary.TLSURL(replUser, replPassword, "postgres", ca)); err == nil {
		c.Close(ctx)
		t.Fatal("the replication role opened a database session")
	} else if sqlState(err) != "28000" {
		t.Fatalf("the replication role's session: %v, want invalid_authorization_specification", err)
	}

	exec(t, ctx, primary.URL("postgres"), "CREATE TABLE t (id int)")
	// remote_apply waits for the standby to replay, not only to flush, so
	// the row is readable there as soon as the commit returns; it waits
	// at all only because the standby is synchronous.
	conn := connect(t, ctx, primary.URL("postgres"))
	if _, err := conn.Exec(ctx, "SET synchronous_commit = remote_apply"); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := conn.Exec(ctx, "INSERT INTO t VALUES ($1)", i); err != nil {
			t.Fatal(err)
		}
		if n := count(t, ctx, standby.URL("postgres"), "t"); n != i+1 {
			t.Fatalf("after commit %d the standby has %d rows", i+1, n)
		}
	}
	// The standby takes no writes.
	sconn := connect(t, ctx, standby.URL("postgres"))
	if _, err := sconn.Exec(ctx, "INSERT INTO t VALUES (99)"); sqlState(err) != "25006" {
		t.Fatalf("write on the standby: %v, want read_only_sql_transaction", err)
	}

	// Without its standby, a commit (synchronous_commit on) does not return.
	if err := standby.Stop(); err != nil {
		t.Fatal(err)
	}
	blocked := connect(t, ctx, primary.URL("postgres"))
	done := make(chan error, 1)
	go func() {
		_, err := blocked.Exec(ctx, "INSERT INTO t VALUES (100)")
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a commit returned within 1 s with the synchronous standby stopped: %v", err)
	case <-time.After(time.Second):
	}
	if err := standby.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the waiting commit: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting commit did not return within 30 s of the standby's return")
	}
	if n := count(t, ctx, primary.URL("postgres"), "t"); n != 21 {
		t.Fatalf("rows = %d, want 21", n)
	}
}

// TestStandbyPromoteAndFence: kill -9 the primary with its data dir moved
// away; every row a commit returned for is on the promoted standby, which
// takes writes at once (no wait for a standby it does not have); the old
// primary never runs again.
func TestStandbyPromoteAndFence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	primary, standby, _ := startPair(t, ctx)
	exec(t, ctx, primary.URL("postgres"), "CREATE TABLE t (id int)")
	conn := connect(t, ctx, primary.URL("postgres"))
	for i := range 200 {
		if _, err := conn.Exec(ctx, "INSERT INTO t VALUES ($1)", i); err != nil {
			t.Fatal(err)
		}
	}
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if !primary.Crashed() {
		t.Fatal("Crashed() = false after Kill")
	}
	moved := primary.DataDir() + ".moved"
	if err := os.Rename(primary.DataDir(), moved); err != nil {
		t.Fatal(err)
	}
	if err := primary.Fence(); err != nil {
		t.Fatalf("Fence: %v", err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatalf("Promote: %v", err)
	}
	if rec, err := standby.InRecovery(ctx); err != nil || rec {
		t.Fatalf("in recovery after Promote: %v, %v", rec, err)
	}
	if n := count(t, ctx, standby.URL("postgres"), "t"); n != 200 {
		t.Fatalf("the promoted standby has %d of 200 committed rows", n)
	}
	if names, err := standby.SynchronousStandby(ctx); err != nil || names != "" {
		t.Fatalf("synchronous_standby_names after Promote = %q, %v; want '' (degraded)", names, err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	exec(t, wctx, standby.URL("postgres"), "INSERT INTO t VALUES (200)")
	wcancel()

	// The fenced primary never starts again, nor does its data dir, put
	// back or not.
	if err := primary.Restart(ctx); !errors.Is(err, pgcluster.ErrFenced) {
		t.Fatalf("Restart of a fenced cluster: %v, want ErrFenced", err)
	}
	if err := os.Rename(moved, primary.DataDir()); err != nil {
		t.Fatal(err)
	}
	if err := primary.Fence(); err != nil { // the dir is back: mark it
		t.Fatal(err)
	}
	if _, err := pgcluster.Start(ctx, pgcluster.Config{DataDir: primary.DataDir()}); !errors.Is(err, pgcluster.ErrFenced) {
		t.Fatalf("Start on a fenced data dir: %v, want ErrFenced", err)
	}
	// And a primary's data dir is never taken for a standby.
	_, err := pgcluster.Start(ctx, pgcluster.Config{DataDir: standby.DataDir(), Port: 1,
		Standby: &pgcluster.Standby{PrimaryPort: 1, Slot: slotName, Name: standbyName}})
	if !errors.Is(err, pgcluster.ErrNotStandby) {
		t.Fatalf("Start as a standby on a primary's data dir: %v, want ErrNotStandby", err)
	}
}
