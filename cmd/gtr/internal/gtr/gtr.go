// Package gtr assembles the Global Transaction Router: the routing state
// (go-memdb, converged across replicas through NATS KV), the health
// monitor (the one owner of health, which the state's compiler reads), the
// reference data versions cells report (over NATS, when configured), the
// connections to cells, the public Payments API on the partners' listener
// and the Admin API on the operators' listener, each with gRPC health;
// reflection on both (the admin one behind the token). The operators'
// listener also serves the operator console (package console), a client
// of the Admin API.
//
// A GTR has a life cycle (New, Start, Shutdown), which main, tests and the
// launcher go through alike; it reads no flag and no environment variable:
// everything comes in its Config.
package gtr

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	grpchealth "google.golang.org/grpc/health"

	"github.com/cellpay/cellpay/cmd/gtr/internal/admission"
	"github.com/cellpay/cellpay/cmd/gtr/internal/cellconn"
	"github.com/cellpay/cellpay/cmd/gtr/internal/console"
	"github.com/cellpay/cellpay/cmd/gtr/internal/health"
	"github.com/cellpay/cellpay/cmd/gtr/internal/refusals"
	"github.com/cellpay/cellpay/cmd/gtr/internal/replicas"
	"github.com/cellpay/cellpay/cmd/gtr/internal/routesync"
	"github.com/cellpay/cellpay/cmd/gtr/internal/state"
	"github.com/cellpay/cellpay/internal/healthport"
	"github.com/cellpay/cellpay/internal/jsconf"
	"github.com/cellpay/cellpay/internal/lifecycle"
	"github.com/cellpay/cellpay/internal/partnerstate"
	"github.com/cellpay/cellpay/internal/telemetry"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/routing"
)

// DefaultAdmissionBaseline is the gtr command's -admission-baseline: with
// it, overload is answered RESOURCE_EXHAUSTED (safe to retry: nothing was
// sent) where the per-window rule let requests wait out their deadline
// (DEADLINE_EXCEEDED: ambiguous to the partner). docs/benchmarks/log/overload.md.
const DefaultAdmissionBaseline = 10 * time.Second

