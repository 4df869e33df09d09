// Package gtr assembles the Global Transaction Router: the routing state
// (go-memdb, converged across replicas through NATS KV), the health
// monitor (the one owner of health, which the state's compiler reads), the reference data versions cells report (over NATS, when
// configured), the connections to cells, the public Payments API on the
// partners' listener and the Admin API on the operators' listener, each
// with gRPC health; reflection on both (the admin one behind the token).
// The operators' listener also serves the operator console (package
// console), a client of the Admin API.
package gtr

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/test/bufconn"

	"github.com/cellpay/cellpay/cmd/gtr/internal/admin"
	"github.com/cellpay/cellpay/cmd/gtr/internal/admission"
	"github.com/cellpay/cellpay/cmd/gtr/internal/audit"
	"github.com/cellpay/cellpay/cmd/gtr/internal/auth"
	"github.com/cellpay/cellpay/cmd/gtr/internal/cellconn"
	"github.com/cellpay/cellpay/cmd/gtr/internal/config"
	"github.com/cellpay/cellpay/cmd/gtr/internal/console"
	"github.com/cellpay/cellpay/cmd/gtr/internal/edge"
	"github.com/cellpay/cellpay/cmd/gtr/internal/health"
	"github.com/cellpay/cellpay/cmd/gtr/internal/payments"
	"github.com/cellpay/cellpay/cmd/gtr/internal/refwatch"
	"github.com/cellpay/cellpay/cmd/gtr/internal/routesync"
	"github.com/cellpay/cellpay/cmd/gtr/internal/state"
	"github.com/cellpay/cellpay/internal/grpclimits"
	"github.com/cellpay/cellpay/internal/healthport"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/partnerstate"
	"github.com/cellpay/cellpay/internal/pki"
	"github.com/cellpay/cellpay/internal/telemetry"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// DefaultAdmissionBaseline is the gtr command's -admission-baseline: with
// it, overload is answered RESOURCE_EXHAUSTED (safe to retry: nothing was
// sent) where the per-window rule let requests wait out their deadline
// (DEADLINE_EXCEEDED: ambiguous to the partner). docs/benchmarks/log/overload.md.
const DefaultAdmissionBaseline = 10 * time.Second

