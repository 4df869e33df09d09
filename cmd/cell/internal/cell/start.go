package cell

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/cellpay/cellpay/cmd/cell/internal/callback"
	"github.com/cellpay/cellpay/cmd/cell/internal/directory"
	"github.com/cellpay/cellpay/cmd/cell/internal/instance"
	"github.com/cellpay/cellpay/cmd/cell/internal/issuercheck"
	"github.com/cellpay/cellpay/cmd/cell/internal/notifier"
	"github.com/cellpay/cellpay/cmd/cell/internal/reconcile"
	"github.com/cellpay/cellpay/cmd/cell/internal/refsync"
	"github.com/cellpay/cellpay/cmd/cell/internal/retention"
	"github.com/cellpay/cellpay/cmd/cell/internal/server"
	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/internal/grpclimits"
	"github.com/cellpay/cellpay/internal/healthport"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/jsconf"
	"github.com/cellpay/cellpay/internal/partnerstate"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/internal/telemetry"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// Start's steps, in the order Start takes them. Each adds to c.rel what
// it acquires as soon as it has it, so that a step that fails half-way
// leaves Start only the releasing of the stack to do. ctx is Start's: it
// bounds what the steps wait for; what runs on runs under c.run.

// startTelemetry sets up metrics (served on MetricsListen, the cell's ID
// a label of each) and traces.
func (c *Cell) startTelemetry(ctx context.Context) error {
	tel, err := telemetry.Setup(ctx, telemetry.Config{Service: "cell", Instance: c.cfg.Instance,
		Labels: map[string]string{"cell": c.cfg.ID}, MetricsListen: c.cfg.MetricsListen, Log: c.log})
	if err != nil {
		return err
	}
	c.tel = tel
	c.rel.AddCtx(tel.Close)
	c.metrics, err = telemetry.NewCell(tel.Meter(meterName))
	return err
}

// startStore connects to Postgres and takes the instance's lease first,
// so that siblings leave this instance's rows alone from its first write;
// then abandons its own leftovers and those of dead siblings: restart,
// not resume. With RecoverAtStart, recoverFirst abandons them after its
// check instead: on a copy behind its lost primary, a record held
// received may be one the issuer applied (its sending commit lost), which
// the check brings to the issuer's outcome; abandoned first, the check
// could not tell it from one this cell gave up.
func (c *Cell) startStore(ctx context.Context) error {
	st, err := openStore(ctx, c.cfg, c.log)
	if err != nil {
		return err
	}
	c.st = st
	c.rel.Add(st.Close)
	st.SetInstance(c.cfg.Instance)
	if err := st.RenewLease(ctx, instance.LeaseTTL, nil); err != nil {
		return err
	}
	if c.cfg.RecoverAtStart > 0 {
		return nil
	}
	return c.abandonLeftovers(ctx)
}

// abandonLeftovers abandons the records this instance, or a dead sibling,
// left short of their point of no return.
func (c *Cell) abandonLeftovers(ctx context.Context) error {
	if n, err := c.st.AbandonUnsent(ctx, time.Now()); err != nil {
		return err
	} else if n > 0 {
		c.log.Warn("abandoned transactions that had not reached their point of no return", "count", n)
	}
	return nil
}

// startRefdata loads the reference data the cell serves, keeps the lease
// (which outlives serving: it is dropped only once the attempts in flight
// have finished), samples the database for its gauges, and follows the
// reference data's versions.
func (c *Cell) startRefdata(ctx context.Context) error {
	ref, err := refsync.New(ctx, refsync.Config{CellID: c.cfg.ID, Store: c.st, NATSURL: c.cfg.NATSURL, NATSTLS: c.cfg.NATSTLS,
		StreamReplicas: c.cfg.NATSReplicas, Drift: &c.drift, BootstrapFile: c.cfg.RefDataFile, Log: c.log})
	if err != nil {
		return err
	}
	c.ref = ref
	leaseCtx, stopLease := context.WithCancel(context.WithoutCancel(ctx))
	leaseDone := make(chan struct{})
	go func() {
		instance.KeepLease(leaseCtx, c.st, instance.LeaseTTL, instance.RenewEvery, ref.Served, c.log)
		close(leaseDone)
	}()
	c.rel.Add(func() { stopLease(); <-leaseDone })
	if _, err := ref.RegisterMetrics(c.tel.Meter(meterName)); err != nil {
		return err
	}
	dbs := &dbStats{st: c.st, log: c.log}
	if err := telemetry.NewDatabase(c.tel.Meter(meterName), dbs.Sample); err != nil {
		return err
	}
	c.rel.Add(c.goRun(dbs.run))
	c.rel.Add(c.goRun(func(ctx context.Context) { ref.Run(ctx) }))
	return nil
}

