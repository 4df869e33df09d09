package gtr

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
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
	"github.com/cellpay/cellpay/cmd/gtr/internal/rest"
	"github.com/cellpay/cellpay/cmd/gtr/internal/routesync"
	"github.com/cellpay/cellpay/cmd/gtr/internal/state"
	"github.com/cellpay/cellpay/internal/grpclimits"
	"github.com/cellpay/cellpay/internal/healthport"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/jsconf"
	"github.com/cellpay/cellpay/internal/partnerstate"
	"github.com/cellpay/cellpay/internal/telemetry"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// Start's steps, in the order Start takes them. Each adds to g.rel what
// it acquires as soon as it has it, so that a step that fails half-way
// leaves Start only the releasing of the stack to do.

// startRouting builds the transport to the cells, the health monitor (the
// one owner of health) and the routing state, which reads the monitor's
// shares when it compiles: an ejection only signals the state's compiler.
func (g *GTR) startRouting(context.Context) error {
	cells, stopCellTLS, err := hop.NewDialer(g.cfg.CellTLS)
	if err != nil {
		return fmt.Errorf("gtr: cells' TLS: %w", err)
	}
	g.rel.Add(stopCellTLS)
	if !g.cfg.CellTLS.Set() {
		g.cfg.Log.Warn("no cell TLS files: plaintext to the cells")
	}
	// Each cell's connections pin its identity.
	g.cellDial = func(id string) grpc.DialOption { return cells.To(hop.Only(hop.Cell(id))) }
	if g.cfg.CellDialFrom != "" {
		g.cellFrom = []grpc.DialOption{hop.DialFrom(net.ParseIP(g.cfg.CellDialFrom))}
	}
	// g.st is set before the monitor watches any cell, so before OnChange
	// runs.
	g.mon, err = health.New(health.Config{OnChange: func(id string, share int) {
		g.st.HealthChanged(id, share)
		g.recent.HealthChanged(id, share)
	}, Dial: g.cellDial, DialOptions: g.cellFrom, Log: g.cfg.Log})
	if err != nil {
		return err
	}
	g.st, err = state.New(state.Config{Health: g.mon})
	return err
}

// startTelemetry sets up metrics (served on MetricsListen) and traces.
func (g *GTR) startTelemetry(ctx context.Context) error {
	tel, err := telemetry.Setup(ctx, telemetry.Config{Service: "gtr", Instance: cmp.Or(g.cfg.ReplicaID, "gtr"), MetricsListen: g.cfg.MetricsListen, Log: g.cfg.Log})
	if err != nil {
		return err
	}
	g.tel = tel
	g.rel.AddCtx(tel.Close)
	return nil
}

// startStores starts the replicated routing configuration, the partner
// registry (whose Index authenticates partners' calls) and, with NATS,
// the watch of the cells' reference data versions, for rules that need a
// minimum.
func (g *GTR) startStores(context.Context) error {
	cfg := g.cfg
	store, err := routesync.Start(routesync.Config{
		State: g.st,
		Seed: func() (state.Doc, error) {
			spec, err := config.Load(cfg.ConfigFile)
			return state.FromSpec(spec), err
		},
		NATSURL: cfg.NATSURL, NATSTLS: cfg.NATSTLS, Bucket: cfg.NATSBucket, StateFile: cfg.StateFile, ReplicaID: cfg.ReplicaID,
		Limits: jsconf.Limits{Replicas: cfg.NATSReplicas}, Drift: &g.drift, Log: cfg.Log,
	})
	if err != nil {
		return err
	}
	g.store = store
	g.rel.Add(store.Close)
	g.partners, err = partnerstate.Start(partnerstate.Config{
		File: cfg.PartnersFile, NATSURL: cfg.NATSURL, NATSTLS: cfg.NATSTLS, Bucket: cfg.NATSBucket, StateFile: cfg.PartnersStateFile,
		ReplicaID: cfg.ReplicaID, Limits: jsconf.Limits{Replicas: cfg.NATSReplicas}, Drift: &g.drift, Log: cfg.Log,
	})
	if err != nil {
		return err
	}
	g.rel.Add(g.partners.Close)
	if cfg.NATSURL == "" {
		return nil
	}
	rw, err := refwatch.Start(refwatch.Config{NATSURL: cfg.NATSURL, NATSTLS: cfg.NATSTLS, Sink: g.st, Name: "gtr refwatch " + cfg.ReplicaID, Log: cfg.Log})
	if err != nil {
		return err
	}
	g.rel.Add(rw.Close)
	return nil
}