// Config is everything the GTR needs to run.
type Config struct {
	Listen      string // partners' Payments API
	AdminListen string // operators' listener (TLS with the partners' certificate); never the partners' port
	// HealthListen, if set, serves gRPC health alone, in plaintext, for
	// probes that cannot speak TLS (kubelet's); nothing else is served there.
	HealthListen string
	// ConfigFile is the routing table (YAML): where a replica starts when
	// it has no state file, and what seeds an empty KV bucket.
	ConfigFile string
	// OperatorsFile lists the operators who may call the Admin API, each
	// with a role and its token's SHA-256 (internal/operators). AdminToken,
	// the old single token, if set acts as operator "legacy-admin" with
	// role admin. With neither, every admin call is UNAUTHENTICATED
	// (health still answers).
	OperatorsFile string
	// OperatorsRefresh is how often OperatorsFile is read again, so that
	// operators are added and removed without a restart; default 10 s.
	OperatorsRefresh time.Duration
	AdminToken       string
	// AuditFile is the audit log's local spool (with NATS; the records
	// reach the CELLPAY_AUDIT stream once it takes them) or the audit log
	// itself (standalone). Default: beside StateFile, <state>.audit.jsonl;
	// with neither it nor NATS every admin change is refused, since it
	// could not be audited.
	AuditFile string
	// AuditReplicas is the CELLPAY_AUDIT stream's replica count when this
	// replica is the one to create it (nobody has); default 1.
	AuditReplicas int
	// NATSURL is the NATS server holding the shared routing configuration
	// and carrying the cells' reference data status reports; "" runs this
	// replica standalone (admin changes stay local, and no cell's reference
	// data version is known, so rules with a minimum route nothing).
	NATSURL    string
	NATSBucket string // KV bucket; default "cellpay_gtr"
	// NATSTLS is the GTR's NATS identity (hop.GTR); zero for plaintext
	// NATS without authentication.
	NATSTLS pki.Files
	// StateFile keeps the last-known configuration; "" keeps none.
	StateFile string
	ReplicaID string
	// TLSCertFile and TLSKeyFile are the partners' listener's certificate
	// and key (PEM), re-read every few seconds so that a renewed
	// certificate is served without a restart. Required: partners' calls
	// carry API keys, which never cross the network in the clear.
	TLSCertFile, TLSKeyFile string
	// CellTLS is the GTR's identity towards the cells (hop.GTR): its client
	// certificate and key, and the CA the cells' certificates chain to.
	// Empty: plaintext to the cells, which then serve anyone (benchmarks).
	CellTLS pki.Files
	// PartnersFile is the partner registry (YAML) that seeds an empty KV
	// bucket, and that a replica without a partners state file starts
	// from; "" is an empty registry: every partner call is refused.
	PartnersFile string
	// PartnersStateFile keeps the last-known partner registry; "" keeps
	// none.
	PartnersStateFile string
	// NoAdmission turns admission control off (partners' limits and the
	// cells' adaptive concurrency limits), to measure without it.
	NoAdmission bool
	// AdmissionBaseline, if set, is the time constant with which the
	// adaptive limits' long-term latency average moves, whatever the
	// rate, and at the GTR-wide limit a partner within its fair share of
	// it is still admitted (admission.CellConfig.Baseline,
	// CellLimit.AcquireShare). Zero is the former rule: the average moves
	// by a share of each window of samples, and no fair share. The gtr
	// command's default is DefaultAdmissionBaseline (docs/benchmarks/log/overload.md).
	AdmissionBaseline time.Duration
	// AdmissionTolerance is how much slower than its long-term latency a
	// cell (or the GTR as a whole) may answer before its adaptive limit
	// falls (admission.CellConfig.Tolerance); 0 is the default, 2.
	AdmissionTolerance float64
	// AdmissionShedBaseline, if set, is the time constant of the long-term
	// average's rise while a limit is refusing attempts
	// (admission.CellConfig.ShedBaseline); 0 is AdmissionBaseline's.
	AdmissionShedBaseline time.Duration
	// Reflection serves gRPC reflection on the partners' listener (for
	// grpcurl); off in production.
	Reflection bool
	// MetricsListen, if set, serves Prometheus metrics at /metrics. Traces
	// are exported only when OTEL_EXPORTER_OTLP_ENDPOINT is set.
	MetricsListen string
	// ShutdownTimeout bounds finishing in-flight requests; default 15s.
	ShutdownTimeout time.Duration
	Log             *slog.Logger
}

