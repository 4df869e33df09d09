// Package telemetry publishes one process's metrics and traces: an
// OpenTelemetry MeterProvider exported for a Prometheus scrape at /metrics
// (its own registry, never the global one), a TracerProvider that exports
// over OTLP gRPC only when OTEL_EXPORTER_OTLP_ENDPOINT is set, W3C
// trace-context propagation, and gRPC stats handlers that give servers and
// clients RPC metrics and spans.
//
// What it must never do: block a transaction, or carry a card number.
// Instruments record into memory and are read by the scrape; spans go
// through a batch processor that drops when its queue is full; without an
// endpoint the tracer provider is a no-op. The gRPC handlers record neither
// message events nor payloads, so no request field (a PAN) reaches a span,
// and the metric attributes of the domain instruments are small closed sets
// (statuses, codes, cell IDs).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
)

// EndpointEnv turns trace export on: the OTLP collector's address, read
// (with the other OTEL_EXPORTER_OTLP_* variables) by the OTLP exporter.
const EndpointEnv = "OTEL_EXPORTER_OTLP_ENDPOINT"

// Resource attribute keys, also the constant labels of every metric.
const (
	keyService  = "service.name"
	keyInstance = "service.instance.id"
)

// Config configures Setup.
type Config struct {
	// Service names the binary ("gtr", "cell", "issuersim"). Required.
	Service string
	// Instance names this process among its service's, uniquely (OTel's
	// service.instance.id): the cell instance's ID (the cell's ID is a
	// label), the GTR replica ID. Required.
	Instance string
	// Labels are further resource attributes set as constant labels on
	// every metric, e.g. {"cell": "cell-a"}. Optional.
	Labels map[string]string
	// MetricsListen, if set, serves /metrics there (loopback in local runs).
	MetricsListen string
	Log           *slog.Logger // default slog.Default()
}

func (c *Config) validate() error {
	if c.Service == "" || c.Instance == "" {
		return errors.New("telemetry: Service and Instance are required")
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// Telemetry is one process's meter and tracer providers and its /metrics
// listener. Its methods are safe for concurrent use.
type Telemetry struct {
	cfg    Config
	mp     *sdkmetric.MeterProvider
	tp     trace.TracerProvider
	stopTP func(context.Context) error
	prop   propagation.TextMapPropagator
	srv    *http.Server
	lis    net.Listener
	served chan struct{} // closed when the metrics server has stopped
	// stopProfile ends the CPU profile ProfileDirEnv asked for.
	stopProfile func() error
}

// Setup builds the providers and, with MetricsListen, starts serving
// /metrics. The caller calls Shutdown.
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	attrs := []attribute.KeyValue{attribute.String(keyService, cfg.Service), attribute.String(keyInstance, cfg.Instance)}
	keys := []attribute.Key{keyService, keyInstance}
	for k, v := range cfg.Labels {
		attrs = append(attrs, attribute.String(k, v))
		keys = append(keys, attribute.Key(k))
	}
	res := resource.NewSchemaless(attrs...)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithoutScopeInfo(),
		otelprom.WithResourceAsConstantLabels(attribute.NewAllowKeysFilter(keys...)),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	t := &Telemetry{
		cfg:  cfg,
		mp:   sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res)),
		prop: propagation.TraceContext{},
	}
	if err := newCertExpiries(t.mp.Meter("cellpay/tls")); err != nil {
		_ = t.mp.Shutdown(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	if t.stopProfile, err = startProfile(cfg); err != nil {
		_ = t.mp.Shutdown(context.WithoutCancel(ctx))
		return nil, err
	}
	if err := t.setupTracing(ctx, res); err != nil {
		_ = t.mp.Shutdown(context.WithoutCancel(ctx))
		_ = t.stopProfile()
		return nil, err
	}
	if cfg.MetricsListen != "" {
		if err := t.serve(reg); err != nil {
			_ = t.stopTP(context.WithoutCancel(ctx))
			_ = t.mp.Shutdown(context.WithoutCancel(ctx))
			_ = t.stopProfile()
			return nil, err
		}
	}
	return t, nil
}

// setupTracing exports spans over OTLP gRPC when an endpoint is configured,
// through a batch processor that drops rather than blocks; otherwise it
// installs a no-op provider, so nothing is recorded or sent.
func (t *Telemetry) setupTracing(ctx context.Context, res *resource.Resource) error {
	if os.Getenv(EndpointEnv) == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		t.tp = noop.NewTracerProvider()
		t.stopTP = func(context.Context) error { return nil }
		return nil
	}
	// The client connects lazily: an absent collector costs dropped spans,
	// never a wait at start or on a transaction.
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return fmt.Errorf("telemetry: otlp trace exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t.tp, t.stopTP = tp, tp.Shutdown
	t.cfg.Log.Info("exporting traces over OTLP", "endpoint", os.Getenv(EndpointEnv))
	return nil
}

func (t *Telemetry) serve(reg *prometheus.Registry) error {
	lis, err := net.Listen("tcp", t.cfg.MetricsListen)
	if err != nil {
		return fmt.Errorf("telemetry: metrics listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Timeout:             5 * time.Second,
		MaxRequestsInFlight: 4,
		ErrorLog:            slog.NewLogLogger(t.cfg.Log.Handler(), slog.LevelWarn),
	}))
	t.lis = lis
	t.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       time.Minute,
	}
	t.served = make(chan struct{})
	go func() {
		defer close(t.served)
		if err := t.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.cfg.Log.Warn("metrics server stopped", "error", err)
		}
	}()
	t.cfg.Log.Info("serving metrics", "addr", lis.Addr().String(), "path", "/metrics")
	return nil
}

