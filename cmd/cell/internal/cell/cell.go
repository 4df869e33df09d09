// Package cell assembles one cell: its store, reference data, issuer client
// and gRPC server, with health that says SERVING only while the cell's
// Postgres answers and its reference data is loaded.
package cell

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/cellpay/cellpay/cmd/cell/internal/callback"
	"github.com/cellpay/cellpay/cmd/cell/internal/directory"
	"github.com/cellpay/cellpay/cmd/cell/internal/instance"
	"github.com/cellpay/cellpay/cmd/cell/internal/notifier"
	"github.com/cellpay/cellpay/cmd/cell/internal/reconcile"
	"github.com/cellpay/cellpay/cmd/cell/internal/refsync"
	"github.com/cellpay/cellpay/cmd/cell/internal/server"
	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/internal/cardkeys"
	"github.com/cellpay/cellpay/internal/grpclimits"
	"github.com/cellpay/cellpay/internal/healthport"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/orchestrator"
	"github.com/cellpay/cellpay/internal/partnerstate"
	"github.com/cellpay/cellpay/internal/pki"
	"github.com/cellpay/cellpay/internal/telemetry"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// Config is everything a cell needs to run.
type Config struct {
	ID string
	// Instance names this process among the cell's instances, which share
	// its Postgres and NATS (docs/design/cell-instances.md); unique among
	// them, and kept across a restart where it can be (a pod's name).
	// Default instance.DefaultID(): unique per process.
	Instance    string
	Listen      string // host:port for the Cell service and gRPC health
	DatabaseURL string
	// MigrateDatabaseURL, if set, is the schema owner's URL the migrations
	// run over, and DatabaseURL's role (which may only read and write
	// rows) serves; "" runs the migrations over DatabaseURL.
	MigrateDatabaseURL string
	IssuerAddr         string
	// RefDataFile optionally bootstraps a cell with no stored reference
	// data; NATSURL ("" for none) is the source of truth.
	RefDataFile string
	NATSURL     string
	// NATSTLS is the cell's NATS identity (hop.Cell(ID)); zero for
	// plaintext NATS without authentication.
	NATSTLS pki.Files
	// MetricsListen, if set, serves Prometheus metrics at /metrics (the
	// cell's ID a label of each). Traces are exported only when
	// OTEL_EXPORTER_OTLP_ENDPOINT is set.
	MetricsListen string
	// HealthListen, if set, serves the same gRPC health alone, in
	// plaintext (package healthport): the port for kubelet's probes,
	// which cannot present a client certificate to Listen's mutual TLS.
	HealthListen string
	// Keys computes PAN hashes and payload fingerprints (internal/cardkeys).
	Keys *cardkeys.Ring
	// MaxConns caps the Postgres pool; 0 means pgx's default.
	MaxConns int32
	// GroupCommit makes the durable writes of concurrent transactions
	// (inserts, reclaims, persists of a state) share commits (package
	// store's group commit). The cell binary turns it on unless told not
	// to.
	GroupCommit bool
	// StartTimeout bounds waiting for Postgres at start; default 60s.
	StartTimeout time.Duration
	// ShutdownTimeout bounds finishing in-flight work; default 15s.
	ShutdownTimeout time.Duration
	// PartnersStateFile keeps the last-known partner registry (followed
	// read-only from NATSURL, for callback settings); "" keeps none. It
	// holds signing secrets, so it is written 0600.
	PartnersStateFile string
	// Callbacks configures the notifier.
	Callbacks Callbacks
	// NoDirectory: do not claim transactions in the transaction directory
	// (which lives on NATSURL; with no NATSURL there is none either). The
	// cell then decides from its own records alone.
	NoDirectory bool
	// TLS is the cell's identity (hop.Cell(ID)) on its hops: its server
	// requires the GTR's client certificate for the Cell API (package
	// hop's CellPolicy), and it presents it to the issuer. With no files
	// both hops are plaintext and every caller is served: a lone cell in
	// a benchmark only.
	TLS pki.Files
	Log *slog.Logger
}