// Config is everything the GTR needs to run: New validates it and fills
// in the defaults the fields name.
type Config struct {
	Listen string // partners' Payments API
	// RESTListen, if set, serves the Payments API as REST/JSON over HTTPS
	// (package rest), with the partners' certificate.
	RESTListen  string
	AdminListen string // operators' listener (TLS, AdminTLSCertFile's certificate); never the partners' port
	// AdminTLSCertFile and AdminTLSKeyFile, if set, are the admin
	// listener's certificate and key (PEM), re-read as the partners' are:
	// one carrying the GTR's identity (spiffe://cellpay.internal/gtr) from
	// the internal CA, which gtrctl pins. Unset, the admin listener serves
	// the partners' certificate (TLSCertFile). Both or neither.
	AdminTLSCertFile, AdminTLSKeyFile string
	// AdminExemptLoopback exempts this host's addresses (loopback) from
	// the failed-login throttle: still audited and counted, never refused.
	// For one machine that many clients share (a test's GTR flooded with
	// refused logins from 127.0.0.1); never where loopback is a forwarded
	// connection from anyone (kubectl port-forward arrives from it). The
	// zero value throttles loopback like any address.
	AdminExemptLoopback bool
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
	// NATSReplicas is the replica count of what this replica creates in
	// NATS where nobody has yet (the routing and partners' bucket, the
	// CELLPAY_AUDIT stream): 3 on a three-server cluster; zero is 1. What
	// exists is kept as it is, and a difference reported (package jsconf).
	NATSReplicas int
	// NATSURL is the NATS server holding the shared routing configuration
	// and carrying the cells' reference data status reports; "" runs this
	// replica standalone (admin changes stay local, and no cell's reference
	// data version is known, so rules with a minimum route nothing).
	NATSURL    string
	NATSBucket string // KV bucket; default "cellpay_gtr"
	// NATSTLS is the GTR's NATS identity (hop.GTR); zero for plaintext
	// NATS without authentication.
	NATSTLS tlsconf.Files
	// StateFile keeps the last-known configuration; "" keeps none.
	StateFile string
	ReplicaID string
	// Site names the site (a city, a data centre) of this replica's
	// access point, shown to operators beside its replica ID; "" when
	// unnamed. routing.CheckSite's form. Nothing routes by it yet.
	Site string
	// CellDialFrom, an IP address of this host, is where the connections
	// to the cells leave from (a host on several networks: its site's);
	// "" lets the system choose.
	CellDialFrom string
	// TLSCertFile and TLSKeyFile are the partners' listener's certificate
	// and key (PEM), re-read every few seconds so that a renewed
	// certificate is served without a restart. Required: partners' calls
	// carry API keys, which never cross the network in the clear.
	TLSCertFile, TLSKeyFile string
	// CellTLS is the GTR's identity towards the cells (hop.GTR): its client
	// certificate and key, and the CA the cells' certificates chain to.
	// Empty: plaintext to the cells, which then serve anyone (benchmarks).
	CellTLS tlsconf.Files
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
	if c.HealthListen != "" && (sameAddr(c.HealthListen, c.Listen) || sameAddr(c.HealthListen, c.AdminListen)) {
		return errors.New("gtr: the health listener must be an address of its own")
	}
	if c.RESTListen != "" && (sameAddr(c.RESTListen, c.Listen) || sameAddr(c.RESTListen, c.AdminListen) || sameAddr(c.RESTListen, c.HealthListen)) {
		return errors.New("gtr: the REST listener must be an address of its own")
	}
	if c.AdminListen != "" && sameAddr(c.AdminListen, c.Listen) {
		return errors.New("gtr: the admin listener must not be the partners' address")
	}
	if c.TLSCertFile == "" || c.TLSKeyFile == "" {
		return errors.New("gtr: the partners' listener needs a TLS certificate and key (tls-cert, tls-key)")
	}
	if (c.AdminTLSCertFile == "") != (c.AdminTLSKeyFile == "") {
		return errors.New("gtr: the admin listener's certificate needs both its files (admin-tls-cert, admin-tls-key), or neither for the partners'")
	}
	if c.CellDialFrom != "" && net.ParseIP(c.CellDialFrom) == nil {
		return fmt.Errorf("gtr: cell-dial-from %q: not an IP address", c.CellDialFrom)
	}
	if err := routing.CheckSite(c.Site); err != nil {
		return fmt.Errorf("gtr: site: %v", err)
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

// sameAddr reports whether listen addresses a and b are one: two with port
// 0 are not, since each listener is given a port of its own (tests, which
// read the ports from Addr and the others).
func sameAddr(a, b string) bool {
	if a != b {
		return false
	}
	_, port, err := net.SplitHostPort(a)
	return err != nil || port != "0"
}

// GTR is one replica of the Global Transaction Router. Its life is New,
// Start and Shutdown, each called once, in that order, from one goroutine
// (nats-server's Server): New builds, Start connects, listens and serves
// in the background, Shutdown drains and releases. Addr, AdminAddr and
// HealthAddr are safe once Start has returned nil; Done and Err at any
// time, from any goroutine.
type GTR struct {
	cfg Config
	// drift records whether the streams and buckets found in NATS differ
	// from this replica's configuration (cellpay_nats_config_differs).
	drift jsconf.Drift
	// hs is the one health server: the partners', the admin and the health
	// listeners all answer from it, so all go NOT_SERVING at once.
	hs *grpchealth.Server
	// recent is the console's ring of this replica's re-routes and
	// ejections, fed by the monitor and the payments' metrics.
	recent *console.Recent
	// refusals keeps this replica's recent refusals by request ID;
	// replicas asks every replica (its refusals, its recent events).
	refusals *refusals.Ring
	replicas *replicas.Replicas
	// metrics are the GTR's instruments, made with the partners' server.
	metrics       *telemetry.GTR
	cellLimits    *admission.Cells
	partnerLimits *admission.Partners

	// Set by Start's steps (start.go), in this order, and only read once
	// Start has returned.
	cellDial      func(cellID string) grpc.DialOption
	cellFrom      []grpc.DialOption // where connections to cells leave from (CellDialFrom)
	mon           *health.Monitor
	st            *state.State
	tel           *telemetry.Telemetry
	store         *routesync.Syncer
	partners      *partnerstate.Store
	pool          *cellconn.Pool
	tlsCfg        *tls.Config // the partners' listener's, which the admin listener shares
	lis, adminLis net.Listener
	hp            *healthport.Server
	servers       []*grpc.Server // each serves listeners[i]
	listeners     []net.Listener
	// rest serves the REST API on restLis (nil without RESTListen); it
	// stops before servers, one of which its calls go through.
	rest    *http.Server
	restLis net.Listener
	// rel is what Start acquired, released in the reverse order by
	// Shutdown or by a Start that fails.
	rel lifecycle.Releases

	serving  sync.WaitGroup // the servers' Serve goroutines
	stopping atomic.Bool    // Shutdown has begun: a Serve that returns has not failed

	life lifecycle.Life
}

// ErrStarted is Start's answer when it was called before, or after
// Shutdown: a GTR is started at most once.
var ErrStarted = errors.New("gtr: Start called twice, or after Shutdown")

// New validates cfg (filling in its defaults) and builds what needs no
// I/O: the health server, the admission limits, the console's ring. It
// reads no file, dials nothing, listens nowhere and starts no goroutine;
// a GTR that is never started needs no Shutdown.
func New(cfg Config) (*GTR, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &GTR{
		cfg:      cfg,
		hs:       grpchealth.NewServer(),
		recent:   console.NewRecent(nil),
		refusals: refusals.New(nil),
		cellLimits: admission.NewCells(admission.CellConfig{Disabled: cfg.NoAdmission, Baseline: cfg.AdmissionBaseline,
			ShedBaseline: cfg.AdmissionShedBaseline, Tolerance: cfg.AdmissionTolerance}),
		partnerLimits: admission.NewPartners(cfg.NoAdmission, nil),
	}, nil
}

// Start reads the certificates, routing table and registries, connects to
// NATS (when configured), binds every listener and starts serving in the
// background, then returns: once it returns nil, every listener accepts
// (Addr and the others name them) and Done tells when serving fails. On
// error it has released whatever it had started, nothing keeps running,
// and Done is closed with Err the same error. ctx bounds starting only:
// its end after Start has returned does not stop the GTR; Shutdown does.
func (g *GTR) Start(ctx context.Context) error {
	if !g.life.Begin() {
		return ErrStarted
	}
	for _, step := range []func(context.Context) error{
		g.startRouting,    // cells' TLS, health monitor, routing state
		g.startTelemetry,  // metrics, traces
		g.startStores,     // routing configuration, partner registry, cells' reference data versions
		g.startFollowing,  // connections to the cells, and what keeps state and monitor in step
		g.startPartners,   // the Payments API's server and listener
		g.startReplicas,   // answering the other replicas' questions, and asking them
		g.startAdmin,      // the Admin API's and the console's listener
		g.startHealthPort, // plaintext health for probes
	} {
		if err := step(ctx); err != nil {
			g.rel.Release(context.WithoutCancel(ctx))
			g.life.Failed(err)
			return err
		}
	}
	g.life.Serving()
	g.serve()
	return nil
}

// Shutdown stops the GTR: health goes NOT_SERVING on every listener, the
// servers stop taking requests and finish the ones in flight, within
// ShutdownTimeout and ctx, after which they stop hard; then everything
// Start acquired is released in the reverse order. It returns ctx's error
// (wrapped) if ctx ended before the requests in flight finished, and nil
// otherwise, ShutdownTimeout's cut included. Call it once Start has
// returned (or instead of Start); later calls wait for the first and
// return what it did. Before Start, or after a Start that failed, there
// is nothing to stop.
func (g *GTR) Shutdown(ctx context.Context) error {
	return g.life.Shutdown(func() error { return g.shutdown(ctx) })
}

func (g *GTR) shutdown(ctx context.Context) error {
	if !g.life.Stop() {
		g.life.End(nil)
		return nil
	}
	g.stopping.Store(true)
	err := g.stopServers(ctx)
	g.serving.Wait()
	g.cfg.Log.Info("gtr stopped")
	g.rel.Release(ctx)
	g.life.End(nil)
	return err
}

// stopServers turns health NOT_SERVING, then stops the servers gracefully:
// the requests in flight finish, within ShutdownTimeout and ctx, and then
// the servers stop hard.
func (g *GTR) stopServers(ctx context.Context) error {
	g.hs.Shutdown()
	done := make(chan struct{})
	go func() {
		if g.rest != nil {
			_ = g.rest.Shutdown(ctx) // its calls in flight first: they go through a server below
		}
		for _, s := range g.servers {
			s.GracefulStop()
		}
		close(done)
	}()
	hard := time.NewTimer(g.cfg.ShutdownTimeout)
	defer hard.Stop()
	var err error
	select {
	case <-done:
		return nil
	case <-hard.C:
	case <-ctx.Done():
		err = fmt.Errorf("gtr: shutdown: %w", ctx.Err())
	}
	if g.rest != nil {
		_ = g.rest.Close()
	}
	for _, s := range g.servers {
		s.Stop()
	}
	<-done
	return err
}

// serve starts each server on its listener; a server that stops serving
// before Shutdown ends serving (Done, Err).
func (g *GTR) serve() {
	for i, s := range g.servers {
		g.serving.Go(func() {
			if err := s.Serve(g.listeners[i]); err != nil && !g.stopping.Load() {
				g.life.End(fmt.Errorf("gtr: serve: %w", err))
			}
		})
	}
	if g.rest != nil {
		g.serving.Go(func() {
			if err := g.rest.Serve(g.restLis); err != nil && !errors.Is(err, http.ErrServerClosed) && !g.stopping.Load() {
				g.life.End(fmt.Errorf("gtr: serve REST: %w", err))
			}
		})
	}
	tbl := g.st.Table()
	g.cfg.Log.Info("gtr listening", "addr", g.lis.Addr().String(), "rest_addr", g.cfg.RESTListen, "admin_addr", g.cfg.AdminListen, "replica", g.cfg.ReplicaID, "site", g.cfg.Site,
		"config_store", g.store.Status(), "table_version", tbl.Version(), "cells", len(tbl.Spec().Cells))
}

// Done is closed when the GTR no longer serves: Start failed, a server
// stopped serving on its own (Err says why; call Shutdown to release the
// rest), or Shutdown has stopped it.
func (g *GTR) Done() <-chan struct{} { return g.life.Done() }

// Err is why serving ended: Start's error, or a server's; nil while the
// GTR serves and after a Shutdown that stopped a GTR serving fine.
func (g *GTR) Err() error { return g.life.Err() }

// Addr is the partners' listener's address (the port the system chose, if
// Listen's was 0); nil before Start.
func (g *GTR) Addr() net.Addr { return addrOf(g.lis) }

// RESTAddr is the REST listener's address; nil before Start and without
// RESTListen.
func (g *GTR) RESTAddr() net.Addr { return addrOf(g.restLis) }

// AdminAddr is the operators' listener's address; nil before Start and
// without AdminListen.
func (g *GTR) AdminAddr() net.Addr { return addrOf(g.adminLis) }

// HealthAddr is the health port's address; nil before Start and without
// HealthListen.
func (g *GTR) HealthAddr() net.Addr {
	if g.hp == nil {
		return nil
	}
	return g.hp.Addr()
}

func addrOf(l net.Listener) net.Addr {
	if l == nil {
		return nil
	}
	return l.Addr()
}
