// Command cellpay runs the whole platform on this machine, one process per
// component, until interrupted:
//
//	cellpay [run] [flags]
//	cellpay drill [flags]   # a DR drill against the running platform (-h)
//
// Every flag has an environment fallback (CELLPAY_*; PG_BIN_DIR for the
// Postgres binaries). See docs/design/README.md, "Local defaults", for the ports.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cellpay/cellpay/internal/buildinfo"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/operators"
)

// startTimeout bounds starting the platform, initdb of every cell included.
const startTimeout = 3 * time.Minute

func main() {
	if len(os.Args) > 1 && os.Args[1] == "drill" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := runDrill(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	cfg, err := configure(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0) // asked for: the usage is on stdout
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cellpay:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cellpay:", err)
		os.Exit(1)
	}
}

// run starts the platform, prints where everything is, and stops it when
// ctx ends.
func run(ctx context.Context, cfg platform.Config, out io.Writer) error {
	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
	p, err := platform.Start(startCtx, cfg)
	cancel()
	if err != nil {
		return err
	}
	printEndpoints(out, p)
	<-ctx.Done()
	fmt.Fprintln(out, "cellpay: stopping")
	return p.Stop()
}

func configure(args []string) (platform.Config, error) {
	if len(args) > 0 && args[0] == "run" {
		args = args[1:]
	}
	fs := flag.NewFlagSet("cellpay", flag.ContinueOnError)
	var cfg platform.Config
	var cells string
	fs.StringVar(&cfg.BinDir, "bin", env("CELLPAY_BIN", executableDir()), "directory of the gtr, cell and issuersim binaries (CELLPAY_BIN)")
	fs.StringVar(&cfg.DataDir, "data", env("CELLPAY_DATA", ".cellpay"), "data directory: Postgres clusters, logs, PAN key (CELLPAY_DATA)")
	fs.StringVar(&cfg.GTRConfig, "config", env("CELLPAY_CONFIG", "config/gtr.yaml"), "GTR routing config (CELLPAY_CONFIG)")
	fs.StringVar(&cfg.RefData, "refdata", env("CELLPAY_REFDATA", "config/refdata.json"), "reference data file (CELLPAY_REFDATA)")
	fs.StringVar(&cfg.DatabaseURL, "database-url", env("CELLPAY_DATABASE_URL", ""), "use this Postgres server, one database per cell, instead of private clusters (CELLPAY_DATABASE_URL)")
	fs.StringVar(&cfg.PGBinDir, "pg-bin", env("PG_BIN_DIR", ""), "PostgreSQL server binaries; default the newest /usr/lib/postgresql/*/bin (PG_BIN_DIR)")
	fs.StringVar(&cfg.GTRAddr, "gtr-addr", env("CELLPAY_GTR_ADDR", platform.DefaultGTRAddr), "GTR partners' API (CELLPAY_GTR_ADDR)")
	fs.StringVar(&cfg.AdminAddr, "admin-addr", env("CELLPAY_ADMIN_ADDR", platform.DefaultAdminAddr), "GTR admin API (CELLPAY_ADMIN_ADDR)")
	fs.StringVar(&cfg.BackupGTRAddr, "backup-gtr-addr", env("CELLPAY_BACKUP_GTR_ADDR", platform.DefaultBackupGTRAddr), "backup access point: a second GTR replica's partners' API (CELLPAY_BACKUP_GTR_ADDR)")
	fs.StringVar(&cfg.BackupAdminAddr, "backup-admin-addr", env("CELLPAY_BACKUP_ADMIN_ADDR", platform.DefaultBackupAdminAddr), "the backup GTR's admin API (CELLPAY_BACKUP_ADMIN_ADDR)")
	fs.StringVar(&cfg.RESTAddr, "rest-addr", env("CELLPAY_REST_ADDR", platform.DefaultRESTAddr), "GTR partners' API as REST/JSON over HTTPS; empty for none (CELLPAY_REST_ADDR)")
	fs.StringVar(&cfg.BackupRESTAddr, "backup-rest-addr", env("CELLPAY_BACKUP_REST_ADDR", platform.DefaultBackupRESTAddr), "the backup GTR's REST/JSON listener; empty for none (CELLPAY_BACKUP_REST_ADDR)")
	backup := fs.Bool("backup-gtr", envBool("CELLPAY_BACKUP_GTR", true), "run the backup access point (CELLPAY_BACKUP_GTR)")
	fs.StringVar(&cfg.IssuerAddr, "issuer-addr", env("CELLPAY_ISSUER_ADDR", platform.DefaultIssuerAddr), "issuer simulator (CELLPAY_ISSUER_ADDR)")
	fs.StringVar(&cells, "cells", env("CELLPAY_CELLS", formatCells(platform.DefaultCells)), "cells as id=addr,... (CELLPAY_CELLS)")
	nats := fs.String("nats", env("CELLPAY_NATS", "auto"), "run NATS (a cluster of -nats-servers with JetStream) and the replicator: on, off, or auto (on when a nats-server binary is found: make build's in -bin, else on the PATH) (CELLPAY_NATS)")
	fs.StringVar(&cfg.NATSAddr, "nats-addr", env("CELLPAY_NATS_ADDR", platform.DefaultNATSAddr), "the first NATS server's client address; server i takes clients on its port + i and routes on its port + servers + i (7222-7224 and 7225-7227 by default) (CELLPAY_NATS_ADDR)")
	fs.IntVar(&cfg.NATSServers, "nats-servers", envInt("CELLPAY_NATS_SERVERS", 3), "NATS servers in the cluster; every stream and bucket has a replica on each (CELLPAY_NATS_SERVERS)")
	fs.StringVar(&cfg.RefDataSource, "refdata-source", env("CELLPAY_REFDATA_SOURCE", "config/refdata"), "reference data folder the replicator publishes (CELLPAY_REFDATA_SOURCE)")
	fs.BoolVar(&cfg.Metrics, "metrics", envBool("CELLPAY_METRICS", true), "serve /metrics beside each component, on its port + 2000 (CELLPAY_METRICS)")
	fs.StringVar(&cfg.CallbackAddr, "callback-addr", env("CELLPAY_CALLBACK_ADDR", platform.DefaultCallbackAddr), "sample callback receiver (HTTPS) the sample partners' callbacks go to; \"\" for none (CELLPAY_CALLBACK_ADDR)")
	fs.IntVar(&cfg.CellInstances, "cell-instances", envInt("CELLPAY_CELL_INSTANCES", 2), "orchestrator processes per cell, sharing its database: instance n on the cell's port + 100·(n-1), e.g. cell-a-2 on :7181; the GTR config must list them (CELLPAY_CELL_INSTANCES)")
	pgPort := fs.Int("pg-base-port", envInt("CELLPAY_PG_BASE_PORT", platform.DefaultPGBasePort), "first private Postgres port, one per cell: the cells' primaries (CELLPAY_PG_BASE_PORT)")
	standbyPort := fs.Int("standby-base-port", envInt("CELLPAY_STANDBY_BASE_PORT", platform.DefaultStandbyBasePort), "first port of the cells' synchronous standbys, one per cell (CELLPAY_STANDBY_BASE_PORT)")
	standby := fs.Bool("standby", envBool("CELLPAY_STANDBY", true), "give each cell's Postgres a synchronous streaming standby, promoted by the launcher when the primary is lost (CELLPAY_STANDBY)")
	sites := fs.Int("sites", envInt("CELLPAY_SITES", 1), "1, or 2: two sites on this machine, site-a on "+platform.SiteAHost+" and site-b on "+platform.SiteBHost+", each an access point and two cells with the single-site ports, routed by "+platform.TwoSitesGTRConfig+" unless -config is given (CELLPAY_SITES)")
	version := fs.Bool("version", false, buildinfo.FlagUsage)
	fs.Usage = func() {} // printed below: to stdout when asked for, else with the error
	if err := fs.Parse(args); err != nil {
		out := os.Stderr
		if errors.Is(err, flag.ErrHelp) {
			out = os.Stdout
		}
		fmt.Fprintln(out, "usage: cellpay [run] [FLAGS]\n       cellpay drill [FLAGS] (cellpay drill -h)\n\nflags:")
		fs.SetOutput(out)
		fs.PrintDefaults()
		return cfg, err
	}
	if *version {
		fmt.Println(buildinfo.Read("cellpay"))
		os.Exit(0)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.Cells, err = parseCells(cells); err != nil {
		return cfg, err
	}
	switch *sites {
	case 1:
	case 2:
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, name := range []string{"cells", "gtr-addr", "admin-addr", "backup-gtr-addr", "backup-admin-addr", "rest-addr", "backup-rest-addr", "backup-gtr"} {
			if set[name] || os.Getenv(flagEnv[name]) != "" {
				return cfg, fmt.Errorf("-sites 2 lays out the cells and access points itself: -%s (or %s) is not taken with it", name, flagEnv[name])
			}
		}
		if !set["config"] && os.Getenv("CELLPAY_CONFIG") == "" {
			cfg.GTRConfig = platform.TwoSitesGTRConfig
		}
		cfg = platform.TwoSites(cfg)
	default:
		return cfg, fmt.Errorf("-sites: want 1 or 2, not %d", *sites)
	}
	cfg.PGBasePort = *pgPort
	cfg.StandbyBasePort = *standbyPort
	cfg.NoStandby = !*standby
	cfg.NoBackupGTR = !*backup
	switch *nats {
	case "on":
		cfg.NATS = true
	case "auto":
		cfg.NATS = platform.FindNATSServer(cfg.BinDir) != ""
	case "off":
	default:
		return cfg, fmt.Errorf("-nats: want on, off or auto, not %q", *nats)
	}
	cfg.Stdout, cfg.Stderr = os.Stdout, os.Stderr
	return cfg, nil
}

// flagEnv names the environment fallback of the flags -sites 2 sets.
var flagEnv = map[string]string{
	"cells": "CELLPAY_CELLS", "gtr-addr": "CELLPAY_GTR_ADDR", "admin-addr": "CELLPAY_ADMIN_ADDR",
	"backup-gtr-addr": "CELLPAY_BACKUP_GTR_ADDR", "backup-admin-addr": "CELLPAY_BACKUP_ADMIN_ADDR",
	"rest-addr": "CELLPAY_REST_ADDR", "backup-rest-addr": "CELLPAY_BACKUP_REST_ADDR", "backup-gtr": "CELLPAY_BACKUP_GTR",
}

func printEndpoints(w io.Writer, p *platform.Platform) {
	cfg := p.Config()
	fmt.Fprintf(w, "\ncellpay is running. Ctrl-C stops it.\n\n")
	fmt.Fprintf(w, "  GTR partners' API  %s   (primary access point, %s)\n", cfg.GTRAddr, cfg.GTRSite)
	if cfg.RESTAddr != "" {
		fmt.Fprintf(w, "  GTR REST/JSON      https://%s/v1/   (OpenAPI: /openapi.json)\n", cfg.RESTAddr)
	}
	fmt.Fprintf(w, "  GTR admin API      %s\n", cfg.AdminAddr)
	if !cfg.NoBackupGTR {
		fmt.Fprintf(w, "  backup GTR         %s   (backup access point, %s; admin %s)\n", cfg.BackupGTRAddr, cfg.BackupGTRSite, cfg.BackupAdminAddr)
		if cfg.BackupRESTAddr != "" {
			fmt.Fprintf(w, "  backup REST/JSON   https://%s/v1/\n", cfg.BackupRESTAddr)
		}
	}
	for _, c := range cfg.Cells {
		var addrs []string
		for _, in := range p.Instances(c.ID) {
			addrs = append(addrs, in.Addr)
		}
		fmt.Fprintf(w, "  %-18s %s   db %s\n", c.ID, strings.Join(addrs, ", "), platform.RedactURL(p.CellDatabaseURL(c.ID)))
	}
	if d := p.DescribeDatabases(); d != "" {
		fmt.Fprintf(w, "  cells' Postgres    %s\n", d)
		if !cfg.NoStandby {
			fmt.Fprintf(w, "                     the launcher promotes a standby when its primary is lost: \"FAILOVER\" in %s\n", filepath.Join(p.LogDir(), "platform.log"))
		}
	}
	fmt.Fprintf(w, "  issuer simulator   %s\n", cfg.IssuerAddr)
	if url := p.NATSURL(); url != "" {
		fmt.Fprintf(w, "  NATS (JetStream)   %s   reference data published from %s\n", url, cfg.RefDataSource)
	} else {
		fmt.Fprintf(w, "  NATS               off: cells serve the reference data file, changes stay in this GTR\n")
	}
	fmt.Fprintf(w, "  operator tokens    %s (viewer, operator, admin; gtrctl uses admin.token by default)\n", filepath.Dir(p.AdminTokenFile()))
	if cfg.Metrics {
		fmt.Fprintf(w, "  metrics            http://%s/metrics (GTR), http://%s/metrics (cell-a), ... port + 2000 of each\n",
			platform.MetricsAddr(cfg.GTRAddr), platform.MetricsAddr(cfg.Cells[0].Addr))
		if a := p.NATSMonAddr(); a != "" {
			fmt.Fprintf(w, "                     http://%s/metrics (NATS's own, from its servers' monitoring ports, natsmon)\n", a)
		}
	}
	if cfg.CallbackAddr != "" {
		fmt.Fprintf(w, "  callbacks          %s (sample receiver; every event it takes in %s)\n", p.CallbackURL("<partner>"), p.CallbackLog())
	}
	fmt.Fprintf(w, "  logs               %s\n\n", p.LogDir())
	wd, _ := os.Getwd()
	fmt.Fprintf(w, "  CA certificate     %s (the GTR's TLS)\n", p.CAFile())
	fmt.Fprintf(w, "  partner API keys   %s/<partner>.key\n\n", p.PartnerKeyDir())
	fmt.Fprintf(w, "Try:\n")
	for _, line := range p.TryCommands(filepath.Join(cfg.BinDir, "grpcurl"), wd) {
		fmt.Fprintf(w, "  %s\n", line)
	}
	fmt.Fprintf(w, "  GTRCTL_TOKEN_FILE=%s bin/gtrctl cells --addr %s\n", p.OperatorTokenFile(operators.RoleViewer), cfg.AdminAddr)
	fmt.Fprintf(w, "  GTRCTL_TOKEN_FILE=%s bin/gtrctl audit --addr %s\n\n", p.AdminTokenFile(), cfg.AdminAddr)
}

func parseCells(s string) ([]platform.CellSpec, error) {
	var cells []platform.CellSpec
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("-cells: %q is not id=addr", part)
		}
		cells = append(cells, platform.CellSpec{ID: id, Addr: addr})
	}
	return cells, nil
}

func formatCells(cells []platform.CellSpec) string {
	parts := make([]string, len(cells))
	for i, c := range cells {
		parts[i] = c.ID + "=" + c.Addr
	}
	return strings.Join(parts, ",")
}

func executableDir() string {
	exe, err := os.Executable()
	if err != nil {
		return "."
	}
	return filepath.Dir(exe)
}

func env(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

func envInt(key string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(key)); err == nil {
		return n
	}
	return def
}

func envBool(name string, def bool) bool {
	if v, err := strconv.ParseBool(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