// goRun runs f under a context of its own, ended with c.run; the func
// ends it and waits for f to return.
func (c *Cell) goRun(f func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(c.run)
	done := make(chan struct{})
	go func() { f(ctx); close(done) }()
	return func() { cancel(); <-done }
}

// startPeers reads the risk policy and builds the clients of the cell's
// peers: the issuer, the partner registry (read-only, for callback
// settings) and, unless the cell goes without, the transaction directory.
func (c *Cell) startPeers(ctx context.Context) error {
	cfg := c.cfg
	var err error
	// A read the start just made work may fail once on a loaded host (a
	// new connection's authentication timing out): tried again, bounded,
	// as openStore waits for Postgres, rather than failing the start.
	for try := 1; ; try++ {
		if c.policy, err = c.st.Policy(ctx); err == nil || try == 5 {
			break
		}
		c.log.Warn("reading the risk policy failed; trying again", "try", try, "error", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(try) * 500 * time.Millisecond):
		}
	}
	if err != nil {
		return err
	}
	if !cfg.TLS.Set() {
		c.log.Warn("no TLS files: plaintext to the issuer and from every caller, none authorized")
	}
	issuerCreds, stopIssuerCreds, err := hop.DialOption(cfg.TLS, hop.Only(hop.Issuer))
	if err != nil {
		return fmt.Errorf("cell: issuer TLS: %w", err)
	}
	c.rel.Add(stopIssuerCreds)
	conn, err := grpc.NewClient(cfg.IssuerAddr, slices.Concat(c.tel.DialOptions(), []grpc.DialOption{issuerCreds, hop.Reconnect}, grpclimits.Internal.DialOptions())...)
	if err != nil {
		return fmt.Errorf("cell: issuer client: %w", err)
	}
	c.rel.Add(func() { conn.Close() })
	c.issuer = c.metrics.Issuer(issuerproto.NewIssuerClient(conn))
	c.reg, err = partnerstate.Start(partnerstate.Config{NATSURL: cfg.NATSURL, NATSTLS: cfg.NATSTLS, StateFile: cfg.PartnersStateFile,
		ReplicaID: cfg.ID + "-" + cfg.Instance, ReadOnly: true, Log: c.log})
	if err != nil {
		return err
	}
	c.rel.Add(c.reg.Close)
	dir, closeDir, err := openDirectory(ctx, cfg, &c.drift, c.log)
	if err != nil {
		return err
	}
	c.dir = dir
	c.rel.Add(closeDir)
	sample := telemetry.NATSSample{Drift: c.drift.Each}
	if dir != nil {
		sample.Dropped, sample.Forged = dir.Dropped, dir.Forged
	}
	return telemetry.NewNATS(c.tel.Meter(meterName), sample)
}