// connectWait bounds how long a starting GTR waits for its connections to
// the cells before it serves partners.
const connectWait = 3 * time.Second

// startFollowing opens the pool of connections to the cells and starts
// the state's compiler, the monitor's checks, and what points the monitor
// and the pool at the table's cells whenever the table changes.
func (g *GTR) startFollowing(ctx context.Context) error {
	st, mon := g.st, g.mon
	pool := cellconn.NewPinned(g.cellDial, append(g.tel.DialOptions(), g.cellFrom...)...)
	g.pool = pool
	g.rel.Add(pool.Close)
	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	g.rel.Add(func() {
		stopBG()
		wg.Wait()
	})
	wg.Go(func() { st.Run(bg) })
	followCells(st, mon)
	// Partners are served once every cell's connection has tried once:
	// a restarted replica's first payments find them open.
	pool.Connect(st.Table())
	wctx, cancel := context.WithTimeout(ctx, connectWait)
	if slow := pool.WaitConnected(wctx); len(slow) > 0 {
		g.cfg.Log.Warn("serving before these cells' connections are ready", "cells", slow, "waited", connectWait)
	}
	cancel()
	wg.Go(func() { mon.Run(bg) })
	wg.Go(func() {
		for {
			select {
			case <-bg.Done():
				return
			case <-st.Changed():
				followCells(st, mon)
				pool.Forget(inTable(st))
				pool.Connect(st.Table())
			}
		}
	})
	return nil
}

// startPartners builds the Payments API's server and binds the partners'
// listener, and with RESTListen the REST/JSON one. A partner over its
// limits is refused from the headers (the tap), before any stream; then
// the interceptors, outermost first: name the call and its refusals
// (request ID, ErrorInfo) and keep platform details out of partners'
// errors, authenticate, admit against the partner's limits.
func (g *GTR) startPartners(context.Context) error {
	var fairShare *admission.Partners
	if g.cfg.AdmissionBaseline > 0 {
		fairShare = g.partnerLimits
	}
	meter := g.tel.Meter("github.com/cellpay/cellpay/cmd/gtr")
	metrics, err := telemetry.NewGTR(meter, g.cellGauges)
	if err != nil {
		return err
	}
	g.metrics = metrics
	if err := telemetry.NewNATS(meter, telemetry.NATSSample{Drift: g.drift.Each}); err != nil {
		return err
	}
	pay, err := payments.New(payments.Config{
		Table:    g.st.Table,
		HomeSite: g.homeSite,
		Cells:    g.pool,
		Health:   g.mon,
		InFlight: g.st.InFlight,
		Metrics:  recordingMetrics{metrics, g.recent},
		Limits:   g.cellLimits,
		Partners: fairShare,
		Log:      g.cfg.Log,
	})
	if err != nil {
		return err
	}
	tlsCfg, stopTLS, err := tlsconf.ServerConfig(g.cfg.TLSCertFile, g.cfg.TLSKeyFile, 0)
	if err != nil {
		return fmt.Errorf("gtr: %w", err)
	}
	g.tlsCfg = tlsCfg
	g.rel.Add(stopTLS)
	authn := &auth.Partners{Index: g.partners.Index, OnDenied: metrics.Denied}
	g.partnerLimits.LogRefusals(g.cfg.Log, refusalsLogged)
	g.partnerLimits.KeepRefusals(g.refusals)
	// The options of both servers of the Payments API: the listener's, and
	// the REST gateway's in process, which has no TLS of its own (its
	// HTTPS listener has).
	srvOpts := append([]grpc.ServerOption{
		grpc.InTapHandle(g.partnerLimits.Tap(authn.FromHeader,
			admission.RouterLimit{Limit: g.cellLimits.Cell(admission.WholeGTR), FairShare: fairShare != nil}, metrics.Shed))}, grpclimits.Partners.ServerOptions()...)
	srvOpts = append(srvOpts, g.tel.PublicServerOptions()...)
	srvOpts = append(srvOpts, grpc.ChainUnaryInterceptor(edge.UnaryInterceptor(auth.PaymentsPrefix, g.cfg.Log, metrics.Served, g.refusals)))
	srvOpts = append(srvOpts, authn.ServerOptions()...)
	srvOpts = append(srvOpts, grpc.ChainUnaryInterceptor(g.partnerLimits.UnaryInterceptor(metrics.Shed)))
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}, srvOpts...)...)
	g.rel.Add(gs.Stop) // a server never served; Shutdown has stopped it by then
	cellpayv1.RegisterPaymentsServer(gs, pay)
	healthpb.RegisterHealthServer(gs, g.hs)
	if g.cfg.Reflection {
		reflection.Register(gs)
	}
	if g.cfg.RESTListen != "" {
		if err := g.startREST(pay, authn, srvOpts); err != nil {
			return err
		}
	}
	lis, err := net.Listen("tcp", g.cfg.Listen)
	if err != nil {
		return fmt.Errorf("gtr: listen: %w", err)
	}
	g.lis = lis
	g.rel.Add(func() { lis.Close() })
	g.servers, g.listeners = append(g.servers, gs), append(g.listeners, lis)
	return nil
}

