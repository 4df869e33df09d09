package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellpay/cellpay/internal/dev/pgcluster"
	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/internal/dev/testutil"
)

// TestReadReplication: the app role pgcluster.EnsureRoles makes (with
// pg_monitor) reads a streaming synchronous standby on the primary; with
// the standby stopped, none; the role without pg_monitor reads none either,
// and says it cannot see them (Visible false), which is why the app role
// is granted it.
func TestReadReplication(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	pair := pgtest.StartPair(t, ctx)
	primary := pair.Primary
	if err := primary.CreateDatabase(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	roles := pgcluster.Roles{Owner: "cellpay_owner", OwnerPassword: strings.Repeat("o", 20), App: "cellpay_app", AppPassword: strings.Repeat("a", 20)}
	if err := pgcluster.EnsureRoles(ctx, primary.URL("postgres"), "app", roles); err != nil {
		t.Fatal(err)
	}
	connect := func(url string) *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	asApp := primary.TLSURL(roles.App, roles.AppPassword, "app", pair.CA)
	super := connect(primary.URL("app"))
	app := connect(asApp)
	read := func() ReplicationStatus {
		t.Helper()
		s, err := readReplication(ctx, app)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := read(); !s.Visible || s.Standbys != 1 || s.Synchronous != 1 || s.ReplayLag < 0 || s.ReplayLag > 10*time.Second {
		t.Fatalf("with the standby streaming: %+v, want 1 standby, synchronous, a small lag", s)
	}

	// Without pg_monitor the same query sees nothing.
	if _, err := super.Exec(ctx, "REVOKE pg_monitor FROM "+roles.App); err != nil {
		t.Fatal(err)
	}
	app = connect(asApp)
	if s := read(); s.Visible || s.Standbys != 0 || s.Synchronous != 0 {
		t.Fatalf("without pg_monitor: %+v, want nothing visible, and said so", s)
	}
	if _, err := super.Exec(ctx, "GRANT pg_monitor TO "+roles.App); err != nil {
		t.Fatal(err)
	}
	app = connect(asApp)

	// Commits would wait now (synchronous_commit on): only read.
	if err := pair.Standby.Stop(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the stopped standby gone from pg_stat_replication", func() bool {
		s := read()
		return s.Visible && s.Standbys == 0 && s.Synchronous == 0
	})
}