// Callbacks configures a cell's notifier (package notifier).
type Callbacks struct {
	// Off stops delivering (the outbox is still written with every final
	// outcome, and delivered once the notifier runs again).
	Off bool
	// Schedule is the delay before each attempt; empty for
	// callback.DefaultSchedule.
	Schedule callback.Schedule
	// Timeout bounds one endpoint call; default 10s.
	Timeout time.Duration
	// CAFile is the CA that endpoints' certificates are verified with; ""
	// for the system roots (production).
	CAFile string
}

func (c *Config) validate() error {
	var errs []error
	if c.ID == "" {
		errs = append(errs, errors.New("cell: id is required"))
	}
	if c.Listen == "" || c.DatabaseURL == "" || c.IssuerAddr == "" {
		errs = append(errs, errors.New("cell: listen, database URL and issuer address are required"))
	}
	if c.Keys == nil {
		errs = append(errs, errors.New("cell: the card data keys are required"))
	}
	if c.Instance == "" {
		c.Instance = instance.DefaultID()
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 60 * time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 15 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return errors.Join(errs...)
}

// Run runs the cell until ctx ends, then drains: health goes NOT_SERVING,
// in-flight attempts finish (bounded by ShutdownTimeout), and it returns.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	log := cfg.Log.With("cell", cfg.ID, "instance", cfg.Instance)
	tel, err := telemetry.Setup(ctx, telemetry.Config{Service: "cell", Instance: cfg.Instance,
		Labels: map[string]string{"cell": cfg.ID}, MetricsListen: cfg.MetricsListen, Log: log})
	if err != nil {
		return err
	}
	defer tel.Close(ctx)
	metrics, err := telemetry.NewCell(tel.Meter(meterName))
	if err != nil {
		return err
	}
	st, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.Close()
	st.SetInstance(cfg.Instance)
	// The lease first, so that siblings leave this instance's rows alone
	// from its first write; then its own leftovers and those of dead
	// siblings, restart not resume.
	if err := st.RenewLease(ctx, instance.LeaseTTL, nil); err != nil {
		return err
	}
	if n, err := st.AbandonUnsent(ctx, time.Now()); err != nil {
		return err
	} else if n > 0 {
		log.Warn("abandoned transactions that had not reached their point of no return", "count", n)
	}
	ref, err := refsync.New(ctx, refsync.Config{CellID: cfg.ID, Store: st, NATSURL: cfg.NATSURL, NATSTLS: cfg.NATSTLS,
		BootstrapFile: cfg.RefDataFile, Log: log})
	if err != nil {
		return err
	}
	// The lease outlives serving: it is dropped (by the deferred stop)
	// only once the in-flight attempts have finished.
	leaseCtx, stopLease := context.WithCancel(context.WithoutCancel(ctx))
	leaseDone := make(chan struct{})
	go func() {
		instance.KeepLease(leaseCtx, st, instance.LeaseTTL, instance.RenewEvery, ref.Served, log)
		close(leaseDone)
	}()
	defer func() { stopLease(); <-leaseDone }()
	if _, err := ref.RegisterMetrics(tel.Meter(meterName)); err != nil {
		return err
	}
	dbs := &dbStats{st: st, log: log}
	if err := telemetry.NewDatabase(tel.Meter(meterName), dbs.Sample); err != nil {
		return err
	}
	dbsCtx, stopDBS := context.WithCancel(ctx)
	dbsDone := make(chan struct{})
	go func() { dbs.run(dbsCtx); close(dbsDone) }()
	defer func() { stopDBS(); <-dbsDone }()
	refCtx, stopRef := context.WithCancel(ctx)
	refDone := make(chan error, 1)
	go func() { refDone <- ref.Run(refCtx) }()
	defer func() { stopRef(); <-refDone }()
	policy, err := st.Policy(ctx)
	if err != nil {
		return err
	}
	if !cfg.TLS.Set() {
		log.Warn("no TLS files: plaintext to the issuer and from every caller, none authorized")
	}
	issuerCreds, stopIssuerCreds, err := hop.DialOption(cfg.TLS)
	if err != nil {
		return fmt.Errorf("cell: issuer TLS: %w", err)
	}
	defer stopIssuerCreds()
	conn, err := grpc.NewClient(cfg.IssuerAddr, slices.Concat(tel.DialOptions(), []grpc.DialOption{issuerCreds, hop.Reconnect}, grpclimits.Internal.DialOptions())...)
	if err != nil {
		return fmt.Errorf("cell: issuer client: %w", err)
	}
	defer conn.Close()
	issuer := metrics.Issuer(issuerproto.NewIssuerClient(conn))
	reg, err := partnerstate.Start(partnerstate.Config{NATSURL: cfg.NATSURL, NATSTLS: cfg.NATSTLS, StateFile: cfg.PartnersStateFile,
		ReplicaID: cfg.ID + "-" + cfg.Instance, ReadOnly: true, Log: log})
	if err != nil {
		return err
	}
	defer reg.Close()
	dir, closeDir, err := openDirectory(cfg, log)
	if err != nil {
		return err
	}
	defer closeDir()
	scfg := server.Config{
		CellID:          cfg.ID,
		Store:           st,
		Issuer:          issuer,
		Metrics:         metrics,
		RefData:         func() orchestrator.RefData { return ref.View() },
		Policy:          policy,
		Keys:            cfg.Keys,
		Outbox:          st,
		RegistryVersion: func() uint64 { return reg.Index().Version() },
		Log:             log,
	}
	rcfg := reconcile.Config{Store: resolutions{st, metrics}, Issuer: issuer, Log: log}
	if dir != nil {
		scfg.Directory = dir
		rcfg.Directory, rcfg.CellID, rcfg.ErrNotOwner = dir, cfg.ID, directory.ErrNotOwner
	}
	srv, err := server.New(scfg)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("cell: listen: %w", err)
	}
	hopOpts, stopHop, err := hop.ServerOptions(cfg.TLS, hop.CellPolicy)
	if err != nil {
		lis.Close()
		return fmt.Errorf("cell: TLS: %w", err)
	}
	defer stopHop()
	gs := grpc.NewServer(slices.Concat(grpclimits.Internal.ServerOptions(), tel.ServerOptions(), hopOpts)...)
	cellproto.RegisterCellServer(gs, srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	if cfg.HealthListen != "" {
		hp, err := healthport.Listen(cfg.HealthListen, hs)
		if err != nil {
			lis.Close()
			return fmt.Errorf("cell: %w", err)
		}
		defer hp.Stop() // after hs.Shutdown: probes see NOT_SERVING while draining
		log.Info("cell health port listening", "addr", hp.Addr().String())
	}

	ready := func(ok bool) {
		s := healthpb.HealthCheckResponse_NOT_SERVING
		if ok && ref.Serving() { // not ready until it serves reference data
			s = healthpb.HealthCheckResponse_SERVING
		}
		hs.SetServingStatus("", s)
		hs.SetServingStatus(cellproto.Cell_ServiceDesc.ServiceName, s)
	}
	ready(true)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go watchDatabase(watchCtx, st, ready, log)
	rec, err := reconcile.New(rcfg)
	if err != nil {
		return err
	}
	reconciled := make(chan struct{})
	go func() {
		instance.Lead(watchCtx, st, time.Second, func(ctx context.Context) { reconcileCell(ctx, rec, st, log) }, log)
		close(reconciled)
	}()
	defer func() { stopWatch(); <-reconciled }()
	if !cfg.Callbacks.Off {
		stopNotifier, err := startNotifier(watchCtx, cfg, st, reg, tel, log)
		if err != nil {
			return err
		}
		defer stopNotifier()
	}
	go func() {
		if ref.WaitServing(watchCtx) == nil {
			ready(st.Ping(watchCtx) == nil)
		}
	}()

	serveErr := make(chan error, 1)
	go func() { serveErr <- gs.Serve(lis) }()
	log.Info("cell listening", "addr", lis.Addr().String(), "refdata_version", ref.View().Version())
	select {
	case err := <-serveErr:
		return fmt.Errorf("cell: serve: %w", err)
	case <-ctx.Done():
	}
	stopWatch()
	hs.Shutdown() // NOT_SERVING to every watcher before we stop taking work
	drain(gs, srv.InFlight, cfg.ShutdownTimeout, log)
	return nil
}