// startServer builds the Cell API's server, binds its listener and, with
// HealthListen, the health port.
func (c *Cell) startServer(context.Context) error {
	scfg := server.Config{
		CellID:          c.cfg.ID,
		Store:           c.st,
		Issuer:          c.issuer,
		Metrics:         c.metrics,
		RefData:         func() cellside.RefData { return c.ref.View() },
		Policy:          c.policy,
		Keys:            c.cfg.Keys,
		Outbox:          c.st,
		Records:         c.st,
		RegistryVersion: func() uint64 { return c.reg.Index().Version() },
		Log:             c.log,
	}
	if c.dir != nil {
		scfg.Directory = c.dir
	}
	var err error
	if c.srv, err = server.New(scfg); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", c.cfg.Listen)
	if err != nil {
		return fmt.Errorf("cell: listen: %w", err)
	}
	c.lis = lis
	c.rel.Add(func() { lis.Close() }) // a listener never served; the drain has closed it by then
	hopOpts, stopHop, err := hop.ServerOptions(c.cfg.TLS, hop.CellPolicy)
	if err != nil {
		return fmt.Errorf("cell: TLS: %w", err)
	}
	c.rel.Add(stopHop)
	c.gs = grpc.NewServer(slices.Concat(grpclimits.Internal.ServerOptions(), c.tel.ServerOptions(), hopOpts)...)
	c.rel.Add(c.gs.Stop) // as the listener
	cellproto.RegisterCellServer(c.gs, c.srv)
	healthpb.RegisterHealthServer(c.gs, c.hs)
	reflection.Register(c.gs)
	if c.cfg.HealthListen == "" {
		return nil
	}
	hp, err := healthport.Listen(c.cfg.HealthListen, c.hs)
	if err != nil {
		return fmt.Errorf("cell: %w", err)
	}
	c.hp = hp
	c.rel.Add(hp.Stop) // after hs.Shutdown: probes see NOT_SERVING while draining
	c.log.Info("cell health port listening", "addr", hp.Addr().String())
	return nil
}

// startWatchers keeps health in step with the database and the
// directory, and starts the reconciler (on the one instance that leads)
// and the callback notifier. Health says SERVING once the reference data
// is served, the database answers and the directory is usable.
func (c *Cell) startWatchers(context.Context) error {
	c.ready(true)
	watchCtx, stopWatch := context.WithCancel(c.run)
	var watchers sync.WaitGroup
	c.rel.Add(func() { stopWatch(); watchers.Wait() })
	watchers.Go(func() { watchDatabase(watchCtx, c.st, c.ready, c.log) })
	if c.dir != nil {
		watchers.Go(func() { watchDirectory(watchCtx, c.dir, c.recheck) })
	}
	rec, err := c.reconciler()
	if err != nil {
		return err
	}
	keeper, err := retention.New(retention.Config{Store: c.st, Keep: c.cfg.Retention, Log: c.log})
	if err != nil {
		return err
	}
	if err := telemetry.NewRetention(c.tel.Meter(meterName), keeper.End); err != nil {
		return err
	}
	checker, err := c.issuerCheck()
	if err != nil {
		return err
	}
	watchers.Go(func() {
		instance.Lead(watchCtx, c.st, time.Second, func(ctx context.Context) { reconcileCell(ctx, rec, keeper, checker, c.st, c.log) }, c.log)
	})
	if !c.cfg.Callbacks.Off {
		stopNotifier, err := startNotifier(watchCtx, c.cfg, c.st, c.reg, c.tel, c.log)
		if err != nil {
			return err
		}
		c.rel.Add(stopNotifier)
	}
	watchers.Go(func() {
		if c.ref.WaitServing(watchCtx) == nil {
			c.ready(c.st.Ping(watchCtx) == nil)
		}
	})
	return nil
}

// ready records whether the database answers and sets health from it
// (recheck).
func (c *Cell) ready(dbUp bool) {
	c.healthMu.Lock()
	defer c.healthMu.Unlock()
	c.dbUp = dbUp
	c.setHealth()
}

// recheck sets health again, from the database's state as last seen.
func (c *Cell) recheck() {
	c.healthMu.Lock()
	defer c.healthMu.Unlock()
	c.setHealth()
}

// setHealth sets health: SERVING if the database answers, reference data
// is served (the cell is not ready until it serves reference data) and
// the directory is usable (a cell whose directory is still opening could
// only re-route what it cannot claim), else NOT_SERVING. The caller holds
// healthMu.
func (c *Cell) setHealth() {
	s := healthpb.HealthCheckResponse_NOT_SERVING
	if c.dbUp && c.ref.Serving() && (c.dir == nil || c.dir.Usable()) {
		s = healthpb.HealthCheckResponse_SERVING
	}
	c.hs.SetServingStatus("", s)
	c.hs.SetServingStatus(cellproto.Cell_ServiceDesc.ServiceName, s)
}

