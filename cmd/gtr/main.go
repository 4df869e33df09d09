// Command gtr runs the Global Transaction Router: the partners' Payments
// API, which routes every transaction to a cell, and the operators' Admin
// API on its own listener.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/cellpay/cellpay/cmd/gtr/internal/gtr"
	"github.com/cellpay/cellpay/internal/buildinfo"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/logging"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// envInt is env's integer, or def when it is unset; a value that is not
// a number stops the GTR, naming the variable.
func envInt(name string, def int) int {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gtr: %s=%q is not a number\n", name, v)
		os.Exit(2)
	}
	return n
}

// envBool is env's boolean (strconv.ParseBool: 1, true, 0, false...), or
// def when it is unset; any other value stops the GTR, naming the
// variable.
func envBool(name string, def bool) bool {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gtr: %s=%q is not true or false\n", name, v)
		os.Exit(2)
	}
	return b
}

func main() {
	cfg, logBuffer, err := configure()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gtr:", err)
		os.Exit(2)
	}
	log, closeLog := logging.NewSize(os.Stderr, logBuffer)
	cfg.Log = log.With("replica", cfg.ReplicaID)
	err = serve(cfg)
	closeLog()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gtr:", err)
		os.Exit(1)
	}
}

// serve starts the GTR and serves until SIGINT or SIGTERM, or until it
// can no longer serve, then shuts it down (bounded by its
// ShutdownTimeout).
func serve(cfg gtr.Config) error {
	g, err := gtr.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := g.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-g.Done():
	}
	return errors.Join(g.Err(), g.Shutdown(context.Background()))
}

// options are the flags that are not a field of gtr.Config.
type options struct {
	tokenFile, natsCA string
	insecurePlaintext bool
	logBuffer         int
	version           bool
	throttleLoopback  bool
}

// configure reads the flags and the environment into the GTR's Config,
// and the asynchronous logger's buffer; an error is the operator's to fix.
func configure() (gtr.Config, int, error) {
	var cfg gtr.Config
	var o options
	defineFlags(&cfg, &o)
	flag.CommandLine.SetOutput(buildinfo.UsageOutput(os.Args[1:], os.Stdout, os.Stderr))
	flag.Parse()
	if o.version {
		fmt.Println(buildinfo.Read("gtr"))
		os.Exit(0)
	}
	if o.natsCA != "" {
		cfg.NATSTLS = tlsconf.Files{Cert: cmp.Or(cfg.CellTLS.Cert, cfg.TLSCertFile), Key: cmp.Or(cfg.CellTLS.Key, cfg.TLSKeyFile), CA: o.natsCA}
	}
	if cfg.CellTLS.CA != "" && cfg.CellTLS.Cert == "" && cfg.CellTLS.Key == "" {
		cfg.CellTLS.Cert, cfg.CellTLS.Key = cfg.TLSCertFile, cfg.TLSKeyFile
	}
	if err := hop.RequireTLS(cfg.CellTLS, o.insecurePlaintext, "-cell-ca (GTR_CELL_CA)"); err != nil {
		return cfg, 0, err
	}
	if err := hop.RequireNATSTLS(cfg.NATSURL, o.natsCA, o.insecurePlaintext, "-nats-ca (GTR_NATS_CA)"); err != nil {
		return cfg, 0, err
	}
	tok, err := adminToken(o.tokenFile)
	if err != nil {
		return cfg, 0, err
	}
	cfg.AdminToken = tok
	cfg.AdminExemptLoopback = !o.throttleLoopback
	return cfg, o.logBuffer, nil
}

