package e2e

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/dev/objstore"
	"github.com/cellpay/cellpay/internal/dev/pgcluster"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
)

// TestBackupRestoresEveryAnswer takes a backup of a cell's database as
// Kubernetes takes it, with the tools of CloudNativePG's Barman Cloud
// plugin (barman-cloud-backup, -wal-archive, -restore, -wal-restore)
// against an S3 object store (internal/dev/objstore, on loopback over
// TLS, configured as deploy/k8s/base/cell/backup.yaml configures the
// plugin: the bucket cellpay-backups, the cell's ID as the server's name,
// gzip): while partners' load runs through the GTR, the cell's WAL is
// received (pg_receivewal through a slot, from before the backup on) and
// a base backup of its primary is taken into the store. Once the load has
// ended and its last commits are in a complete segment (a WAL switch),
// every complete segment is archived into the store, as the plugin's
// archive_command does, and the backup is restored from the store into a
// new server on a free loopback port, which replays the archive from the
// store to its end and is read as the cell reads its database (its app
// role, TLS verify-full): every transaction the load was answered about
// that lives in the cell (its answer's cell_id) is there with the status
// and amount of its answer, those sent after the base backup ended among
// them, which only the archived WAL holds. The cell's primary runs on, and
// keeps no slot.
func TestBackupRestoresEveryAnswer(t *testing.T) {
	for _, tool := range []string{"barman-cloud-backup", "barman-cloud-wal-archive", "barman-cloud-restore", "barman-cloud-wal-restore"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to test backups: scripts/deps.sh test (make deps) installs Debian's barman-cli-cloud: %v", tool, err)
		}
	}
	ctx := ctxFor(t, 4*time.Minute)
	const cell = "cell-a"
	prim := env.p.Postgres(cell)
	if prim == nil {
		t.Fatalf("%s has no private cluster", cell)
	}
	pgTLS := env.p.TLSFiles("postgres-" + cell)
	password, err := os.ReadFile(filepath.Join(env.p.Config().DataDir, "pgroles", cell, platform.ReplicationRole+".password"))
	if err != nil {
		t.Fatal(err)
	}
	src := pgcluster.Source{
		Port: prim.Port(), User: platform.ReplicationRole, Password: strings.TrimSpace(string(password)),
		CAFile: pgTLS.CA, BinDir: env.p.Config().PGBinDir,
	}
	// The store's CA is read by the restored server's restore_command:
	// a folder the server user can traverse.
	dir := platformDir(t, "cellpay-backup-")
	walDir := filepath.Join(dir, "wal")
	store, err := objstore.Start(filepath.Join(dir, "objstore"), "cellpay-backups")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	// An immediate checkpoint (the manifests leave the plugin's spread
	// one, which only makes the backup's start slower: 25 s here).
	barman := pgcluster.Barman{Endpoint: store.URL, Destination: "s3://cellpay-backups/", Server: cell, Env: store.Env(), ImmediateCheckpoint: true}
	const slot = "cellpay_backup_e2e"
	archive, err := pgcluster.ArchiveWAL(ctx, src, walDir, slot)
	if err != nil {
		t.Fatal(err)
	}
	archiving := true
	t.Cleanup(func() {
		if archiving {
			if err := archive.Stop(ctxFor(t, time.Minute)); err != nil {
				t.Error(err)
			}
		}
	})

	type answer struct {
		partner string
		sent    time.Time
		txn     *cellpayv1.Transaction
	}
	var (
		mu      sync.Mutex
		answers []answer
		failed  int
		errs    []string
	)
	answered := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(answers)
	}
	// run sends count payments over d through the GTR, tagged tag.
	run := func(tag string, count int64, d time.Duration) load.Report {
		rep, err := load.Run(ctx, load.Config{
			// Through the partners' client, as a partner sends: an
			// UNAVAILABLE (the base backup's checkpoint and copy share the
			// host's disk with every database, and on a loaded host stalled
			// commits past the attempt's bound: 14 of 850 in one CI run) is
			// resent under the same ID, as the API asks.
			Target: load.TargetGTR, Endpoints: []string{env.gtrAddr}, DialOptions: env.gtrOpts, Mode: load.ModeOpen,
			Client: client.Config{CallTimeout: 12 * time.Second}, PerRequestTimeout: 30 * time.Second,
			Rate: 40, Concurrency: 64, Count: count, Duration: d, Seed: 42 + uint64(len(tag)), RunID: runID + "-backup" + tag,
			OnResult: func(r load.Result) {
				mu.Lock()
				defer mu.Unlock()
				if r.Err != nil || r.Transaction == nil {
					failed++
					if len(errs) < 5 {
						errs = append(errs, fmt.Sprintf("%s after %v: %v", r.Request.GetTransactionId(), r.Latency.Round(time.Millisecond), r.Err))
					}
					return
				}
				answers = append(answers, answer{partner: r.PartnerID, sent: r.Sent, txn: r.Transaction})
			},
		}, nil)
		if err != nil {
			t.Error(err)
		}
		return rep
	}
	done := make(chan load.Report, 1)
	go func() { done <- run("", 900, 22*time.Second) }()

	// The base backup under load: answers before it, and after it.
	testutil.Eventually(t, 30*time.Second, "100 answers before the base backup", func() bool { return answered() >= 100 })
	started := time.Now()
	backupID, err := barman.Backup(ctx, prim)
	if err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	t.Logf("base backup %s of %s under load into the store in %v, %d answers before it", backupID, cell, ended.Sub(started).Round(time.Millisecond), answered())
	rep := <-done
	// More after the base backup ended, whatever of the first load was
	// left then (a backup through barman-cloud on a loaded host took
	// longer than the load): only the archived WAL holds these.
	after := run("-after", 200, 5*time.Second)
	mu.Lock()
	nfailed, firstErrs := failed, errs
	mu.Unlock()
	if nfailed != 0 || rep.Completed < 800 || after.Completed < 180 {
		t.Fatalf("the load: %d failed, %d and %d completed (errors %v, %v); the first: %s", nfailed, rep.Completed, after.Completed, rep.Errors, after.Errors, strings.Join(firstErrs, "; "))
	}
	// The last answers' commits into a complete segment, archived.
	seg, err := prim.SwitchWAL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := archive.WaitFor(ctxFor(t, 30*time.Second), seg); err != nil {
		t.Fatal(err)
	}
	archiving = false
	if err := archive.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Every complete segment into the store, in order (the one still
	// .partial is not complete).
	segments, _ := filepath.Glob(filepath.Join(walDir, "0*[0-9A-F]"))
	slices.Sort(segments)
	archiveStart := time.Now()
	for _, seg := range segments {
		if err := barman.ArchiveWAL(ctx, seg); err != nil {
			t.Fatal(err)
		}
	}
	wals, err := store.Keys("cellpay-backups", cell+"/wals/", 1000)
	if err != nil || len(wals) < len(segments) {
		t.Fatalf("the store holds %d WAL objects for %d segments archived: %v", len(wals), len(segments), err)
	}
	base, err := store.Keys("cellpay-backups", cell+"/base/"+backupID+"/", 100)
	if err != nil || len(base) == 0 {
		t.Fatalf("the store holds no object of base backup %s under %s/base/: %v", backupID, cell, err)
	}
	t.Logf("%d segments archived into the store in %v", len(segments), time.Since(archiveStart).Round(time.Millisecond))

	restoreStart := time.Now()
	restored, err := pgcluster.RestoreBarman(ctx, barman, backupID, pgcluster.Config{
		DataDir: filepath.Join(dir, "restored"), BinDir: env.p.Config().PGBinDir, NoSync: true,
		TLS: &pgcluster.TLS{CertFile: pgTLS.Cert, KeyFile: pgTLS.Key},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := restored.Stop(); err != nil {
			t.Error(err)
		}
	})
	replayed := countInFile(filepath.Join(dir, "restored", "postgres.log"), "from archive")
	t.Logf("restored from the store on port %d in %v, %d segments restored from the store's archive", restored.Port(), time.Since(restoreStart).Round(time.Millisecond), replayed)
	if replayed == 0 {
		t.Errorf("the restored server replayed no segment from the store (its log: %s)", filepath.Join(dir, "restored", "postgres.log"))
	}

	// Read as the cell reads its database.
	u, err := url.Parse(env.p.CellDatabaseURL(cell))
	if err != nil {
		t.Fatal(err)
	}
	appPassword, _ := u.User.Password()
	conn, err := pgx.Connect(ctx, restored.TLSURL(platform.AppRole, appPassword, "cellpay", pgTLS.CA))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	type row struct {
		state, currency string
		amount          int64
	}
	rows, err := conn.Query(ctx, "SELECT partner_id, transaction_id, state, amount, currency FROM transactions WHERE transaction_id LIKE $1",
		runID+"-backup-%")
	if err != nil {
		t.Fatal(err)
	}
	have := map[[2]string]row{}
	for rows.Next() {
		var p, id string
		var r row
		if err := rows.Scan(&p, &id, &r.state, &r.amount, &r.currency); err != nil {
			t.Fatal(err)
		}
		have[[2]string{p, id}] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	var inCell, afterBackup, pending int
	for _, a := range answers {
		if a.txn.GetCellId() != cell {
			continue
		}
		inCell++
		if a.sent.After(ended) {
			afterBackup++
		}
		id := a.txn.GetTransactionId()
		r, ok := have[[2]string{a.partner, id}]
		if !ok {
			t.Errorf("%s/%s (%s, sent %v after the base backup ended) is not in the restored database", a.partner, id, a.txn.GetStatus(), a.sent.Sub(ended).Round(time.Millisecond))
			continue
		}
		want := restoredState(a.txn.GetStatus())
		if a.txn.GetStatus() == cellpayv1.TransactionStatus_PENDING {
			// Answered before its outcome was known: resolved since, or not.
			pending++
			want = []string{"sending", "approved", "declined", "failed"}
		}
		if !slices.Contains(want, r.state) || r.amount != a.txn.GetAmount().GetMinorUnits() || r.currency != a.txn.GetAmount().GetCurrency() {
			t.Errorf("%s/%s: answered %s %d %s, restored %s %d %s", a.partner, id, a.txn.GetStatus(),
				a.txn.GetAmount().GetMinorUnits(), a.txn.GetAmount().GetCurrency(), r.state, r.amount, r.currency)
		}
	}
	if inCell < 100 || afterBackup == 0 {
		t.Fatalf("%d answers from %s, %d of them sent after the base backup: the restore tested too little", inCell, cell, afterBackup)
	}
	t.Logf("%d of %d answers live in %s, all restored with their status and amount (%d sent after the base backup ended, %d PENDING)",
		inCell, len(answers), cell, afterBackup, pending)

	// The primary runs on, and the archive left no slot behind on it.
	var slots int
	su, err := pgx.Connect(ctx, prim.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer su.Close(ctx)
	if err := su.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&slots); err != nil || slots != 0 {
		t.Errorf("slot %s on %s's primary after the archive stopped: %d, %v", slot, cell, slots, err)
	}
}

// restoredState is the state a cell's row holds for an answer's status.
func restoredState(s cellpayv1.TransactionStatus) []string {
	switch s {
	case cellpayv1.TransactionStatus_APPROVED:
		return []string{"approved"}
	case cellpayv1.TransactionStatus_DECLINED:
		return []string{"declined"}
	case cellpayv1.TransactionStatus_FAILED:
		return []string{"failed"}
	}
	return nil
}
