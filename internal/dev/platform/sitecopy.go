package platform

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellpay/cellpay/internal/dev/pgcluster"
)

// A cross-site copy of a cell's database (docs/design/sites.md, "What
// each site holds": each cell's database has a replica in the other
// site, asynchronous) is a third server beside the cell's pair: a
// streaming standby of the cell's current primary, made from a base
// backup, whose every connection to the primary (the base backup's and
// the WAL stream's) crosses a SiteLink, so that it has the link's latency
// and is cut with it. It is asynchronous: synchronous_standby_names never
// names it, so a commit waits for the cell's own synchronous standby (if
// any) and never for the other site; what the primary committed in the
// last moments before a site is lost may not have crossed (the RPO
// window), which the promoted cell's issuer check recovers.
//
//	DataDir/pg/<cell>-site-copy    the port given to StartSiteCopy
//	logs/postgres-<cell>-site-copy.log
//
// It streams as the replication role through a slot of its own,
// <cell>_site_copy (also its application_name), on the primary it was
// started from: it does not follow a failover of the cell's pair.

// SiteCopy is a cross-site copy of a cell's database. Its methods are
// safe for concurrent use.
type SiteCopy struct {
	// Cell is the cell whose database it copies; Name, its
	// application_name and the slot it streams through.
	Cell, Name string
	// ProxyAddr is the link's proxy it reaches the primary through.
	ProxyAddr string

	primary *pgcluster.Cluster // the primary it was started from
	cluster *pgcluster.Cluster
	appURL  string
	ownURL  string
	log     *os.File

	mu       sync.Mutex
	promoted bool
	stopped  bool
}

// CopyLag is how far a site copy is behind its primary, as the primary
// sees it.
type CopyLag struct {
	// Streaming: the primary has a walsender streaming to the copy now.
	Streaming bool
	// Bytes of WAL the primary wrote that the copy has not replayed
	// (pg_current_wal_lsn() - replay_lsn); with no walsender (a cut
	// link), what its slot has not seen confirmed flushed
	// (pg_current_wal_lsn() - restart_lsn).
	Bytes int64
	// ReplayLag is pg_stat_replication's replay_lag: how long the last
	// WAL the copy replayed took from the primary's flush to its replay
	// (0 when the copy is idle and caught up, or not streaming).
	ReplayLag time.Duration
}

