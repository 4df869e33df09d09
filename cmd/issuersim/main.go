// Command issuersim serves the card issuer simulator (package
// internal/dev/issuersim) over gRPC, with gRPC health and reflection.
//
// Flags, each with an environment fallback:
//
//	-listen          ISSUERSIM_LISTEN          address to serve on (default 127.0.0.1:7090)
//	-metrics-listen  ISSUERSIM_METRICS_LISTEN  address for Prometheus /metrics (default: none)
//	-tls-cert        ISSUERSIM_TLS_CERT        its certificate (identity spiffe://cellpay.internal/issuer), PEM
//	-tls-key         ISSUERSIM_TLS_KEY         its private key, PEM
//	-tls-ca          ISSUERSIM_TLS_CA          CA that callers' certificates must chain to
//	-health-listen   ISSUERSIM_HEALTH_LISTEN   address serving gRPC health alone, in plaintext (default: none)
//	-insecure-plaintext  ISSUERSIM_INSECURE_PLAINTEXT=1  run without TLS files: plaintext to anyone
//
// With the three TLS files it serves mutual TLS only, and package hop's
// IssuerPolicy: Authorize, Adjust and Inquire for cells, Effects and SetFaults for
// operators' tools. Without them it refuses to start, unless
// -insecure-plaintext chose plaintext to anyone (benchmarks, local tests).
// The health port
// (package healthport) is for probes that cannot present a client
// certificate, kubelet's: it answers health and nothing else.
//
// Traces are exported over OTLP only when OTEL_EXPORTER_OTLP_ENDPOINT is set.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/cellpay/cellpay/internal/buildinfo"
	"github.com/cellpay/cellpay/internal/dev/issuersim"
	"github.com/cellpay/cellpay/internal/grpclimits"
	"github.com/cellpay/cellpay/internal/healthport"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/logging"
	"github.com/cellpay/cellpay/internal/telemetry"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/issuerproto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// shutdownGrace is how long in-flight calls get to finish on SIGINT or
// SIGTERM before the server stops hard (a hung Authorize never finishes).
const shutdownGrace = 10 * time.Second

func main() {
	log, closeLog := logging.New(os.Stderr)
	listen := flag.String("listen", envOr("ISSUERSIM_LISTEN", "127.0.0.1:7090"),
		"address to serve gRPC on (env ISSUERSIM_LISTEN)")
	metricsListen := flag.String("metrics-listen", envOr("ISSUERSIM_METRICS_LISTEN", ""),
		"address for Prometheus /metrics, e.g. 127.0.0.1:9090 (env ISSUERSIM_METRICS_LISTEN); \"\" for none")
	var files tlsconf.Files
	flag.StringVar(&files.Cert, "tls-cert", envOr("ISSUERSIM_TLS_CERT", ""), "certificate, PEM, reloaded when it changes (env ISSUERSIM_TLS_CERT); required unless -insecure-plaintext")
	flag.StringVar(&files.Key, "tls-key", envOr("ISSUERSIM_TLS_KEY", ""), "private key, PEM (env ISSUERSIM_TLS_KEY)")
	flag.StringVar(&files.CA, "tls-ca", envOr("ISSUERSIM_TLS_CA", ""), "CA that callers' certificates must chain to (env ISSUERSIM_TLS_CA)")
	healthListen := flag.String("health-listen", envOr("ISSUERSIM_HEALTH_LISTEN", ""),
		"address serving gRPC health alone, in plaintext, for probes that cannot present a client certificate (kubelet's), e.g. :7091; \"\" for none (env ISSUERSIM_HEALTH_LISTEN)")
	insecurePlaintext := flag.Bool("insecure-plaintext", envOr("ISSUERSIM_INSECURE_PLAINTEXT", "") == "1",
		"without TLS files, serve plaintext to anyone, no authorization: benchmarks and local tests only (env ISSUERSIM_INSECURE_PLAINTEXT=1)")
	version := flag.Bool("version", false, buildinfo.FlagUsage)
	flag.CommandLine.SetOutput(buildinfo.UsageOutput(os.Args[1:], os.Stdout, os.Stderr))
	flag.Parse()
	if *version {
		fmt.Println(buildinfo.Read("issuersim"))
		closeLog()
		return
	}
	if err := hop.RequireTLS(files, *insecurePlaintext, "-tls-cert, -tls-key and -tls-ca (ISSUERSIM_TLS_CERT, ISSUERSIM_TLS_KEY, ISSUERSIM_TLS_CA)"); err != nil {
		fmt.Fprintln(os.Stderr, "issuersim:", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := serve(ctx, log, *listen, *metricsListen, *healthListen, files)
	stop()
	if err != nil {
		log.Error("issuersim failed", "err", err)
	}
	closeLog()
	if err != nil {
		os.Exit(1)
	}
}

// run serves until ctx ends, then stops gracefully within shutdownGrace.
func run(ctx context.Context, log *slog.Logger, addr string) error {
	return serve(ctx, log, addr, "", "", tlsconf.Files{})
}

// serve is run with Prometheus metrics at metricsAddr ("" for none), a
// health port at healthAddr ("" for none) and mutual TLS with files (none
// for plaintext).
func serve(ctx context.Context, log *slog.Logger, addr, metricsAddr, healthAddr string, files tlsconf.Files) error {
	tel, err := telemetry.Setup(ctx, telemetry.Config{Service: "issuersim", Instance: addr, MetricsListen: metricsAddr, Log: log})
	if err != nil {
		return err
	}
	defer tel.Close(ctx)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	hopOpts, stopHop, err := hop.ServerOptions(files, hop.IssuerPolicy)
	if err != nil {
		lis.Close()
		return err
	}
	defer stopHop()
	gs := grpc.NewServer(slices.Concat(grpclimits.Internal.ServerOptions(), tel.ServerOptions(), hopOpts)...)
	issuerproto.RegisterIssuerServer(gs, issuersim.New(issuersim.Config{Seed: 1, Logger: log}))
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(issuerproto.Issuer_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	if healthAddr != "" {
		hp, err := healthport.Listen(healthAddr, hs)
		if err != nil {
			lis.Close()
			return err
		}
		defer hp.Stop() // after hs.Shutdown: probes see NOT_SERVING while stopping
		log.Info("issuersim health port listening", "addr", hp.Addr().String())
	}

	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(lis) }()
	log.Info("issuersim listening", "addr", lis.Addr().String())

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("issuersim stopping")
	hs.Shutdown()
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(shutdownGrace):
		log.Warn("graceful stop timed out; stopping", "grace", shutdownGrace.String())
		gs.Stop()
		<-stopped
	}
	return nil
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}
