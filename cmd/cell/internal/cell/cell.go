// Package cell assembles one cell: its store, reference data, issuer client
// and gRPC server, with health that says SERVING only while the cell's
// Postgres answers and its reference data is loaded.
//
// A Cell has a life cycle (New, Start, Shutdown), which main and tests go
// through alike; it reads no flag and no environment variable: everything
// comes in its Config.
package cell

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/cellpay/cellpay/cmd/cell/internal/callback"
	"github.com/cellpay/cellpay/cmd/cell/internal/directory"
	"github.com/cellpay/cellpay/cmd/cell/internal/instance"
	"github.com/cellpay/cellpay/cmd/cell/internal/refsync"
	"github.com/cellpay/cellpay/cmd/cell/internal/server"
	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/internal/cardkeys"
	"github.com/cellpay/cellpay/internal/healthport"
	"github.com/cellpay/cellpay/internal/jsconf"
	"github.com/cellpay/cellpay/internal/lifecycle"
	"github.com/cellpay/cellpay/internal/partnerstate"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/internal/telemetry"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// Config is everything a cell needs to run: New validates it and fills in
// the defaults the fields name.
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
	NATSTLS tlsconf.Files
	// NATSReplicas is the replica count of what this cell creates in NATS
	// where nobody has yet (the directory's bucket, the reference data
	// stream): 3 on a three-server cluster; zero is 1. What exists is
	// kept as it is, and a difference reported (package jsconf).
	NATSReplicas int
	// DirectoryMaxAge and DirectoryMaxBytes are the directory bucket's
	// age and size limits when this cell creates it; zero for
	// directory.DefaultMaxAge and no size limit.
	DirectoryMaxAge   time.Duration
	DirectoryMaxBytes int64
	// Retention is how long a partition of transactions and callbacks is kept
	// after it ends (package retention); zero for retention.DefaultKeep.
	// It must exceed DirectoryMaxAge (the idempotency window) by a day.
	Retention time.Duration
	// IssuerCheckEvery is how often the leading instance compares the
	// issuer's record of the effects it applied for this cell with the
	// cell's records (package issuercheck); zero for no check.
	// IssuerCheckLookback is the window each check reads, up to its start;
	// zero for twice IssuerCheckEvery.
	IssuerCheckEvery, IssuerCheckLookback time.Duration
	// IssuerCheckReportOnly: the check does not record what the cell lost
	// from the issuer's record (issuercheck.Recorder), it only reports.
	IssuerCheckReportOnly bool
	// RecoverAtStart, if set, has the cell record, before it serves, what
	// the issuer applied for it over that long before the start that its
	// database lacks or holds short of (issuercheck.Check with the
	// store): for a cell started on a promoted copy of its database (a
	// site lost) or a restore behind its last commits, so that no retry
	// finds the transaction unknown and starts it again. A check that
	// fails stops the start.
	RecoverAtStart time.Duration
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
	TLS tlsconf.Files
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

// Cell is one instance of a cell. Its life is New, Start and Shutdown,
// each called once, in that order, from one goroutine (nats-server's
// Server): New builds, Start connects, listens and serves in the
// background, Shutdown drains and releases. Addr and HealthAddr are safe
// once Start has returned nil; Done and Err at any time, from any
// goroutine.
type Cell struct {
	cfg Config
	log *slog.Logger
	// hs is the one health server, the Cell API listener's and the health
	// port's: NOT_SERVING on both at once, first thing at shutdown.
	hs *health.Server

	// Set by Start's steps (start.go), in this order, and only read once
	// Start has returned.
	tel     *telemetry.Telemetry
	metrics *telemetry.Cell
	st      *store.Store
	ref     *refsync.Syncer
	policy  cellside.Policy
	issuer  issuerproto.IssuerClient
	reg     *partnerstate.Store
	dir     *directory.Directory // nil without a transaction directory

	// healthMu orders the health changes; dbUp is the database's state as
	// watchDatabase last saw it (ready).
	healthMu sync.Mutex
	dbUp     bool
	// drift records whether the streams and buckets found in NATS differ
	// from this cell's configuration (cellpay_nats_config_differs).
	drift jsconf.Drift
	srv   *server.Server
	gs    *grpc.Server
	lis   net.Listener
	hp    *healthport.Server
	// run is what ran off Run's context when there was one: refsync, the
	// database sampling and watch, the reconciler and the notifier run
	// under it, and Shutdown ends it first, as the end of that context
	// did. The lease does not: it outlives serving.
	run     context.Context
	stopRun context.CancelFunc
	// rel is what Start acquired, released in the reverse order by
	// Shutdown or by a Start that fails.
	rel lifecycle.Releases

	serving  sync.WaitGroup // the server's Serve goroutine
	stopping atomic.Bool    // Shutdown has begun: Serve returning is no failure

	life lifecycle.Life
}

// ErrStarted is Start's answer when it was called before, or after
// Shutdown: a Cell is started at most once.
var ErrStarted = errors.New("cell: Start called twice, or after Shutdown")

// New validates cfg (filling in its defaults, the instance's name among
// them) and builds the health server. It connects to nothing, reads no
// file, listens nowhere and starts no goroutine; a Cell that is never
// started needs no Shutdown.
func New(cfg Config) (*Cell, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Cell{cfg: cfg, log: cfg.Log.With("cell", cfg.ID, "instance", cfg.Instance), hs: health.NewServer()}, nil
}