func (c *Config) validate() error {
	if c.Listen == "" || c.ConfigFile == "" {
		return errors.New("gtr: listen address and config file are required")
	}
	if c.HealthListen != "" && (c.HealthListen == c.Listen || c.HealthListen == c.AdminListen) {
		return errors.New("gtr: the health listener must be an address of its own")
	}
	if c.AdminListen != "" && c.AdminListen == c.Listen {
		return errors.New("gtr: the admin listener must not be the partners' address")
	}
	if c.TLSCertFile == "" || c.TLSKeyFile == "" {
		return errors.New("gtr: the partners' listener needs a TLS certificate and key (tls-cert, tls-key)")
	}
	if c.AdmissionBaseline < 0 {
		return fmt.Errorf("gtr: admission-baseline: %v is negative (0 for the per-window rule)", c.AdmissionBaseline)
	}
	if c.AdmissionShedBaseline < 0 {
		return fmt.Errorf("gtr: admission-shed-baseline: %v is negative (0 for admission-baseline's)", c.AdmissionShedBaseline)
	}
	if t := c.AdmissionTolerance; t != 0 && !(t > 1 && t <= 100) {
		return fmt.Errorf("gtr: admission-tolerance: %v is not above 1 and at most 100 (0 for the default, 2)", t)
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 15 * time.Second
	}
	if c.AuditFile == "" && c.StateFile != "" {
		c.AuditFile = strings.TrimSuffix(c.StateFile, ".json") + ".audit.jsonl"
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// Run serves until ctx ends, then stops taking requests, finishes the ones
// in flight (bounded by ShutdownTimeout) and returns.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	// The health monitor owns health; the state reads its shares when it
	// compiles, and an ejection only signals the state's compiler (st is
	// set before the monitor watches any cell, so before OnChange runs).
	var st *state.State
	cellDial, stopCellTLS, err := hop.DialOption(cfg.CellTLS)
	if err != nil {
		return fmt.Errorf("gtr: cells' TLS: %w", err)
	}
	defer stopCellTLS()
	if !cfg.CellTLS.Set() {
		cfg.Log.Warn("no cell TLS files: plaintext to the cells")
	}
	// recent is the console's ring of this replica's re-routes and
	// ejections, fed by the monitor and the payments' metrics.
	recent := console.NewRecent(nil)
	mon, err := health.New(health.Config{OnChange: func(id string, share int) {
		st.HealthChanged(id, share)
		recent.HealthChanged(id, share)
	}, Dial: cellDial, Log: cfg.Log})
	if err != nil {
		return err
	}
	st, err = state.New(state.Config{Health: mon})
	if err != nil {
		return err
	}
	tel, err := telemetry.Setup(ctx, telemetry.Config{Service: "gtr", Instance: cmp.Or(cfg.ReplicaID, "gtr"), MetricsListen: cfg.MetricsListen, Log: cfg.Log})
	if err != nil {
		return err
	}
	defer tel.Close(ctx)
	store, err := routesync.Start(routesync.Config{
		State: st,
		Seed: func() (state.Doc, error) {
			spec, err := config.Load(cfg.ConfigFile)
			return state.FromSpec(spec), err
		},
		NATSURL: cfg.NATSURL, NATSTLS: cfg.NATSTLS, Bucket: cfg.NATSBucket, StateFile: cfg.StateFile, ReplicaID: cfg.ReplicaID,
		Log: cfg.Log,
	})
	if err != nil {
		return err
	}
	defer store.Close()
	// partnerStore is the partner registry; partnerStore.Index is what
	// authenticates partners' calls.
	partnerStore, err := partnerstate.Start(partnerstate.Config{
		File: cfg.PartnersFile, NATSURL: cfg.NATSURL, NATSTLS: cfg.NATSTLS, Bucket: cfg.NATSBucket, StateFile: cfg.PartnersStateFile,
		ReplicaID: cfg.ReplicaID, Log: cfg.Log,
	})
	if err != nil {
		return err
	}
	defer partnerStore.Close()
	if cfg.NATSURL != "" {
		// Cells' reference data versions, for rules that need a minimum.
		rw, err := refwatch.Start(refwatch.Config{NATSURL: cfg.NATSURL, NATSTLS: cfg.NATSTLS, Sink: st, Name: "gtr refwatch " + cfg.ReplicaID, Log: cfg.Log})
		if err != nil {
			return err
		}
		defer rw.Close()
	}

	pool := cellconn.New(append(tel.DialOptions(), cellDial)...)
	defer pool.Close()
	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopBG()
	wg.Go(func() { st.Run(bg) })
	followCells(st, mon)
	wg.Go(func() { mon.Run(bg) })
	wg.Go(func() {
		for {
			select {
			case <-bg.Done():
				return
			case <-st.Changed():
				followCells(st, mon)
				pool.Forget(inTable(st))
			}
		}
	})

	cellLimits := admission.NewCells(admission.CellConfig{Disabled: cfg.NoAdmission, Baseline: cfg.AdmissionBaseline,
		ShedBaseline: cfg.AdmissionShedBaseline, Tolerance: cfg.AdmissionTolerance})
	partnerLimits := admission.NewPartners(cfg.NoAdmission, nil)
	var fairShare *admission.Partners
	if cfg.AdmissionBaseline > 0 {
		fairShare = partnerLimits
	}
	metrics, err := telemetry.NewGTR(tel.Meter("github.com/cellpay/cellpay/cmd/gtr"), func(yield func(telemetry.CellGauge) bool) {
		d, _, _ := st.Doc()
		checked, now := st.Checked(), st.Now()
		for _, c := range st.Table().Spec().Cells {
			g := telemetry.CellGauge{ID: c.ID, HealthShare: mon.Share(c.ID), InFlight: st.Stats(c.ID).InFlight,
				Limit: cellLimits.Cell(c.ID).Limit()}
			if dc := d.Cell(c.ID); dc != nil {
				g.Weight, g.TargetWeight, g.RampStalled = dc.WeightAt(now), dc.Weight, dc.RampStalled(checked, now)
			}
			if !yield(g) {
				return
			}
		}
	})
	if err != nil {
		return err
	}
	pay, err := payments.New(payments.Config{
		Table:    st.Table,
		Cells:    pool,
		Health:   mon,
		InFlight: st.InFlight,
		Metrics:  recordingMetrics{metrics, recent},
		Limits:   cellLimits,
		Partners: fairShare,
		Log:      cfg.Log,
	})
	if err != nil {
		return err
	}
	tlsCfg, stopTLS, err := pki.ServerConfig(cfg.TLSCertFile, cfg.TLSKeyFile, 0)
	if err != nil {
		return fmt.Errorf("gtr: %w", err)
	}
	defer stopTLS()
	authn := &auth.Partners{Index: partnerStore.Index, OnDenied: metrics.Denied}
	hs := grpchealth.NewServer()
	// A partner over its limits is refused from the headers (the tap),
	// before any stream; then the interceptors, outermost first:
	// authenticate, admit against the partner's limits, then keep
	// platform details out of partners' errors.
	srvOpts := append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg)),
		grpc.InTapHandle(partnerLimits.Tap(authn.FromHeader,
			admission.RouterLimit{Limit: cellLimits.Cell(admission.WholeGTR), FairShare: fairShare != nil}, metrics.Shed))}, grpclimits.Partners.ServerOptions()...)
	srvOpts = append(srvOpts, tel.PublicServerOptions()...)
	srvOpts = append(srvOpts, authn.ServerOptions()...)
	srvOpts = append(srvOpts, grpc.ChainUnaryInterceptor(
		partnerLimits.UnaryInterceptor(metrics.Shed),
		edge.UnaryInterceptor(auth.PaymentsPrefix, cfg.Log)))
	gs := grpc.NewServer(srvOpts...)
	cellpayv1.RegisterPaymentsServer(gs, pay)
	healthpb.RegisterHealthServer(gs, hs)
	if cfg.Reflection {
		reflection.Register(gs)
	}
	servers := []*grpc.Server{gs}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("gtr: listen: %w", err)
	}
	listeners := []net.Listener{lis}
	if cfg.AdminListen != "" {
		ops, err := loadOperators(cfg.OperatorsFile, cfg.AdminToken)
		if err != nil {
			lis.Close()
			return err
		}
		auditLog, err := audit.Open(audit.Config{NATSURL: cfg.NATSURL, NATSTLS: cfg.NATSTLS, Replica: cmp.Or(cfg.ReplicaID, "gtr"), File: cfg.AuditFile, StreamReplicas: cfg.AuditReplicas, Log: cfg.Log})
		if err != nil {
			lis.Close()
			return err
		}
		defer auditLog.Close()
		adm, err := admin.New(admin.Config{State: st, Health: mon, Store: store, Partners: partnerStore, ReplicaID: cfg.ReplicaID, Cells: pool,
			Audit: auditLog, Log: cfg.Log})
		if err != nil {
			lis.Close()
			return err
		}
		alis, err := net.Listen("tcp", cfg.AdminListen)
		if err != nil {
			lis.Close()
			return fmt.Errorf("gtr: admin listen: %w", err)
		}
		// TLS with the partners' certificate: operators' tokens never
		// cross the network in the clear either. The listener is shared
		// with the operator console: console.Split does the handshake and
		// hands gRPC clients to as, browsers to the console.
		grpcLis, webLis := console.Split(alis, tlsCfg)
		asOpts := append([]grpc.ServerOption{grpc.Creds(console.Handshaken())}, grpclimits.Admin.ServerOptions()...)
		authn := admin.NewAuth(ops)
		if cfg.OperatorsFile != "" {
			stopWatch := watchOperators(cfg.OperatorsFile, cfg.AdminToken, cmp.Or(cfg.OperatorsRefresh, operatorsRefresh), authn, cfg.Log)
			defer stopWatch()
		}
		as := grpc.NewServer(append(append(asOpts, adm.ServerOptions(authn)...), tel.ServerOptions()...)...)
		adm.Register(as)
		healthpb.RegisterHealthServer(as, hs)
		reflection.Register(as)
		servers = append(servers, as)
		listeners = append(listeners, grpcLis)
		web, stopWeb, err := startConsole(adm, authn, recent, tel, cfg.Log)
		if err != nil {
			grpcLis.Close()
			webLis.Close()
			lis.Close()
			return err
		}
		defer stopWeb()
		go func() {
			if err := web.Serve(webLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				cfg.Log.Error("console: serve", "error", err)
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
			defer cancel()
			web.Shutdown(sctx)
		}()
		cfg.Log.Info("operator console", "url", "https://"+alis.Addr().String()+"/")
		if ops.Len() == 0 {
			cfg.Log.Warn("no operators configured: the admin API refuses every call")
		}
		if cfg.AuditFile == "" && cfg.NATSURL == "" {
			cfg.Log.Warn("no audit log (neither NATS nor an audit file): the admin API refuses every change")
		}
	}
	if cfg.HealthListen != "" {
		hp, err := healthport.Listen(cfg.HealthListen, hs)
		if err != nil {
			for _, l := range listeners {
				l.Close()
			}
			return fmt.Errorf("gtr: %w", err)
		}
		defer hp.Stop()
	}
	errc := make(chan error, len(servers))
	for i, s := range servers {
		go func() { errc <- s.Serve(listeners[i]) }()
	}
	tbl := st.Table()
	cfg.Log.Info("gtr listening", "addr", lis.Addr().String(), "admin_addr", cfg.AdminListen, "replica", cfg.ReplicaID,
		"config_store", store.Status(), "table_version", tbl.Version(), "cells", len(tbl.Spec().Cells))
	select {
	case err := <-errc:
		return fmt.Errorf("gtr: serve: %w", err)
	case <-ctx.Done():
	}
	hs.Shutdown()
	done := make(chan struct{})
	go func() {
		for _, s := range servers {
			s.GracefulStop()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(cfg.ShutdownTimeout):
		for _, s := range servers {
			s.Stop()
		}
	}
	cfg.Log.Info("gtr stopped")
	return nil
}

// inTable reports whether a cell is in the table in force.
func inTable(st *state.State) func(string) bool {
	d, _, ok := st.Doc()
	return func(id string) bool { return !ok || d.Cell(id) != nil }
}

// followCells points the health monitor at the table's cells, and has the
// state recompile from the monitor's verdicts (a cell the monitor forgot
// and learns again starts at 100, which OnChange does not report).
func followCells(st *state.State, mon *health.Monitor) {
	d, _, ok := st.Doc()
	if !ok {
		return
	}
	cells := make([]health.Cell, 0, len(d.Cells))
	for _, c := range d.Cells {
		cells = append(cells, health.Cell{ID: c.ID, Addr: c.Addr, Addrs: c.Addrs, Pool: c.Pool})
	}
	mon.SetCells(cells)
	st.HealthChanged("", 0)
}

// recordingMetrics also keeps each re-route in the console's ring.
type recordingMetrics struct {
	payments.Metrics
	recent *console.Recent
}

func (m recordingMetrics) Rerouted(cellID string, err error, cellHealthy bool) {
	m.Metrics.Rerouted(cellID, err, cellHealthy)
	m.recent.Rerouted(cellID, err, cellHealthy)
}

// startConsole builds the operator console: its handler calls the Admin
// API through an in-process connection to a gRPC server of its own with
// the same interceptors as the admin listener's (auth by the operator's
// token, the policy, the audit), so that nothing the console does bypasses
// them. The func stops that server and connection.
func startConsole(adm *admin.Server, authn *admin.Auth, recent *console.Recent, tel *telemetry.Telemetry, log *slog.Logger) (*http.Server, func(), error) {
	mem := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(append(append(grpclimits.Admin.ServerOptions(), adm.ServerOptions(authn)...), tel.ServerOptions()...)...)
	adm.Register(gs)
	go gs.Serve(mem)
	conn, err := grpc.NewClient("passthrough:///gtr-console",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return mem.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		gs.Stop()
		return nil, nil, fmt.Errorf("gtr: console: %w", err)
	}
	stop := func() {
		conn.Close()
		gs.Stop()
	}
	h, err := console.New(console.Config{Admin: adminproto.NewAdminClient(conn), Authenticate: authn.Authenticate, Recent: recent, Log: log})
	if err != nil {
		stop()
		return nil, nil, err
	}
	return console.NewServer(h, log), stop, nil
}