// watchDirectory sets health again when the directory opens, or, until
// it has, when its outage begins or ends.
func watchDirectory(ctx context.Context, d *directory.Directory, recheck func()) {
	t := time.NewTicker(directoryCheck)
	defer t.Stop()
	for usable := d.Usable(); ; {
		select {
		case <-ctx.Done():
			return
		case <-d.Opened():
			recheck()
			return
		case <-t.C:
		}
		if u := d.Usable(); u != usable {
			usable = u
			recheck()
		}
	}
}

// directoryCheck is how often watchDirectory looks for an outage of a
// directory that has not opened.
const directoryCheck = 250 * time.Millisecond

// reconciler is the cell's reconciler of unknown outcomes.
func (c *Cell) reconciler() (*reconcile.Reconciler, error) {
	rcfg := reconcile.Config{Store: resolutions{c.st, c.metrics}, Issuer: c.issuer, Log: c.log}
	if c.dir != nil {
		rcfg.Directory, rcfg.CellID, rcfg.ErrNotOwner = c.dir, c.cfg.ID, directory.ErrNotOwner
		rcfg.OnFiled = c.metrics.Filed
	}
	return reconcile.New(rcfg)
}

// recoverBound bounds how long a start with RecoverAtStart tries to
// record what the issuer applied before it gives up.
const recoverBound = 2 * time.Minute

// recoverFirst runs, with RecoverAtStart, the reconciler's round (the
// records the database holds sending get the issuer's outcome, or are
// closed at the issuer) and then one check of the issuer's record over
// that window, recording what the database lacks or holds behind, before
// the cell serves. The round comes first: a follow-up the database holds
// sending holds its amount on its original, and a later one the issuer
// applied that the database lacks could not be recorded over that hold
// (the sums' CHECK). Both are tried again, every 2 s, until they pass or
// recoverBound has passed (a sibling's leftover is the reconciler's only
// once its lease has run out).
func (c *Cell) recoverFirst(ctx context.Context) error {
	d := c.cfg.RecoverAtStart
	if d <= 0 {
		return nil
	}
	rec, err := c.reconciler()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, recoverBound)
	defer cancel()
	var rep issuercheck.Report
	for {
		if n, err := rec.Once(ctx); err != nil {
			c.log.Warn("recovering before serving: a reconciler round failed", "error", err)
		} else if n > 0 {
			c.log.Info("recovering before serving: resolved pending transactions", "count", n)
		}
		now := time.Now()
		if rep, err = issuercheck.Check(ctx, c.issuer, c.st.GetMany, c.st, c.owner(), c.cfg.ID, now.Add(-d), now); err == nil {
			break
		}
		c.log.Warn("recovering before serving: the check failed; trying again in 2s", "error", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("cell: recovering from the issuer's record before serving: %w", err)
		case <-time.After(2 * time.Second):
		}
	}
	c.log.Warn("recovered from the issuer's record before serving", "window", d, "checked", rep.Checked,
		"recovered", rep.Recovered, "missing_left", rep.Unrecovered(), "differs", rep.Counts[issuercheck.Differs],
		"unresolved", rep.Counts[issuercheck.Unresolved], "truncated", rep.Truncated)
	if rep.Truncated {
		return fmt.Errorf("cell: recovering from the issuer's record before serving: the window of %v holds more than one check reads; start with a shorter -recover-at-start", d)
	}
	return c.abandonLeftovers(ctx)
}

// owner reads the transaction directory's owner of a transaction for the
// issuer check; nil without a directory.
func (c *Cell) owner() issuercheck.Owner {
	if c.dir == nil {
		return nil
	}
	return func(ctx context.Context, k idempotency.Key) (string, error) {
		e, found, err := c.dir.Get(ctx, k)
		if err != nil || !found {
			return "", err
		}
		return e.Owner, nil
	}
}