// StartSiteCopy starts an asynchronous copy of cellID's database in the
// other site: a streaming standby of the cell's current primary on
// 127.0.0.1:port (DataDir/pg/<cell>-site-copy, made afresh from a base
// backup: an earlier copy there is moved aside), its connections to the
// primary through a proxy of link (so link.Cut cuts its stream), and
// waits, bounded by ctx, until it streams. It needs the platform's own
// clusters (not Config.DatabaseURL). Stop stops it; so does the
// platform's Stop.
func (p *Platform) StartSiteCopy(ctx context.Context, cellID string, link *SiteLink, port int) (*SiteCopy, error) {
	pp := p.pairs[cellID]
	if pp == nil {
		return nil, fmt.Errorf("platform: site copy of %q: no private cluster of that cell", cellID)
	}
	if link == nil {
		return nil, errors.New("platform: site copy: a link is required")
	}
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("platform: site copy: port %d out of range", port)
	}
	prim, _ := pp.current()
	if prim == nil || !prim.Running() {
		return nil, fmt.Errorf("platform: site copy of %s: its primary is not running", cellID)
	}
	sc := &SiteCopy{Cell: cellID, Name: sanitize(cellID) + "_site_copy", primary: prim}
	if err := pgcluster.EnsureReplication(ctx, prim.URL("postgres"), pp.repl, sc.Name); err != nil {
		return nil, fmt.Errorf("platform: site copy of %s: %w", cellID, err)
	}
	proxy, err := link.Proxy(cellID+"-postgres", pp.primaryAddr())
	if err != nil {
		return nil, fmt.Errorf("platform: site copy of %s: %w", cellID, err)
	}
	sc.ProxyAddr = proxy
	_, proxyPort, err := net.SplitHostPort(proxy)
	if err != nil {
		return nil, fmt.Errorf("platform: site copy of %s: proxy %q: %w", cellID, proxy, err)
	}
	pport, err := strconv.Atoi(proxyPort)
	if err != nil {
		return nil, fmt.Errorf("platform: site copy of %s: proxy %q: %w", cellID, proxy, err)
	}

	name := "postgres-" + cellID + "-site-copy"
	if sc.log, err = os.OpenFile(filepath.Join(p.logDir, name+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err != nil {
		return nil, fmt.Errorf("platform: %s: %w", name, err)
	}
	dir := filepath.Join(p.cfg.DataDir, "pg", cellID+"-site-copy")
	if _, err := moveAside(dir); err != nil {
		sc.log.Close()
		return nil, fmt.Errorf("platform: %s: %w", name, err)
	}
	// The primary's settings (TLS, its certificate, fsync, the
	// replication role in pg_hba for when it is promoted), on its own
	// data dir, port and log.
	cfg := pp.cfg(0)
	cfg.DataDir, cfg.Port, cfg.Log = dir, port, sc.log
	cfg.Standby = &pgcluster.Standby{
		PrimaryPort: pport, User: pp.repl.User, Password: pp.repl.Password,
		CAFile: pp.ca, Slot: sc.Name, Name: sc.Name,
	}
	if sc.cluster, err = pgcluster.Start(ctx, cfg); err != nil {
		sc.log.Close()
		return nil, fmt.Errorf("platform: %s: %w", name, err)
	}
	state, err := prim.WaitStreaming(ctx, sc.Name)
	if err == nil && state != "async" {
		err = fmt.Errorf("it streams as %q, want async", state)
	}
	if err != nil {
		_ = sc.cluster.Stop()
		sc.log.Close()
		return nil, fmt.Errorf("platform: %s: %w", name, err)
	}

	roles, err := ensureRolePasswords(filepath.Join(p.cfg.DataDir, pgRolesDir, cellID))
	if err != nil {
		_ = sc.cluster.Stop()
		sc.log.Close()
		return nil, fmt.Errorf("platform: %s: %w", name, err)
	}
	hosts := []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	sc.appURL = pairURL(roles.App, roles.AppPassword, hosts, pp.ca)
	sc.ownURL = pairURL(roles.Owner, roles.OwnerPassword, hosts, pp.ca)
	p.copyMu.Lock()
	p.copies = append(p.copies, sc)
	p.copyMu.Unlock()
	p.logf("%s: cross-site copy %s streams from %s through the site link (%s, %v each way), asynchronous",
		cellID, hosts[0], pp.primaryAddr(), proxy, link.Latency())
	return sc, nil
}

// Cluster is the copy's server.
func (sc *SiteCopy) Cluster() *pgcluster.Cluster { return sc.cluster }

// DatabaseURL is the copy's database as the application role (AppRole),
// over TLS: the cell's CellDatabaseURL with the copy's address. It takes
// writes once the copy is promoted.
func (sc *SiteCopy) DatabaseURL() string { return sc.appURL }

// MigrateDatabaseURL is the copy's database as the schema owner
// (OwnerRole): the cell's CellMigrateDatabaseURL with the copy's address.
func (sc *SiteCopy) MigrateDatabaseURL() string { return sc.ownURL }

// Lag reads, on the primary the copy was started from, how far the copy
// is behind. It fails when that primary does not answer (a site lost).
func (sc *SiteCopy) Lag(ctx context.Context) (CopyLag, error) {
	conn, err := pgx.Connect(ctx, sc.primary.URL("postgres"))
	if err != nil {
		return CopyLag{}, fmt.Errorf("platform: site copy lag: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var lag CopyLag
	var secs float64
	err = conn.QueryRow(ctx, `SELECT COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), 0)::bigint,
			COALESCE(EXTRACT(epoch FROM replay_lag), 0)::float8
		FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'`, sc.Name).Scan(&lag.Bytes, &secs)
	switch {
	case err == nil:
		lag.Streaming = true
		lag.ReplayLag = time.Duration(secs * float64(time.Second))
		return lag, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return CopyLag{}, fmt.Errorf("platform: site copy lag: %w", err)
	}
	err = conn.QueryRow(ctx, `SELECT COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint
		FROM pg_replication_slots WHERE slot_name = $1`, sc.Name).Scan(&lag.Bytes)
	if err != nil {
		return CopyLag{}, fmt.Errorf("platform: site copy lag (slot %s): %w", sc.Name, err)
	}
	return lag, nil
}

// Replayed is what the copy has replayed, read on the copy before it is
// promoted: the WAL position (pg_last_wal_replay_lsn) and the commit time
// of the last transaction it replayed (pg_last_xact_replay_timestamp;
// zero if none since it started).
type Replayed struct {
	LSN        string
	LastCommit time.Time
}

// Replayed reads on the copy how far it has replayed.
func (sc *SiteCopy) Replayed(ctx context.Context) (Replayed, error) {
	conn, err := pgx.Connect(ctx, sc.cluster.URL("postgres"))
	if err != nil {
		return Replayed{}, fmt.Errorf("platform: site copy: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var r Replayed
	var at *time.Time
	if err := conn.QueryRow(ctx, "SELECT COALESCE(pg_last_wal_replay_lsn()::text, ''), pg_last_xact_replay_timestamp()").Scan(&r.LSN, &at); err != nil {
		return Replayed{}, fmt.Errorf("platform: site copy: %w", err)
	}
	if at != nil {
		r.LastCommit = *at
	}
	return r, nil
}

// BytesBehind is how many bytes of WAL lie between what the copy has
// replayed and lsn (a position read on the primary, e.g. its
// pg_current_wal_lsn() just before it was lost): what the copy lacks of
// it. Read on the copy before it is promoted.
func (sc *SiteCopy) BytesBehind(ctx context.Context, lsn string) (int64, error) {
	conn, err := pgx.Connect(ctx, sc.cluster.URL("postgres"))
	if err != nil {
		return 0, fmt.Errorf("platform: site copy: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int64
	if err := conn.QueryRow(ctx, "SELECT pg_wal_lsn_diff($1::pg_lsn, pg_last_wal_replay_lsn())::bigint", lsn).Scan(&n); err != nil {
		return 0, fmt.Errorf("platform: site copy: %w", err)
	}
	return n, nil
}

// Promote makes the copy a primary that takes writes (the copy of a lost
// site's cell, declared lost: docs/design/sites.md step 2), with no
// standby required. It stops streaming for good: what it had not
// replayed is not in it. Promoting twice does nothing.
func (sc *SiteCopy) Promote(ctx context.Context) error {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.promoted {
		return nil
	}
	if err := sc.cluster.Promote(ctx); err != nil {
		return fmt.Errorf("platform: site copy of %s: %w", sc.Cell, err)
	}
	sc.promoted = true
	return nil
}

// Stop stops the copy's server (a fast shutdown) and closes its log. Its
// slot stays on the primary, if that still runs, keeping at most
// max_slot_wal_keep_size of WAL. Stopping twice does nothing.
func (sc *SiteCopy) Stop() error {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.stopped {
		return nil
	}
	sc.stopped = true
	err := sc.cluster.Stop()
	sc.log.Close()
	return err
}

// MoveCellDatabase records that cellID's database moved (a copy in the
// other site promoted: SiteCopy.DatabaseURL and MigrateDatabaseURL):
// from now on CellDatabaseURL and CellMigrateDatabaseURL answer appURL
// and ownURL, and each of the cell's instances gets them
// (CELL_DATABASE_URL, CELL_MIGRATE_DATABASE_URL) at its next start; a
// running instance keeps the database it has, so the caller restarts the
// instances (or starts them after a kill). The cell's own pair is left
// as it is.
func (p *Platform) MoveCellDatabase(cellID, appURL, ownURL string) error {
	ins := p.Instances(cellID)
	if len(ins) == 0 {
		return fmt.Errorf("platform: move database: no cell %q", cellID)
	}
	if appURL == "" {
		return errors.New("platform: move database: no URL")
	}
	p.urlMu.Lock()
	p.dbURLs[cellID], p.migrateURLs[cellID] = appURL, ownURL
	p.urlMu.Unlock()
	for _, in := range ins {
		proc := p.procs[in.Name]
		proc.SetEnv("CELL_DATABASE_URL", appURL)
		proc.SetEnv("CELL_MIGRATE_DATABASE_URL", ownURL)
	}
	p.logf("%s: its database moved to %s; its instances use it from their next start", cellID, RedactURL(appURL))
	_ = p.writeRunInfo()
	return nil
}

// KillCellSite kills -9, at once, everything of cellID that lives in its
// site: each of its instances and its database's servers (the primary
// and, if it has one, its synchronous standby), as the loss of the site
// would; its cross-site copies live on. It waits until they are gone.
// With a standby killed too, the failover watchdog has nothing to
// promote; a platform with Config.NoStandby has no watchdog at all.
func (p *Platform) KillCellSite(cellID string) error {
	ins := p.Instances(cellID)
	if len(ins) == 0 {
		return fmt.Errorf("platform: kill: no cell %q", cellID)
	}
	var kills []func() error
	for _, in := range ins {
		kills = append(kills, p.procs[in.Name].Kill)
	}
	if pp := p.pairs[cellID]; pp != nil {
		prim, sb := pp.current()
		for _, c := range []*pgcluster.Cluster{prim, sb} {
			if c != nil {
				kills = append(kills, c.Kill)
			}
		}
	}
	errs := make([]error, len(kills))
	var wg sync.WaitGroup
	for i, kill := range kills {
		wg.Go(func() { errs[i] = kill() })
	}
	wg.Wait()
	return errors.Join(errs...)
}