// refusalsLogged bounds the log lines a second of the calls the partners'
// tap refuses (no key, a wrong one, over a limit): enough for support to
// find the one a partner quotes, too few for a flood to cost the GTR.
const refusalsLogged = 20

// startREST binds the REST/JSON listener (HTTPS, the partners'
// certificate): the gateway of package rest, calling a gRPC server of its
// own in process with the partners' server's options opts (its tap and
// interceptors, so the same limits and answers) and the same Payments
// implementation pay. authn authenticates a call from its headers before
// its body is read, as the tap does; what the gateway refuses itself is
// logged within the tap's bound.
func (g *GTR) startREST(pay cellpayv1.PaymentsServer, authn *auth.Partners, opts []grpc.ServerOption) error {
	mem := bufconn.Listen(1 << 20)
	ms := grpc.NewServer(opts...)
	g.rel.Add(ms.Stop)
	cellpayv1.RegisterPaymentsServer(ms, pay)
	conn, err := grpc.NewClient("passthrough:///gtr-rest",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return mem.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(rest.Interceptor))
	if err != nil {
		return fmt.Errorf("gtr: rest: %w", err)
	}
	g.rel.Add(func() { conn.Close() })
	h, err := rest.Handler(context.Background(), rest.Config{Conn: conn, MaxBody: int64(grpclimits.Partners.MaxRecvMsg),
		Authenticate: func(h http.Header) error {
			_, err := authn.FromHeader(metadata.MD{"authorization": h.Values("Authorization")})
			return err
		},
		LogRefusal: g.partnerLimits.LogRefusal})
	if err != nil {
		return err
	}
	tlsCfg := g.tlsCfg.Clone()
	tlsCfg.NextProtos = []string{"h2", "http/1.1"}
	lis, err := net.Listen("tcp", g.cfg.RESTListen)
	if err != nil {
		return fmt.Errorf("gtr: rest: listen: %w", err)
	}
	g.rel.Add(func() { lis.Close() })
	g.restLis = tls.NewListener(lis, tlsCfg)
	g.rest = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: int(grpclimits.Partners.MaxHeaderList),
		ErrorLog: slog.NewLogLogger(g.cfg.Log.Handler(), slog.LevelDebug)}
	g.servers, g.listeners = append(g.servers, ms), append(g.listeners, mem)
	return nil
}