// issuerCheck is the watcher of the issuer's record of this cell's
// effects, its gauges registered; nil when IssuerCheckEvery is zero.
func (c *Cell) issuerCheck() (*issuercheck.Watcher, error) {
	if c.cfg.IssuerCheckEvery <= 0 {
		return nil, nil
	}
	var recorder issuercheck.Recorder
	if !c.cfg.IssuerCheckReportOnly {
		recorder = c.st
	}
	w, err := issuercheck.NewWatcher(issuercheck.WatchConfig{Issuer: c.issuer, Terminal: c.cfg.ID, Every: c.cfg.IssuerCheckEvery,
		Lookback: c.cfg.IssuerCheckLookback, Log: c.log, Recorder: recorder, Owner: c.owner(),
		Records: c.st.GetMany})
	if err != nil {
		return nil, err
	}
	return w, telemetry.NewIssuerCheck(c.tel.Meter(meterName), func() (map[string]int, time.Time, bool) {
		rep, at, ok := w.Last()
		return map[string]int{"missing": rep.Unrecovered(), "recovered": rep.Recovered, "differs": rep.Counts[issuercheck.Differs],
			"unresolved": rep.Counts[issuercheck.Unresolved]}, at, ok
	})
}

// reconcileCell is the work of the cell's one reconciler: transactions
// past their point of no return with no known outcome, the leftovers
// short of it of instances that are gone (orphanGrace after their last
// write; any row stuck past store.ActiveFor), the tables' partitions,
// created ahead and dropped past retention, and the check of the
// issuer's record of the cell's effects (checker, when not nil).
func reconcileCell(ctx context.Context, rec *reconcile.Reconciler, keeper *retention.Keeper, checker *issuercheck.Watcher, st *store.Store, log *slog.Logger) {
	var ran sync.WaitGroup
	ran.Go(func() { rec.Run(ctx) })
	ran.Go(func() { keeper.Run(ctx) })
	if checker != nil {
		ran.Go(func() { checker.Run(ctx) })
	}
	defer ran.Wait()
	t := time.NewTicker(instance.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		n, err := st.AbandonOrphans(ctx, now, now.Add(-orphanGrace), now.Add(-store.ActiveFor))
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("abandoning other instances' leftovers failed", "error", err)
		case n > 0:
			log.Warn("abandoned transactions of instances that are gone, short of their point of no return", "count", n)
		}
	}
}

// orphanGrace is how long a row short of its point of no return is left
// to an owner that is gone (or to no owner: a binary from before
// instances) before it is abandoned.
const orphanGrace = 5 * time.Second

// directoryWait bounds how long a start waits for the transaction
// directory to open before it goes on without it.
const directoryWait = 2 * time.Second

// openDirectory opens the transaction directory, unless the cell has no
// NATS or is told not to, waiting up to directoryWait for its bucket; the
// func closes it.
func openDirectory(ctx context.Context, cfg Config, drift *jsconf.Drift, log *slog.Logger) (*directory.Directory, func(), error) {
	if cfg.NATSURL == "" || cfg.NoDirectory {
		log.Warn("no transaction directory: this cell decides from its own records alone")
		return nil, func() {}, nil
	}
	d, err := directory.Open(directory.Config{NATSURL: cfg.NATSURL, NATSTLS: cfg.NATSTLS, CellID: cfg.ID, Log: log, Drift: drift,
		Limits: jsconf.Limits{Replicas: cfg.NATSReplicas, MaxAge: cfg.DirectoryMaxAge, MaxBytes: cfg.DirectoryMaxBytes}})
	if err != nil {
		return nil, nil, err
	}
	if !d.WaitOpen(ctx, directoryWait) {
		log.Warn("transaction directory not open yet; the cell is not ready until it opens or has been unavailable for a second (then natural homes decide alone)", "waited", directoryWait)
	}
	return d, d.Close, nil
}

