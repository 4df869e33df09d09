// Command cell runs one Cellpay cell: an orchestrator with its own Postgres
// that processes the transactions the GTR routes to it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/cellpay/cellpay/cmd/cell/internal/callback"
	"github.com/cellpay/cellpay/cmd/cell/internal/cell"
	"github.com/cellpay/cellpay/cmd/cell/internal/directory"
	"github.com/cellpay/cellpay/cmd/cell/internal/issuercheck"
	"github.com/cellpay/cellpay/cmd/cell/internal/retention"
	"github.com/cellpay/cellpay/internal/buildinfo"
	"github.com/cellpay/cellpay/internal/cardkeys"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/logging"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

func main() {
	cfg, err := configure()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cell:", err)
		os.Exit(2)
	}
	log, closeLog := logging.New(os.Stderr)
	cfg.Log = log
	if err := serve(cfg); err != nil {
		log.Error("cell failed", "error", err)
		closeLog()
		os.Exit(1)
	}
	closeLog()
}

// serve starts the cell and serves until SIGINT or SIGTERM, or until it
// can no longer serve, then drains it (bounded by its ShutdownTimeout).
func serve(cfg cell.Config) error {
	c, err := cell.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := c.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-c.Done():
	}
	return errors.Join(c.Err(), c.Shutdown(context.Background()))
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func envInt(name string, def int64) int64 {
	if v, ok := os.LookupEnv(name); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, ok := os.LookupEnv(name); ok {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

// configure reads the flags, the environment and the card data keys
// file into the cell's Config; an error is the operator's to fix.
func configure() (cell.Config, error) {
	var c cell.Config
	var keyFile, schedule, natsCA string
	var insecurePlaintext bool
	flag.StringVar(&c.ID, "id", env("CELL_ID", "cell-a"), "cell ID (env CELL_ID)")
	flag.StringVar(&c.Instance, "instance", env("CELL_INSTANCE", ""), "this process's name among the cell's instances, which share its Postgres and NATS: unique among them, and the same across a restart where it can be (a pod's name); \"\" for <hostname>-<pid> (env CELL_INSTANCE)")
	flag.StringVar(&c.Listen, "listen", env("CELL_LISTEN", "127.0.0.1:7081"), "gRPC listen address (env CELL_LISTEN)")
	flag.StringVar(&c.DatabaseURL, "database-url", env("CELL_DATABASE_URL", ""), "the cell's Postgres URL (env CELL_DATABASE_URL)")
	flag.StringVar(&c.MigrateDatabaseURL, "migrate-database-url", env("CELL_MIGRATE_DATABASE_URL", ""), "the schema owner's Postgres URL: migrations run over it, and -database-url's role only reads and writes rows; \"\" migrates over -database-url (env CELL_MIGRATE_DATABASE_URL)")
	flag.StringVar(&c.IssuerAddr, "issuer", env("CELL_ISSUER_ADDR", "127.0.0.1:7090"), "issuer address (env CELL_ISSUER_ADDR)")
	flag.StringVar(&c.RefDataFile, "refdata", env("CELL_REFDATA_FILE", "config/refdata.json"), "reference data file that bootstraps a cell with no stored version, as version 0; \"\" for none (env CELL_REFDATA_FILE)")
	flag.StringVar(&c.NATSURL, "nats-url", env("CELL_NATS_URL", ""), "NATS server the reference data comes from; \"\" for none (env CELL_NATS_URL)")
	flag.IntVar(&c.NATSReplicas, "nats-replicas", int(envInt("CELL_NATS_REPLICAS", 3)), "replicas of what this cell creates in NATS where nobody has yet (the transaction directory's bucket, the reference data stream): 3 on a three-server cluster, 1 on a lone server; what exists is kept as it is, and a difference logged and exported as cellpay_nats_config_differs (env CELL_NATS_REPLICAS)")
	flag.DurationVar(&c.DirectoryMaxAge, "directory-max-age", envDuration("CELL_DIRECTORY_MAX_AGE", directory.DefaultMaxAge), "how long the transaction directory keeps an entry, if this cell creates its bucket: the idempotency window across cells (env CELL_DIRECTORY_MAX_AGE)")
	flag.Int64Var(&c.DirectoryMaxBytes, "directory-max-bytes", envInt("CELL_DIRECTORY_MAX_BYTES", directory.DefaultMaxBytes), "the transaction directory bucket's size limit on each NATS server, if this cell creates it; past it claims fail and only natural homes take transactions, as in a NATS outage (env CELL_DIRECTORY_MAX_BYTES)")
	flag.DurationVar(&c.Retention, "retention", envDuration("CELL_RETENTION", retention.DefaultKeep), "how long a partition (a quarter) of transactions and callbacks is kept once it has ended, then dropped whole (one still holding unresolved work is kept until it is resolved); at least -directory-max-age and a day; past it a transaction's follow-ups are refused as naming an unknown original, so at least the partners' refund window (env CELL_RETENTION)")
	flag.DurationVar(&c.IssuerCheckEvery, "issuer-check-every", envDuration("CELL_ISSUER_CHECK_EVERY", issuercheck.DefaultEvery), "how often the leading instance compares the issuer's record of what it applied for this cell (its ListEffects, by the cell's ID as terminal) over twice that window with the cell's records, logging and exporting (cellpay_cell_issuer_discrepancies) every effect the cell holds no record of or another outcome of; 0 for none (env CELL_ISSUER_CHECK_EVERY)")
	flag.DurationVar(&c.IssuerCheckLookback, "issuer-check-lookback", envDuration("CELL_ISSUER_CHECK_LOOKBACK", 0), "the window of the issuer's record each check reads, up to its start; 0 for twice -issuer-check-every. After restoring the cell's database from a backup or a copy, reach back before its point, so that what the issuer applied since is checked (a check reads at most 100,000 effects) (env CELL_ISSUER_CHECK_LOOKBACK)")
	flag.BoolVar(&c.IssuerCheckReportOnly, "issuer-check-report-only", env("CELL_ISSUER_CHECK_REPORT_ONLY", "") == "1", "the issuer check only reports: without it, an effect the issuer applied for this cell that the cell holds no record of (lost with a database restored or promoted from a copy behind its last commits) is recorded from the issuer's record, final, with its callback (env CELL_ISSUER_CHECK_REPORT_ONLY=1)")
	flag.DurationVar(&c.RecoverAtStart, "recover-at-start", envDuration("CELL_RECOVER_AT_START", 0), "before serving, record what the issuer applied for this cell over this long before the start that the database lacks or holds short of (its ListEffects by the cell's ID): for a cell started on a promoted copy of its database (a site lost) or on a restore behind its last commits, so that no partner's retry finds such a transaction unknown and starts it again; reach back before the copy's point; a check that fails stops the start; 0 for none (env CELL_RECOVER_AT_START)")
	flag.StringVar(&c.MetricsListen, "metrics-listen", env("CELL_METRICS_LISTEN", ""), "address for Prometheus /metrics (transactions, issuer latency, reference data, gRPC), e.g. 127.0.0.1:9081; \"\" for none (env CELL_METRICS_LISTEN). Traces go over OTLP only when OTEL_EXPORTER_OTLP_ENDPOINT is set")
	flag.StringVar(&c.HealthListen, "health-listen", env("CELL_HEALTH_LISTEN", ""), "address serving gRPC health alone, in plaintext, for probes that cannot present a client certificate (kubelet's), e.g. :7082; \"\" for none (env CELL_HEALTH_LISTEN)")
	flag.StringVar(&keyFile, "pan-key-file", env("CELL_PAN_KEY_FILE", ""), "file holding the card data master secrets, one hex secret of 32+ bytes a line: the current one first, then previous ones newest first (kept while their rows are within the velocity and idempotency windows); the PAN hash and fingerprint keys are derived from them (env CELL_PAN_KEY_FILE)")
	flag.StringVar(&c.PartnersStateFile, "partners-state-file", env("CELL_PARTNERS_STATE_FILE", ""), "file keeping the last-known partner registry (callback settings, followed read-only from NATS); it holds signing secrets and is written 0600; \"\" for none (env CELL_PARTNERS_STATE_FILE)")
	flag.BoolVar(&c.Callbacks.Off, "callbacks-off", env("CELL_CALLBACKS_OFF", "") == "1", "do not deliver callbacks (the outbox is still written with every final outcome) (env CELL_CALLBACKS_OFF=1)")
	flag.StringVar(&schedule, "callback-schedule", env("CELL_CALLBACK_SCHEDULE", callback.DefaultSchedule.String()), "delay before each callback attempt, comma-separated; after the last a dead letter. The default is Svix's schedule compressed for local runs; production: "+callback.SvixSchedule.String()+" (env CELL_CALLBACK_SCHEDULE)")
	flag.DurationVar(&c.Callbacks.Timeout, "callback-timeout", envDuration("CELL_CALLBACK_TIMEOUT", 10*time.Second), "timeout of one callback endpoint call (env CELL_CALLBACK_TIMEOUT)")
	flag.StringVar(&c.Callbacks.CAFile, "callback-ca-file", env("CELL_CALLBACK_CA_FILE", ""), "CA certificate that callback endpoints are verified with; \"\" for the system roots (env CELL_CALLBACK_CA_FILE)")
	flag.BoolVar(&c.NoDirectory, "no-directory", env("CELL_NO_DIRECTORY", "") == "1", "do not claim transactions in the transaction directory (NATS bucket "+directory.DefaultBucket+"): the cell then decides from its own records alone, and a transaction sent to two cells may get two answers; for benchmarks and a lone cell (env CELL_NO_DIRECTORY=1)")
	flag.StringVar(&c.TLS.Cert, "tls-cert", env("CELL_TLS_CERT", ""), "the cell's certificate, PEM (identity spiffe://cellpay.internal/cell/<id>), served to the GTR and presented to the issuer, reloaded when it changes (env CELL_TLS_CERT); with -tls-key and -tls-ca the Cell API takes only the GTR's certificate. Required unless -insecure-plaintext")
	flag.StringVar(&c.TLS.Key, "tls-key", env("CELL_TLS_KEY", ""), "the cell's private key, PEM (env CELL_TLS_KEY)")
	flag.StringVar(&c.TLS.CA, "tls-ca", env("CELL_TLS_CA", ""), "CA that the GTR's and the issuer's certificates must chain to (env CELL_TLS_CA)")
	flag.BoolVar(&insecurePlaintext, "insecure-plaintext", env("CELL_INSECURE_PLAINTEXT", "") == "1", "without TLS files, serve and dial plaintext with no authorization: anyone may call the Cell API; and without -nats-ca, speak anonymous plaintext NATS: benchmarks, a lone cell and local tests only (env CELL_INSECURE_PLAINTEXT=1). Without it, without -tls-cert, -tls-key and -tls-ca (or with -nats-url and no -nats-ca) the cell refuses to start")
	flag.StringVar(&natsCA, "nats-ca", env("CELL_NATS_CA", ""), "CA of the NATS server's certificate; with it the cell speaks TLS to NATS, authenticated by its -tls-cert (env CELL_NATS_CA); without it a -nats-url needs -insecure-plaintext (anonymous plaintext NATS)")
	flag.BoolVar(&c.GroupCommit, "group-commit", env("CELL_GROUP_COMMIT", "1") != "0", "share the commits of concurrent transactions' durable writes (group commit, cmd/cell/internal/store/group.go); -group-commit=false or env CELL_GROUP_COMMIT=0 writes each alone, for measuring")
	version := flag.Bool("version", false, buildinfo.FlagUsage)
	flag.CommandLine.SetOutput(buildinfo.UsageOutput(os.Args[1:], os.Stdout, os.Stderr))
	flag.Parse()
	if *version {
		fmt.Println(buildinfo.Read("cell"))
		os.Exit(0)
	}
	if err := hop.RequireTLS(c.TLS, insecurePlaintext, "-tls-cert, -tls-key and -tls-ca (CELL_TLS_CERT, CELL_TLS_KEY, CELL_TLS_CA)"); err != nil {
		return c, err
	}
	sched, err := callback.ParseSchedule(schedule)
	if err != nil {
		return c, fmt.Errorf("-callback-schedule: %w", err)
	}
	c.Callbacks.Schedule = sched
	if err := hop.RequireNATSTLS(c.NATSURL, natsCA, insecurePlaintext, "-nats-ca (CELL_NATS_CA)"); err != nil {
		return c, err
	}
	if natsCA != "" {
		if c.TLS.Cert == "" || c.TLS.Key == "" {
			return c, fmt.Errorf("-nats-ca needs -tls-cert and -tls-key: the certificate is the cell's NATS identity")
		}
		c.NATSTLS = tlsconf.Files{Cert: c.TLS.Cert, Key: c.TLS.Key, CA: natsCA}
	}
	if floor := max(retention.MinKeep, c.DirectoryMaxAge+24*time.Hour); c.Retention < floor {
		return c, fmt.Errorf("-retention %s: shorter than %s (-directory-max-age, the idempotency window, and a day)", c.Retention, floor)
	}
	c.Keys, err = loadKeys(keyFile)
	return c, err
}

// loadKeys reads the card data master secrets of -pan-key-file.
func loadKeys(file string) (*cardkeys.Ring, error) {
	if file == "" {
		return nil, fmt.Errorf("-pan-key-file is required")
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	masters, err := cardkeys.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("-pan-key-file: %w", err)
	}
	keys, err := cardkeys.New(masters...)
	if err != nil {
		return nil, fmt.Errorf("-pan-key-file: %w", err)
	}
	return keys, nil
}