// cellGauges are the table's cells' gauges, read at each scrape.
func (g *GTR) cellGauges(yield func(telemetry.CellGauge) bool) {
	st := g.st
	d, _, _ := st.Doc()
	checked, now := st.Checked(), st.Now()
	for _, c := range st.Table().Spec().Cells {
		cg := telemetry.CellGauge{ID: c.ID, HealthShare: g.mon.Share(c.ID), InFlight: st.Stats(c.ID).InFlight,
			Limit: g.cellLimits.Cell(c.ID).Limit()}
		// After the share: an ejection counts before it sets the share, so
		// a scrape that reads a share of 0 reads its ejection too.
		for cause, n := range g.mon.Ejections(c.ID) {
			cg.Ejections = append(cg.Ejections, telemetry.Count{Label: health.Cause(cause).String(), N: n})
		}
		if dc := d.Cell(c.ID); dc != nil {
			cg.Weight, cg.TargetWeight, cg.RampStalled = dc.WeightAt(now), dc.Weight, dc.RampStalled(checked, now)
		}
		if !yield(cg) {
			return
		}
	}
}

// startAdmin, with AdminListen, builds the Admin API and binds the
// operators' listener: TLS only, since operators' tokens never cross the
// network in the clear either, with the admin certificate (the GTR's
// identity, which gtrctl pins) or else the partners' one. The listener is
// shared with the operator console: console.Split does the handshake and
// hands gRPC clients to the admin server, browsers to the console.
func (g *GTR) startAdmin(context.Context) error {
	cfg := g.cfg
	if cfg.AdminListen == "" {
		return nil
	}
	ops, err := loadOperators(cfg.OperatorsFile, cfg.AdminToken)
	if err != nil {
		return err
	}
	auditLog, err := audit.Open(audit.Config{NATSURL: cfg.NATSURL, NATSTLS: cfg.NATSTLS, Replica: cmp.Or(cfg.ReplicaID, "gtr"), File: cfg.AuditFile, StreamReplicas: cfg.NATSReplicas, Drift: &g.drift, Log: cfg.Log})
	if err != nil {
		return err
	}
	g.rel.Add(auditLog.Close)
	var rel admin.Releaser
	if cfg.NATSURL != "" {
		rel = releaser{url: cfg.NATSURL, tls: cfg.NATSTLS, name: "gtr release " + cfg.ReplicaID}
	}
	drills, drillRoots, err := drillStore(cfg, &g.drift)
	if err != nil {
		return err
	}
	adm, err := admin.New(admin.Config{State: g.st, Health: g.mon, Store: g.store, Partners: g.partners, ReplicaID: cfg.ReplicaID, Cells: g.pool,
		Releaser: rel, Drills: drills, DrillRoots: drillRoots, Audit: auditLog, References: g.findReference, CellViews: g.cellViews, Log: cfg.Log})
	if err != nil {
		return err
	}
	tlsCfg, err := g.adminTLS()
	if err != nil {
		return err
	}
	alis, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		return fmt.Errorf("gtr: admin listen: %w", err)
	}
	g.adminLis = alis
	grpcLis, webLis := console.Split(alis, tlsCfg)
	g.rel.Add(func() { grpcLis.Close(); webLis.Close() }) // both closed close alis
	authn := admin.NewAuth(ops)
	authn.ExemptLoopback = cfg.AdminExemptLoopback
	if g.metrics != nil {
		authn.OnFailure = g.metrics.LoginFailed
	}
	if cfg.OperatorsFile != "" {
		g.rel.Add(watchOperators(cfg.OperatorsFile, cfg.AdminToken, cmp.Or(cfg.OperatorsRefresh, operatorsRefresh), authn, cfg.Log))
	}
	asOpts := append([]grpc.ServerOption{grpc.Creds(console.Handshaken())}, grpclimits.Admin.ServerOptions()...)
	as := grpc.NewServer(append(append(asOpts, adm.ServerOptions(authn)...), g.tel.ServerOptions()...)...)
	g.rel.Add(as.Stop) // as the partners' server
	adm.Register(as)
	healthpb.RegisterHealthServer(as, g.hs)
	reflection.Register(as)
	g.servers, g.listeners = append(g.servers, as), append(g.listeners, grpcLis)
	if err := g.startConsole(adm, authn, webLis); err != nil {
		return err
	}
	cfg.Log.Info("operator console", "url", "https://"+alis.Addr().String()+"/")
	if ops.Len() == 0 {
		cfg.Log.Warn("no operators configured: the admin API refuses every call")
	}
	if cfg.AuditFile == "" && cfg.NATSURL == "" {
		cfg.Log.Warn("no audit log (neither NATS nor an audit file): the admin API refuses every change")
	}
	return nil
}