// defineFlags defines the gtr command's flags, each with its environment
// variable as the default, into cfg and o.
func defineFlags(cfg *gtr.Config, o *options) {
	host, _ := os.Hostname()
	flag.BoolVar(&o.version, "version", false, buildinfo.FlagUsage)
	flag.StringVar(&cfg.Listen, "listen", env("GTR_LISTEN", "127.0.0.1:7070"), "partners' API address (env GTR_LISTEN)")
	flag.StringVar(&cfg.RESTListen, "rest-listen", env("GTR_REST_LISTEN", ""), "partners' API as REST/JSON over HTTPS, with the -tls-cert certificate; empty for none (env GTR_REST_LISTEN)")
	flag.StringVar(&cfg.AdminListen, "admin-listen", env("GTR_ADMIN_LISTEN", "127.0.0.1:7071"), "admin API and console address, TLS with the -admin-tls-cert certificate (env GTR_ADMIN_LISTEN)")
	flag.StringVar(&cfg.AdminTLSCertFile, "admin-tls-cert", env("GTR_ADMIN_TLS_CERT", ""), "admin listener's certificate, PEM, reloaded when it changes: the GTR's identity (spiffe://cellpay.internal/gtr), which gtrctl pins (env GTR_ADMIN_TLS_CERT); default -tls-cert")
	flag.StringVar(&cfg.AdminTLSKeyFile, "admin-tls-key", env("GTR_ADMIN_TLS_KEY", ""), "its private key, PEM (env GTR_ADMIN_TLS_KEY); default -tls-key")
	flag.BoolVar(&o.throttleLoopback, "admin-throttle-loopback", envBool("GTR_ADMIN_THROTTLE_LOOPBACK", true), "refuse for a while an address of this host (loopback) after too many failed admin or console logins, as any other; false only audits them: a machine whose tests share 127.0.0.1, never where kubectl port-forward arrives from loopback (env GTR_ADMIN_THROTTLE_LOOPBACK)")
	flag.StringVar(&cfg.HealthListen, "health-listen", env("GTR_HEALTH_LISTEN", ""), "address serving gRPC health alone, in plaintext, for probes that cannot speak TLS such as kubelet's (env GTR_HEALTH_LISTEN); \"\" for none")
	flag.StringVar(&cfg.ConfigFile, "config", env("GTR_CONFIG", "config/gtr.yaml"), "routing table file (env GTR_CONFIG)")
	flag.StringVar(&cfg.OperatorsFile, "operators", env("GTR_OPERATORS", ""), "operators file (YAML: id, role viewer|operator|admin, token_sha256 of each operator's cpo_ token) of the admin API (env GTR_OPERATORS); without it or a legacy token the admin API refuses every call")
	flag.StringVar(&o.tokenFile, "admin-token-file", env("GTR_ADMIN_TOKEN_FILE", ""), "legacy: file holding one shared admin token, which acts as operator legacy-admin with role admin (env GTR_ADMIN_TOKEN_FILE; or the token itself in env GTR_ADMIN_TOKEN)")
	flag.StringVar(&cfg.AuditFile, "audit-file", env("GTR_AUDIT_FILE", ""), "the admin audit log's local spool while the CELLPAY_AUDIT stream is unreachable, or the audit log itself without NATS (env GTR_AUDIT_FILE); default <state-file>.audit.jsonl")
	flag.IntVar(&cfg.NATSReplicas, "nats-replicas", envInt("GTR_NATS_REPLICAS", 3), "replicas of what this GTR creates in NATS where nobody has yet (the routing and partners' bucket, the CELLPAY_AUDIT stream): 3 on a three-server cluster, 1 on a lone server; what exists is kept as it is, and a difference logged and exported as cellpay_nats_config_differs (env GTR_NATS_REPLICAS)")
	flag.IntVar(&o.logBuffer, "log-buffer", envInt("GTR_LOG_BUFFER", logging.DefaultBuffer), "records the asynchronous logger holds before it drops (env GTR_LOG_BUFFER); a test and diagnostic knob: tests saturate the logger with 1")
	flag.StringVar(&cfg.NATSURL, "nats-url", env("GTR_NATS_URL", ""), "NATS server holding the shared routing configuration and carrying the cells' reference data status (env GTR_NATS_URL); empty: standalone")
	flag.StringVar(&cfg.NATSBucket, "nats-bucket", env("GTR_NATS_BUCKET", "cellpay_gtr"), "NATS KV bucket of the routing configuration (env GTR_NATS_BUCKET)")
	flag.StringVar(&cfg.StateFile, "state-file", env("GTR_STATE_FILE", ""), "file keeping the last-known routing configuration, read at start when present (env GTR_STATE_FILE)")
	flag.StringVar(&cfg.PartnersFile, "partners", env("GTR_PARTNERS", ""), "partner registry file (YAML) seeding an empty NATS KV bucket (env GTR_PARTNERS); empty: no partners, every partner call is refused")
	flag.StringVar(&cfg.PartnersStateFile, "partners-state-file", env("GTR_PARTNERS_STATE_FILE", ""), "file keeping the last-known partner registry, read at start when present (env GTR_PARTNERS_STATE_FILE)")
	flag.StringVar(&cfg.MetricsListen, "metrics-listen", env("GTR_METRICS_LISTEN", ""), "address for Prometheus /metrics, e.g. 127.0.0.1:9070 (env GTR_METRICS_LISTEN); \"\" for none. Traces go over OTLP only when OTEL_EXPORTER_OTLP_ENDPOINT is set")
	flag.StringVar(&cfg.TLSCertFile, "tls-cert", env("GTR_TLS_CERT", ""), "partners' listener certificate, PEM, reloaded when it changes (env GTR_TLS_CERT); required")
	flag.StringVar(&cfg.TLSKeyFile, "tls-key", env("GTR_TLS_KEY", ""), "partners' listener private key, PEM (env GTR_TLS_KEY); required")
	flag.StringVar(&cfg.CellTLS.CA, "cell-ca", env("GTR_CELL_CA", ""), "CA that the cells' certificates chain to; with it the GTR dials cells over mutual TLS as spiffe://cellpay.internal/gtr (env GTR_CELL_CA); required unless -insecure-plaintext")
	flag.StringVar(&cfg.CellTLS.Cert, "cell-tls-cert", env("GTR_CELL_TLS_CERT", ""), "client certificate towards the cells, PEM, reloaded when it changes (env GTR_CELL_TLS_CERT); default -tls-cert when -cell-ca is set")
	flag.StringVar(&cfg.CellTLS.Key, "cell-tls-key", env("GTR_CELL_TLS_KEY", ""), "its private key, PEM (env GTR_CELL_TLS_KEY); default -tls-key when -cell-ca is set")
	flag.BoolVar(&cfg.NoAdmission, "no-admission", env("GTR_NO_ADMISSION", "") == "1", "turn admission control off: no partner limits, no adaptive cell limits (env GTR_NO_ADMISSION=1); for measuring only")
	flag.DurationVar(&cfg.AdmissionBaseline, "admission-baseline", gtr.DefaultAdmissionBaseline, "time constant of the adaptive limits' long-term latency average (it rises toward a slower latency this slowly, falls 8x faster), with a partner within its fair share still admitted at the GTR-wide limit; 0 for the former rule: the average moves by a share of each window of samples, and no fair share (docs/benchmarks/log/overload.md)")
	flag.DurationVar(&cfg.AdmissionShedBaseline, "admission-shed-baseline", 0, "time constant of the long-term latency average's rise while a limit is refusing attempts; 0 for admission-baseline's (experimental, docs/benchmarks/log/overload.md)")
	flag.Float64Var(&cfg.AdmissionTolerance, "admission-tolerance", 0, "how many times slower than its long-term latency a cell, or the GTR as a whole, may answer before its adaptive concurrency limit falls; above 1, 0 for the default (2)")
	flag.BoolVar(&cfg.Reflection, "reflection", env("GTR_REFLECTION", "") == "1", "serve gRPC reflection on the partners' listener, for grpcurl (env GTR_REFLECTION=1); off in production")
	flag.StringVar(&cfg.ReplicaID, "replica-id", env("GTR_REPLICA_ID", host), "this replica's name in logs, NATS and admin answers (env GTR_REPLICA_ID)")
	flag.StringVar(&cfg.CellDialFrom, "cell-dial-from", env("GTR_CELL_DIAL_FROM", ""), "an IP address of this host the connections to the cells leave from (a host on several networks: its site's); \"\" lets the system choose (env GTR_CELL_DIAL_FROM)")
	flag.StringVar(&cfg.Site, "site", env("GTR_SITE", ""), "the site (city, data centre) of this access point, shown to operators beside its replica; lowercase letters, digits and hyphens, such as site-a; \"\" for none (env GTR_SITE)")
	flag.BoolVar(&o.insecurePlaintext, "insecure-plaintext", env("GTR_INSECURE_PLAINTEXT", "") == "1", "without -cell-ca, dial the cells in plaintext, whose Cell API then serves anyone, and without -nats-ca, speak anonymous plaintext NATS: benchmarks and local tests only (env GTR_INSECURE_PLAINTEXT=1). Without it, without -cell-ca (or with -nats-url and no -nats-ca) the GTR refuses to start")
	flag.StringVar(&o.natsCA, "nats-ca", env("GTR_NATS_CA", ""), "CA of the NATS server's certificate; with it the GTR speaks TLS to NATS, authenticated by -cell-tls-cert (default -tls-cert) as spiffe://cellpay.internal/gtr (env GTR_NATS_CA); without it a -nats-url needs -insecure-plaintext (anonymous plaintext NATS)")
}

// adminToken reads the token from file, else from GTR_ADMIN_TOKEN. There is
// no flag for the token itself: command lines are visible to every user.
func adminToken(file string) (string, error) {
	if file == "" {
		return strings.TrimSpace(os.Getenv("GTR_ADMIN_TOKEN")), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", errors.New("admin token: " + file + " is empty")
	}
	return tok, nil
}
