// Command issuersim serves the card issuer simulator (package
// internal/issuersim) over gRPC, with gRPC health and reflection.
//
// Flags, each with an environment fallback:
//
//	-listen          ISSUERSIM_LISTEN          address to serve on (default 127.0.0.1:7090)
//	-metrics-listen  ISSUERSIM_METRICS_LISTEN  address for Prometheus /metrics (default: none)
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
	"syscall"
	"time"

	"github.com/cellpay/cellpay/internal/grpclimits"
	"github.com/cellpay/cellpay/internal/issuersim"
	"github.com/cellpay/cellpay/internal/logging"
	"github.com/cellpay/cellpay/internal/telemetry"
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
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := serve(ctx, log, *listen, *metricsListen)
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
func run(ctx context.Context, log *slog.Logger, addr string) error { return serve(ctx, log, addr, "") }

// serve is run with Prometheus metrics at metricsAddr ("" for none).
func serve(ctx context.Context, log *slog.Logger, addr, metricsAddr string) error {
	tel, err := telemetry.Setup(ctx, telemetry.Config{Service: "issuersim", Instance: addr, MetricsListen: metricsAddr, Log: log})
	if err != nil {
		return err
	}
	defer tel.Close(ctx)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	gs := grpc.NewServer(append(grpclimits.Internal.ServerOptions(), tel.ServerOptions()...)...)
	issuerproto.RegisterIssuerServer(gs, issuersim.New(issuersim.Config{Seed: 1, Logger: log}))
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(issuerproto.Issuer_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)

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