// startNotifier runs the callback notifier until ctx ends or the returned
// func, which stops it and waits for it, is called.
func startNotifier(ctx context.Context, cfg Config, st *store.Store, reg *partnerstate.Store, tel *telemetry.Telemetry, log *slog.Logger) (func(), error) {
	ncfg := notifier.Config{Store: st, Registry: reg, CellID: cfg.ID, Schedule: cfg.Callbacks.Schedule,
		Timeout: cfg.Callbacks.Timeout, Log: log}
	if cfg.Callbacks.CAFile != "" {
		roots, err := tlsconf.CertPool(cfg.Callbacks.CAFile)
		if err != nil {
			return nil, fmt.Errorf("cell: callback CA: %w", err)
		}
		ncfg.RootCAs = roots
	}
	n, err := notifier.New(ncfg)
	if err != nil {
		return nil, err
	}
	m, err := telemetry.NewCallbacks(tel.Meter(meterName), n.Backlog)
	if err != nil {
		return nil, err
	}
	n.SetMetrics(m)
	// This instance's final outcomes are delivered as soon as they are
	// committed; the notifier polls only for the rest.
	st.OnOutbox(n.Wake)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	sched := cfg.Callbacks.Schedule
	if len(sched) == 0 {
		sched = callback.DefaultSchedule
	}
	log.Info("callback notifier started", "schedule", sched.String(), "timeout", ncfg.Timeout, "system_roots", cfg.Callbacks.CAFile == "")
	return func() { cancel(); <-done }, nil
}

// meterName is the instrumentation scope of a cell's own metrics.
const meterName = "github.com/cellpay/cellpay/cmd/cell"

// resolutions counts the outcomes the reconciler records.
type resolutions struct {
	reconcile.Store
	metrics *telemetry.Cell
}

func (r resolutions) Persist(ctx context.Context, rec *cellside.Record, from cellside.State) error {
	err := r.Store.Persist(ctx, rec, from)
	if err == nil {
		r.metrics.Reconciled(string(rec.State))
	}
	return err
}

// openStore connects, retrying while Postgres is starting up.
func openStore(ctx context.Context, cfg Config, log *slog.Logger) (*store.Store, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	for delay := 100 * time.Millisecond; ; delay = min(delay*2, 2*time.Second) {
		st, err := connectStore(ctx, cfg)
		if err == nil {
			return st, nil
		}
		log.Info("waiting for postgres", "error", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cell: postgres not reachable: %w", err)
		case <-time.After(delay):
		}
	}
}

// connectStore migrates and connects, as one role or as the owner then
// the application role.
func connectStore(ctx context.Context, cfg Config) (*store.Store, error) {
	var st *store.Store
	var err error
	if cfg.MigrateDatabaseURL == "" {
		st, err = store.Open(ctx, cfg.DatabaseURL, cfg.MaxConns)
	} else if err = store.Migrate(ctx, cfg.MigrateDatabaseURL); err == nil {
		st, err = store.Connect(ctx, cfg.DatabaseURL, cfg.MaxConns)
	}
	if err != nil {
		return nil, err
	}
	if cfg.GroupCommit {
		st.EnableGroupCommit(store.GroupCommit{})
	}
	return st, nil
}

// downAfter is how many failed database checks in a row (every 500 ms)
// take a cell out: one slow answer under load is a busy database, not a
// dead one; a second of silence is. A failed check while writes still
// commit (Store.Committed within the last checkEvery) is not counted.
const downAfter = 3

// checkEvery is the period of the database checks.
const checkEvery = 500 * time.Millisecond

// database is what watchDatabase reads of the store.
type database interface {
	// Ping checks the database on a connection of its own.
	Ping(ctx context.Context) error
	// Committed is when a write last committed (zero: never).
	Committed() time.Time
}

// watchDatabase keeps health in step with the database: a cell that cannot
// record a transaction must not be sent one.
func watchDatabase(ctx context.Context, st database, ready func(bool), log *slog.Logger) {
	t := time.NewTicker(checkEvery)
	defer t.Stop()
	up, fails := true, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, 450*time.Millisecond)
		err := st.Ping(pctx)
		cancel()
		switch {
		case err == nil:
			fails = 0
		case time.Since(st.Committed()) < checkEvery:
			// The check failed, but a transaction's write committed since
			// the last one: the database is busy, not down. Not counted;
			// when the writes stop too, the checks count again (a dead
			// database is found at most one check later).
		default:
			fails++
		}
		if ok := fails < downAfter; ok != up {
			up = ok
			ready(ok)
			log.Warn("database health changed", "serving", ok, "error", err)
		}
	}
}