// MetricsAddr is the address /metrics is served on, "" when it is not.
func (t *Telemetry) MetricsAddr() string {
	if t.lis == nil {
		return ""
	}
	return t.lis.Addr().String()
}

// Meter returns a meter of the process's provider.
func (t *Telemetry) Meter(name string) metric.Meter { return t.mp.Meter(name) }

// MeterProvider is the process's meter provider.
func (t *Telemetry) MeterProvider() metric.MeterProvider { return t.mp }

// TracerProvider is the process's tracer provider: a no-op one unless
// OTEL_EXPORTER_OTLP_ENDPOINT was set at Setup.
func (t *Telemetry) TracerProvider() trace.TracerProvider { return t.tp }

// Propagator is W3C trace context.
func (t *Telemetry) Propagator() propagation.TextMapPropagator { return t.prop }

// handlerOptions: this process's providers, W3C trace context, no message
// events (otelgrpc's default, kept explicit by never passing
// WithMessageEvents), and no spans for health checks, which run several
// times a second per cell.
func (t *Telemetry) handlerOptions(extra ...otelgrpc.Option) []otelgrpc.Option {
	return append([]otelgrpc.Option{
		otelgrpc.WithMeterProvider(t.mp),
		otelgrpc.WithTracerProvider(t.tp),
		otelgrpc.WithPropagators(t.prop),
		otelgrpc.WithFilter(filters.Not(filters.HealthCheck())),
	}, extra...)
}

// ServerOptions instrument a gRPC server inside the platform: RPC metrics,
// and spans that continue the caller's trace.
func (t *Telemetry) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(t.handlerOptions()...))}
}

// PublicServerOptions instrument a server that faces partners: a
// partner's trace context is linked, not continued, so that partners cannot
// decide what this process samples.
func (t *Telemetry) PublicServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(t.handlerOptions(otelgrpc.WithPublicEndpoint())...))}
}

// DialOptions instrument a gRPC client: RPC metrics, and spans whose
// context travels to the server.
func (t *Telemetry) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStatsHandler(otelgrpc.NewClientHandler(t.handlerOptions()...))}
}

// Shutdown stops serving /metrics, flushes spans and stops the providers,
// bounded by ctx.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	if t.srv != nil {
		if err := t.srv.Shutdown(ctx); err != nil {
			_ = t.srv.Close()
			errs = append(errs, err)
		}
		<-t.served
	}
	errs = append(errs, t.stopTP(ctx), t.mp.Shutdown(ctx), t.stopProfile())
	return errors.Join(errs...)
}

// Close is Shutdown for a process on its way out: bounded to 5 s, and not
// cut short by ctx having ended (which is usually why the process stops).
func (t *Telemetry) Close(ctx context.Context) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = t.Shutdown(sctx)
}