// drain stops gs gracefully: the attempts in flight finish, within
// timeout, and then the server stops hard. While it waits it logs how
// many attempts are still in flight (inFlight), every drainReportEvery,
// so that a slow stop says whether attempts are what it waits for.
func drain(gs *grpc.Server, inFlight func() int64, timeout time.Duration, log *slog.Logger) {
	start := time.Now()
	log.Info("cell draining", "in_flight", inFlight())
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	hard := time.NewTimer(timeout)
	defer hard.Stop()
	report := time.NewTicker(drainReportEvery)
	defer report.Stop()
	for {
		select {
		case <-stopped:
			log.Info("cell stopped", "drain", time.Since(start).Round(time.Millisecond).String())
			return
		case <-report.C:
			log.Warn("cell still draining", "in_flight", inFlight(), "waited", time.Since(start).Round(time.Millisecond).String())
		case <-hard.C:
			log.Warn("in-flight work did not finish in time; stopping hard", "in_flight", inFlight())
			gs.Stop()
			<-stopped
			log.Info("cell stopped", "drain", time.Since(start).Round(time.Millisecond).String())
			return
		}
	}
}

// drainReportEvery is how often a graceful stop that is still waiting
// says so.
const drainReportEvery = 2 * time.Second

// reconcileCell is the work of the cell's one reconciler: transactions
// past their point of no return with no known outcome, and the leftovers
// short of it of instances that are gone (orphanGrace after their last
// write; any row stuck past store.ActiveFor).
func reconcileCell(ctx context.Context, rec *reconcile.Reconciler, st *store.Store, log *slog.Logger) {
	ran := make(chan struct{})
	go func() { rec.Run(ctx); close(ran) }()
	defer func() { <-ran }()
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

// openDirectory opens the transaction directory, unless the cell has no
// NATS or is told not to; the func closes it.
func openDirectory(cfg Config, log *slog.Logger) (*directory.Directory, func(), error) {
	if cfg.NATSURL == "" || cfg.NoDirectory {
		log.Warn("no transaction directory: this cell decides from its own records alone")
		return nil, func() {}, nil
	}
	d, err := directory.Open(directory.Config{NATSURL: cfg.NATSURL, NATSTLS: cfg.NATSTLS, CellID: cfg.ID, Log: log})
	if err != nil {
		return nil, nil, err
	}
	return d, d.Close, nil
}

// startNotifier runs the callback notifier until ctx ends or the returned
// func, which stops it and waits for it, is called.
func startNotifier(ctx context.Context, cfg Config, st *store.Store, reg *partnerstate.Store, tel *telemetry.Telemetry, log *slog.Logger) (func(), error) {
	ncfg := notifier.Config{Store: st, Registry: reg, CellID: cfg.ID, Schedule: cfg.Callbacks.Schedule,
		Timeout: cfg.Callbacks.Timeout, Log: log}
	if cfg.Callbacks.CAFile != "" {
		roots, err := pki.CertPool(cfg.Callbacks.CAFile)
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

func (r resolutions) Persist(ctx context.Context, rec *orchestrator.Record, from orchestrator.State) error {
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