// Start connects to Postgres (waiting up to StartTimeout for it), takes
// the instance's lease, loads the reference data, connects to the issuer
// and NATS, binds the listeners and starts serving in the background,
// then returns: once it returns nil the Cell API's listener (Addr) and
// the health port accept, and Done tells when serving fails. Health says
// SERVING only once the reference data is loaded. On error it has
// released whatever it had started, nothing keeps running, and Done is
// closed with Err the same error. ctx bounds starting only: its end after
// Start has returned does not stop the cell; Shutdown does.
func (c *Cell) Start(ctx context.Context) error {
	if !c.life.Begin() {
		return ErrStarted
	}
	c.run, c.stopRun = context.WithCancel(context.WithoutCancel(ctx))
	for _, step := range []func(context.Context) error{
		c.startTelemetry, // metrics, traces
		c.startStore,     // Postgres, the lease, this instance's leftovers
		c.startRefdata,   // reference data, the lease's keeper, database gauges
		c.startPeers,     // the issuer, the partner registry, the transaction directory
		c.recoverFirst,   // with RecoverAtStart: what the issuer applied that the database lost
		c.startServer,    // the Cell API's server and listener, the health port
		c.startWatchers,  // database health, the reconciler, the notifier
	} {
		if err := step(ctx); err != nil {
			c.rel.Release(context.WithoutCancel(ctx))
			c.stopRun()
			c.life.Failed(err)
			return err
		}
	}
	c.life.Serving()
	c.serving.Go(func() {
		if err := c.gs.Serve(c.lis); err != nil && !c.stopping.Load() {
			c.life.End(fmt.Errorf("cell: serve: %w", err))
		}
	})
	c.log.Info("cell listening", "addr", c.lis.Addr().String(), "refdata_version", c.ref.View().Version())
	return nil
}

// Shutdown drains the cell: what ran in the background stops (reference
// data updates, the database watch, the reconciler, the notifier), health
// goes NOT_SERVING, the attempts in flight finish, within ShutdownTimeout
// and ctx, after which the server stops hard; then everything Start
// acquired is released in the reverse order (the lease only once the
// attempts in flight are over). It returns ctx's error (wrapped) if ctx
// ended before the attempts in flight finished, and nil otherwise,
// ShutdownTimeout's cut included. Call it once Start has returned (or
// instead of Start); later calls wait for the first and return what it
// did. Before Start, or after a Start that failed, there is nothing to
// stop.
func (c *Cell) Shutdown(ctx context.Context) error {
	return c.life.Shutdown(func() error { return c.shutdown(ctx) })
}

func (c *Cell) shutdown(ctx context.Context) error {
	if !c.life.Stop() {
		c.life.End(nil)
		return nil
	}
	c.stopping.Store(true)
	c.stopRun()
	c.hs.Shutdown() // NOT_SERVING to every watcher before we stop taking work
	err := drain(ctx, c.gs, c.srv.InFlight, c.cfg.ShutdownTimeout, c.log)
	c.serving.Wait()
	c.rel.Release(ctx)
	c.life.End(nil)
	return err
}

// Done is closed when the cell no longer serves: Start failed, the server
// stopped serving on its own (Err says why; call Shutdown to release the
// rest), or Shutdown has stopped it.
func (c *Cell) Done() <-chan struct{} { return c.life.Done() }

// Err is why serving ended: Start's error, or the server's; nil while the
// cell serves and after a Shutdown that stopped a cell serving fine.
func (c *Cell) Err() error { return c.life.Err() }

// Addr is the Cell API listener's address (the port the system chose, if
// Listen's was 0); nil before Start.
func (c *Cell) Addr() net.Addr {
	if c.lis == nil {
		return nil
	}
	return c.lis.Addr()
}

// HealthAddr is the health port's address; nil before Start and without
// HealthListen.
func (c *Cell) HealthAddr() net.Addr {
	if c.hp == nil {
		return nil
	}
	return c.hp.Addr()
}

// drain stops gs gracefully: the attempts in flight finish, within
// timeout and ctx, and then the server stops hard. While it waits it logs
// how many attempts are still in flight (inFlight), every
// drainReportEvery, so that a slow stop says whether attempts are what it
// waits for. It returns ctx's error (wrapped) if ctx cut the wait short.
func drain(ctx context.Context, gs *grpc.Server, inFlight func() int64, timeout time.Duration, log *slog.Logger) error {
	start := time.Now()
	log.Info("cell draining", "in_flight", inFlight())
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	hard := time.NewTimer(timeout)
	defer hard.Stop()
	report := time.NewTicker(drainReportEvery)
	defer report.Stop()
	var err error
	for {
		select {
		case <-stopped:
			log.Info("cell stopped", "drain", time.Since(start).Round(time.Millisecond).String())
			return nil
		case <-report.C:
			log.Warn("cell still draining", "in_flight", inFlight(), "waited", time.Since(start).Round(time.Millisecond).String())
			continue
		case <-ctx.Done():
			err = fmt.Errorf("cell: shutdown: %w", ctx.Err())
		case <-hard.C:
		}
		log.Warn("in-flight work did not finish in time; stopping hard", "in_flight", inFlight())
		gs.Stop()
		<-stopped
		log.Info("cell stopped", "drain", time.Since(start).Round(time.Millisecond).String())
		return err
	}
}

// drainReportEvery is how often a graceful stop that is still waiting
// says so.
const drainReportEvery = 2 * time.Second