// adminTLS is the admin listener's TLS configuration: its own
// certificate, reloaded from its files as the partners' is, or else the
// partners' listener's.
func (g *GTR) adminTLS() (*tls.Config, error) {
	if g.cfg.AdminTLSCertFile == "" {
		return g.tlsCfg, nil
	}
	cfg, stop, err := tlsconf.ServerConfig(g.cfg.AdminTLSCertFile, g.cfg.AdminTLSKeyFile, 0)
	if err != nil {
		return nil, fmt.Errorf("gtr: admin listener: %w", err)
	}
	g.rel.Add(stop)
	return cfg, nil
}

// startConsole serves the operator console on webLis. Its release shuts
// the console's server down within ShutdownTimeout (and the context it is
// given), then closes what is still open.
func (g *GTR) startConsole(adm *admin.Server, authn *admin.Auth, webLis net.Listener) error {
	web, stopWeb, err := newConsole(adm, authn, g.recent, g.events, g.tel, g.cfg.Log)
	if err != nil {
		return err
	}
	g.rel.Add(stopWeb)
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := web.Serve(webLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.cfg.Log.Error("console: serve", "error", err)
		}
	}()
	g.rel.AddCtx(func(ctx context.Context) {
		sctx, cancel := context.WithTimeout(ctx, g.cfg.ShutdownTimeout)
		defer cancel()
		if web.Shutdown(sctx) != nil {
			web.Close()
		}
		<-served
	})
	return nil
}

// startHealthPort, with HealthListen, serves health alone, in plaintext.
func (g *GTR) startHealthPort(context.Context) error {
	if g.cfg.HealthListen == "" {
		return nil
	}
	hp, err := healthport.Listen(g.cfg.HealthListen, g.hs)
	if err != nil {
		return fmt.Errorf("gtr: %w", err)
	}
	g.hp = hp
	g.rel.Add(hp.Stop)
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

// homeSite is a partner's home site in the registry in force, "" for none
// (or an unknown partner, which authentication refuses anyway).
func (g *GTR) homeSite(partner string) string {
	if p, ok := g.partners.Index().Partner(partner); ok {
		return p.HomeSite
	}
	return ""
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

// newConsole builds the operator console: its handler calls the Admin
// API through an in-process connection to a gRPC server of its own with
// the same interceptors as the admin listener's (auth by the operator's
// token, the policy, the audit), so that nothing the console does bypasses
// them. The func stops that server and connection.
func newConsole(adm *admin.Server, authn *admin.Auth, recent *console.Recent, events func(context.Context, int) ([]console.Event, error), tel *telemetry.Telemetry, log *slog.Logger) (*http.Server, func(), error) {
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
	h, err := console.New(console.Config{Admin: adminproto.NewAdminClient(conn), Authenticate: authn.Login, Recent: recent, Events: events, Log: log})
	if err != nil {
		stop()
		return nil, nil, err
	}
	return console.NewServer(h, log), stop, nil
}
