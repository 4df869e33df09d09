package pgcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/pgcluster"
	"github.com/cellpay/cellpay/internal/testutil"
)

// TestReadReplication: the app role EnsureRoles makes (pg_monitor) reads a
// streaming synchronous standby on the primary; with the standby stopped,
// none; the role without pg_monitor reads none either, and says it cannot
// see them (Visible false), which is why EnsureRoles grants it.
func TestReadReplication(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	primary, standby, ca := startPair(t, ctx)
	if err := primary.CreateDatabase(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if err := pgcluster.EnsureRoles(ctx, primary.URL("postgres"), "app", testRoles); err != nil {
		t.Fatal(err)
	}
	app := connect(t, ctx, primary.TLSURL(testRoles.App, testRoles.AppPassword, "app", ca))
	read := func() pgcluster.ReplicationStatus {
		t.Helper()
		s, err := pgcluster.ReadReplication(ctx, app)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := read(); !s.Visible || s.Standbys != 1 || s.Synchronous != 1 || s.ReplayLag < 0 || s.ReplayLag > 10*time.Second {
		t.Fatalf("with the standby streaming: %+v, want 1 standby, synchronous, a small lag", s)
	}

	// Without pg_monitor the same query sees nothing.
	exec(t, ctx, primary.URL("app"), "REVOKE pg_monitor FROM "+testRoles.App)
	app.Close(ctx)
	app = connect(t, ctx, primary.TLSURL(testRoles.App, testRoles.AppPassword, "app", ca))
	if s := read(); s.Visible || s.Standbys != 0 || s.Synchronous != 0 {
		t.Fatalf("without pg_monitor: %+v, want nothing visible, and said so", s)
	}
	exec(t, ctx, primary.URL("app"), "GRANT pg_monitor TO "+testRoles.App)

	// Commits would wait now (synchronous_commit on): only read.
	if err := standby.Stop(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the stopped standby gone from pg_stat_replication", func() bool {
		s := read()
		return s.Visible && s.Standbys == 0 && s.Synchronous == 0
	})
}
