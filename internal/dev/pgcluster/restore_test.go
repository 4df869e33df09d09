package pgcluster_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/pgcluster"
	"github.com/cellpay/cellpay/internal/dev/pki"
)

// TestBackupRestore: a base backup of a primary with TLS, taken as its
// replication role, and the WAL archived around it, restore into a new
// server that holds every row committed before the backup and after it up
// to the last archived segment, none after, and takes writes; the slot
// the archive streamed through is gone, and the primary runs on.
func TestBackupRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	dir := t.TempDir()
	cert, key, ca, err := pki.Loopback(filepath.Join(dir, "pki"), "postgres-test")
	if err != nil {
		t.Fatal(err)
	}
	tls := &pgcluster.TLS{CertFile: cert, KeyFile: key}
	primary := startCluster(t, ctx, pgcluster.Config{
		DataDir: filepath.Join(dir, "primary"), TLS: tls, ReplicationUser: replUser, Settings: map[string]string{"fsync": "off"},
	})
	const slot = "restore_test"
	if err := pgcluster.EnsureReplication(ctx, primary.URL("postgres"), pgcluster.Replication{User: replUser, Password: replPassword}, slot); err != nil {
		t.Fatal(err)
	}
	su := primary.URL("postgres")
	exec(t, ctx, su, "CREATE TABLE t (id int PRIMARY KEY, phase text NOT NULL)")
	insert := func(phase string, from, n int) {
		t.Helper()
		conn := connect(t, ctx, su)
		for i := from; i < from+n; i++ {
			if _, err := conn.Exec(ctx, "INSERT INTO t VALUES ($1, $2)", i, phase); err != nil {
				t.Fatal(err)
			}
		}
	}
	insert("before", 0, 100)

	src := pgcluster.Source{Port: primary.Port(), User: replUser, Password: replPassword, CAFile: ca}
	walDir, backupDir := filepath.Join(dir, "wal"), filepath.Join(dir, "base")
	archive, err := pgcluster.ArchiveWAL(ctx, src, walDir, slot)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = archive.Stop(context.Background())
		}
	})
	if err := pgcluster.BaseBackup(ctx, src, backupDir); err != nil {
		t.Fatal(err)
	}
	if err := pgcluster.BaseBackup(ctx, src, backupDir); err == nil {
		t.Error("a base backup into a directory that holds one: no error")
	}
	insert("after", 100, 100)
	seg, err := primary.SwitchWAL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := archive.WaitFor(ctx, seg); err != nil {
		t.Fatal(err)
	}
	// In the segment after the switch, which the archive holds only as
	// .partial: not restored.
	insert("late", 200, 1)
	if err := archive.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped = true
	var slots int
	if err := connect(t, ctx, su).QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&slots); err != nil || slots != 0 {
		t.Errorf("slot %s after Stop: %d, %v; want dropped", slot, slots, err)
	}

	if _, err := pgcluster.Restore(ctx, backupDir, walDir, pgcluster.Config{DataDir: primary.DataDir()}); err == nil {
		t.Error("a restore into a data dir that holds a cluster: no error")
	}
	restored, err := pgcluster.Restore(ctx, backupDir, walDir, pgcluster.Config{DataDir: filepath.Join(dir, "restored"), TLS: tls, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := restored.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	if restored.Port() == primary.Port() {
		t.Fatal("restored on the primary's port")
	}
	conn := connect(t, ctx, restored.URL("postgres"))
	rows, err := conn.Query(ctx, "SELECT phase, count(*) FROM t GROUP BY phase")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for rows.Next() {
		var phase string
		var n int
		if err := rows.Scan(&phase, &n); err != nil {
			t.Fatal(err)
		}
		got[phase] = n
	}
	if rows.Err() != nil || got["before"] != 100 || got["after"] != 100 || got["late"] != 0 {
		t.Fatalf("restored rows by phase %v (%v), want 100 before the backup, 100 after it, none past the archive", got, rows.Err())
	}
	// A primary of its own, which waits for no standby.
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	exec(t, wctx, restored.URL("postgres"), "INSERT INTO t VALUES (1000, 'restored')")
	wcancel()
	if n := count(t, ctx, su, "t"); n != 201 {
		t.Errorf("the primary has %d rows after the restore, want 201", n)
	}
}

// TestRestoreRefuses: a restore needs an empty data dir and is no
// standby; an archive needs a slot name it can use.
func TestRestoreRefuses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dir := t.TempDir()
	full := filepath.Join(dir, "full")
	if err := os.MkdirAll(full, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "PG_VERSION"), []byte("15\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]pgcluster.Config{
		"a data dir in use":       {DataDir: full},
		"a standby":               {DataDir: filepath.Join(dir, "new"), Standby: &pgcluster.Standby{PrimaryPort: 1, Slot: "s", Name: "s"}},
		"its own restore_command": {DataDir: filepath.Join(dir, "new"), Settings: map[string]string{"restore_command": "true"}},
	} {
		if _, err := pgcluster.Restore(ctx, dir, dir, cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := pgcluster.ArchiveWAL(ctx, pgcluster.Source{Port: 1}, filepath.Join(dir, "wal"), "Bad-Slot"); err == nil {
		t.Error("a slot name that is not [a-z0-9_]+: no error")
	}
}
