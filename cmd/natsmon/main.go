// Command natsmon polls nats-server HTTP monitoring endpoints and serves
// their JetStream and health figures as Prometheus metrics (package
// cmd/natsmon/internal/natsmon), on /metrics, with /healthz for probes.
//
// Flags, each with an environment fallback:
//
//	-listen    NATSMON_LISTEN    address of /metrics and /healthz (default 127.0.0.1:7777)
//	-servers   NATSMON_SERVERS   servers to poll, comma-separated: name=http://host:port, or a URL alone (named by its host:port)
//	-interval  NATSMON_INTERVAL  time between polls (default 5s)
//	-timeout   NATSMON_TIMEOUT   bound of each request (default 2s)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cellpay/cellpay/cmd/natsmon/internal/natsmon"
	"github.com/cellpay/cellpay/internal/buildinfo"
	"github.com/cellpay/cellpay/internal/logging"
)

func main() {
	log, closeLog := logging.New(os.Stderr)
	listen := flag.String("listen", env("NATSMON_LISTEN", "127.0.0.1:7777"), "address of /metrics and /healthz (env NATSMON_LISTEN)")
	servers := flag.String("servers", env("NATSMON_SERVERS", ""), "servers to poll, comma-separated, each name=http://host:port or a URL alone (env NATSMON_SERVERS)")
	interval := flag.Duration("interval", envDuration("NATSMON_INTERVAL", natsmon.DefaultInterval), "time between polls (env NATSMON_INTERVAL)")
	timeout := flag.Duration("timeout", envDuration("NATSMON_TIMEOUT", natsmon.DefaultTimeout), "bound of each request to a server (env NATSMON_TIMEOUT)")
	version := flag.Bool("version", false, buildinfo.FlagUsage)
	flag.CommandLine.SetOutput(buildinfo.UsageOutput(os.Args[1:], os.Stdout, os.Stderr))
	flag.Parse()
	if *version {
		fmt.Println(buildinfo.Read("natsmon"))
		closeLog()
		return
	}
	srvs, err := parseServers(*servers)
	if err == nil {
		var cfg = natsmon.Config{Servers: srvs, Interval: *interval, Timeout: min(*timeout, *interval), Log: log}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = run(ctx, log, *listen, cfg)
		stop()
	}
	if err != nil {
		log.Error("natsmon failed", "err", err)
	}
	closeLog()
	if err != nil {
		os.Exit(1)
	}
}

// run serves the monitor's metrics on addr until ctx ends.
func run(ctx context.Context, log *slog.Logger, addr string, cfg natsmon.Config) error {
	m, err := natsmon.New(cfg)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(m); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Timeout: 5 * time.Second, ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	m.Start(ctx)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	log.Info("natsmon listening", "addr", lis.Addr().String(), "servers", len(cfg.Servers))
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return errors.Join(err, srv.Shutdown(sctx), m.Shutdown(sctx))
}

// parseServers reads -servers: name=URL or a URL alone, comma-separated.
func parseServers(s string) ([]natsmon.Server, error) {
	var out []natsmon.Server
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		name, u, ok := strings.Cut(f, "=")
		if !ok {
			u = f
			p, err := url.Parse(u)
			if err != nil {
				return nil, fmt.Errorf("-servers: %q: %w", f, err)
			}
			name = p.Host
		}
		out = append(out, natsmon.Server{Name: name, URL: strings.TrimSuffix(u, "/")})
	}
	if len(out) == 0 {
		return nil, errors.New("-servers (NATSMON_SERVERS) is required")
	}
	return out, nil
}

func env(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

func envDuration(key string, def time.Duration) time.Duration {
	if v := os.Getenv(key); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}
