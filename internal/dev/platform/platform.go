// Package platform runs the whole Cellpay platform on one machine as
// separate OS processes: a private Postgres per cell, the issuer simulator,
// the cells and the GTR. cmd/cellpay uses it for `make run`, and end-to-end
// tests use it to kill, pause and restart single components.
//
// Every child runs in its own process group and is killed if we die, so a
// crashed launcher or test never leaves servers behind. It only ever binds
// loopback addresses it is given; it never reads flags or environment.
package platform

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/cellpay/cellpay/internal/dev/pgcluster"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// CellSpec names a cell and the address its internal API listens on.
type CellSpec struct {
	ID   string
	Addr string
}

// Config describes a local platform. Zero fields take the defaults of
// docs/design/README.md's "Local defaults".
type Config struct {
	// BinDir holds the gtr, cell and issuersim binaries. Required.
	BinDir string
	// DataDir holds the Postgres clusters (pg/<cell>) and their roles'
	// passwords (pgroles/<cell>/<role>.password), logs (logs/<name>.log)
	// and the PAN key (pan.key). Required; created if missing.
	DataDir string
	// GTRConfig is the GTR's routing config file (YAML). Required.
	GTRConfig string
	// RefData is the reference data file the cells load. Required.
	RefData string
	// DatabaseURL, if set, names an existing server: each cell gets its own
	// database on it (cellpay_cell_a, ...) instead of a private cluster,
	// and connects with DatabaseURL's role as it is (no TLS or roles are
	// provisioned there; see startDatabases).
	DatabaseURL string
	// PGBinDir holds the Postgres server binaries; "" lets pgcluster find them.
	PGBinDir string
	// Cells default to cell-a, cell-b, cell-c on 127.0.0.1:7081, :7082, :7083.
	Cells []CellSpec
	// CellInstances is how many orchestrator processes each cell runs,
	// sharing its database (default 1). Instance n > 1 of a cell is the
	// process <cell>-<n>, on the cell's port + 100·(n-1) (cell-a-2 on
	// :7181); the GTR's table must list them (addrs).
	CellInstances int
	// IssuerAddr, GTRAddr and AdminAddr default to 127.0.0.1:7090, :7070
	// and :7071.
	IssuerAddr, GTRAddr, AdminAddr string
	// BackupGTRAddr and BackupAdminAddr are the backup access point's
	// partners' and admin listeners, default 127.0.0.1:7170 and :7171: a
	// second GTR replica standing for the other city, with its own state
	// files, on the same NATS and seeds (so the same table and partners)
	// and the same certificate. NoBackupGTR runs the primary alone.
	BackupGTRAddr, BackupAdminAddr string
	NoBackupGTR                    bool
	// GTRSite and BackupGTRSite are the sites the access points name
	// (their -site); default Site for both. TwoSites sets them apart.
	GTRSite, BackupGTRSite string
	// GTRDialFrom and BackupGTRDialFrom are the local addresses the access
	// points' connections to the cells leave from ("": the system's
	// choice): two sites on one host, told apart by their addresses, so
	// that a cut between them can be made by address (TwoSites).
	GTRDialFrom, BackupGTRDialFrom string
	// RESTAddr and BackupRESTAddr, if set, are the access points' REST/JSON
	// listeners (the gtr's -rest-listen); make run's are 127.0.0.1:7060
	// and :7160 (DefaultRESTAddr, DefaultBackupRESTAddr).
	RESTAddr, BackupRESTAddr string
	// PGBasePort: the private cluster of Cells[i] listens on PGBasePort+i.
	// Default 7431. It is the cell's primary when the platform starts.
	PGBasePort int
	// StandbyBasePort: the streaming standby of Cells[i]'s cluster, which
	// every commit waits for (synchronous_standby_names), listens on
	// StandbyBasePort+i with its data dir in pg/<cell>-standby. Default
	// 7441. After a failover the two swap roles; the cells' URLs name both
	// (see standby.go).
	StandbyBasePort int
	// NoStandby runs each private cluster alone: no standby, no
	// watchdog, commits on one server (benchmarks compare with it).
	NoStandby bool
	// NoFsync runs every private cluster with fsync off, for tests: a
	// commit still waits for the synchronous standby, and a server killed
	// with SIGKILL loses nothing (the OS holds what it wrote); only a host
	// crash would. It saves the tests a disk flush per commit, which on a
	// shared two-core machine cost them seconds of system time per run.
	// Never for make run or a benchmark.
	NoFsync bool
	// FailoverCheckInterval and FailoverChecks: the watchdog checks each
	// primary every interval (default 500ms; each check may take 1 s) and
	// promotes the standby after FailoverChecks failed checks in a row
	// (default 3), or at once when the primary's process exits unasked.
	FailoverCheckInterval time.Duration
	FailoverChecks        int
	// Stdout and Stderr receive the children's output, each line prefixed
	// with "[name] ". Nil discards it; DataDir/logs/<name>.log always gets it.
	Stdout, Stderr io.Writer
	// Env is added to every child's environment.
	Env []string
	// NATS, when true, starts a NATS server with JetStream on NATSAddr
	// (default 127.0.0.1:7222) from NATSServerBin (default: nats-server on
	// the PATH or /usr/sbin/nats-server), points the cells and the GTR at
	// it, and, if RefDataSource is set, publishes that folder's reference
	// data snapshot with the replicator before the cells start.
	NATS     bool
	NATSAddr string
	// NATSServers is how many NATS servers form the cluster (default 3;
	// 1 for a server alone). Server i (from 0) takes clients on
	// NATSAddr's port + i and routes on that port + NATSServers + i, and
	// every stream and bucket gets NATSServers replicas.
	NATSServers int
	// Metrics, when true, gives the GTR, every cell and the issuer
	// simulator a /metrics listener on the same host, port + 2000 (GTR
	// :7070 → :9070, cell-a :7081 → :9081), as docs/design/README.md's local defaults.
	// With NATS too, every NATS server serves its HTTP monitoring on
	// 127.0.0.1, NATSAddr's port + 2·NATSServers + i (:7228-:7230), and
	// natsmon (BinDir/natsmon) serves their metrics on NATSAddr's port +
	// 2000 (:9222).
	Metrics       bool
	NATSServerBin string
	RefDataSource string
	// CallbackAddr, when set, runs the sample callback receiver there (in
	// this process, HTTPS with the development CA), and the sample
	// partners' callbacks go to it. Cells verify callback endpoints with
	// the development CA either way.
	CallbackAddr string
}

// DefaultCells are the cells of a local platform.
var DefaultCells = []CellSpec{
	{ID: "cell-a", Addr: "127.0.0.1:7081"},
	{ID: "cell-b", Addr: "127.0.0.1:7082"},
	{ID: "cell-c", Addr: "127.0.0.1:7083"},
}

// Defaults for the other addresses.
const (
	DefaultGTRAddr   = "127.0.0.1:7070"
	DefaultAdminAddr = "127.0.0.1:7071"
	// The backup access point.
	DefaultBackupGTRAddr   = "127.0.0.1:7170"
	DefaultBackupAdminAddr = "127.0.0.1:7171"
	// The access points' REST/JSON listeners, as make run starts them.
	DefaultRESTAddr       = "127.0.0.1:7060"
	DefaultBackupRESTAddr = "127.0.0.1:7160"
	DefaultIssuerAddr     = "127.0.0.1:7090"
	DefaultPGBasePort     = 7431
)

// Component names for Process, besides the cell IDs.
const (
	GTR       = "gtr"
	GTRBackup = "gtr-backup"
	IssuerSim = "issuersim"
	// NATS names the NATS servers: NATSServer(i) is nats-<i+1>.
	NATS = "nats"
	// NATSMon watches the NATS servers' monitoring endpoints and serves
	// their metrics (cmd/natsmon), with NATS and Metrics.
	NATSMon = "natsmon"
)

// Site is the site a local platform's access points name (-site): there
// is one locally, the one config/gtr.yaml names for its cells. It is a
// name for operators; nothing routes by it.
const Site = "site-a"

// DefaultNATSAddr is where a local platform's NATS listens (the usual 4222
// is left to a system server).
const DefaultNATSAddr = "127.0.0.1:7222"

// databaseName is the database each private cluster's cell uses.
const databaseName = "cellpay"

func (c Config) withDefaults() Config {
	if len(c.Cells) == 0 {
		c.Cells = DefaultCells
	}
	if c.IssuerAddr == "" {
		c.IssuerAddr = DefaultIssuerAddr
	}
	if c.GTRAddr == "" {
		c.GTRAddr = DefaultGTRAddr
	}
	if c.AdminAddr == "" {
		c.AdminAddr = DefaultAdminAddr
	}
	if c.BackupGTRAddr == "" {
		c.BackupGTRAddr = DefaultBackupGTRAddr
	}
	if c.BackupAdminAddr == "" {
		c.BackupAdminAddr = DefaultBackupAdminAddr
	}
	if c.GTRSite == "" {
		c.GTRSite = Site
	}
	if c.BackupGTRSite == "" {
		c.BackupGTRSite = Site
	}
	if c.PGBasePort == 0 {
		c.PGBasePort = DefaultPGBasePort
	}
	if c.StandbyBasePort == 0 {
		c.StandbyBasePort = DefaultStandbyBasePort
	}
	if c.FailoverCheckInterval == 0 {
		c.FailoverCheckInterval = DefaultFailoverCheckInterval
	}
	if c.FailoverChecks == 0 {
		c.FailoverChecks = DefaultFailoverChecks
	}
	if c.NATSAddr == "" {
		c.NATSAddr = DefaultNATSAddr
	}
	if c.NATS && c.NATSServerBin == "" {
		c.NATSServerBin = FindNATSServer(c.BinDir)
	}
	if c.NATSServers == 0 {
		c.NATSServers = 3
	}
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	if c.Stderr == nil {
		c.Stderr = io.Discard
	}
	return c
}

func (c Config) validate() error {
	for name, v := range map[string]string{"BinDir": c.BinDir, "DataDir": c.DataDir, "GTRConfig": c.GTRConfig, "RefData": c.RefData} {
		if v == "" {
			return fmt.Errorf("%s is required", name)
		}
	}
	for _, f := range []string{c.GTRConfig, c.RefData} {
		if _, err := os.Stat(f); err != nil {
			return err
		}
	}
	bins := []string{"gtr", "cell", "issuersim"}
	if c.NATS && c.Metrics {
		bins = append(bins, "natsmon")
	}
	for _, bin := range bins {
		if _, err := os.Stat(filepath.Join(c.BinDir, bin)); err != nil {
			return fmt.Errorf("binary %s: %w", bin, err)
		}
	}
	if c.NATS && c.NATSServerBin == "" {
		return errors.New("NATS: no nats-server binary found (apt-get install nats-server)")
	}
	if c.NATSServers < 1 || c.NATSServers > 5 {
		return fmt.Errorf("NATSServers %d: want 1 to 5", c.NATSServers)
	}
	seen := map[string]bool{GTR: true, GTRBackup: true, IssuerSim: true, NATSMon: true}
	for i := range c.NATSServers {
		seen[NATSServer(i)] = true
	}
	if c.CellInstances < 0 || c.CellInstances > 4 {
		return fmt.Errorf("CellInstances %d: want 1 to 4", c.CellInstances)
	}
	for _, cell := range c.Cells {
		if cell.ID == "" || cell.Addr == "" {
			return fmt.Errorf("cell %+v: ID and Addr are required", cell)
		}
		for i, in := range c.instances(cell) {
			if _, err := instanceAddr(cell.Addr, i); err != nil {
				return fmt.Errorf("cell %s: %w", cell.ID, err)
			}
			if seen[in.Name] {
				return fmt.Errorf("cell ID or instance %q is used twice or names another component", in.Name)
			}
			seen[in.Name] = true
		}
	}
	if c.PGBasePort < 1 || c.PGBasePort+len(c.Cells) > 65536 {
		return fmt.Errorf("PGBasePort %d out of range", c.PGBasePort)
	}
	if !c.NoStandby {
		n := len(c.Cells)
		if c.StandbyBasePort < 1 || c.StandbyBasePort+n > 65536 {
			return fmt.Errorf("StandbyBasePort %d out of range", c.StandbyBasePort)
		}
		if c.StandbyBasePort < c.PGBasePort+n && c.PGBasePort < c.StandbyBasePort+n {
			return fmt.Errorf("the standbys' ports from %d overlap the primaries' from %d", c.StandbyBasePort, c.PGBasePort)
		}
		if c.FailoverCheckInterval < 0 || c.FailoverChecks < 1 {
			return errors.New("FailoverCheckInterval and FailoverChecks must be positive")
		}
	}
	return nil
}

// Platform is a running platform. Its methods are safe for concurrent use.
type Platform struct {
	cfg    Config
	logDir string

	procs  map[string]*Proc   // by name; fixed after Start
	order  []*Proc            // start order
	pairs  map[string]*pgPair // by cell ID; fixed after Start; empty with DatabaseURL
	dbURLs map[string]string  // by cell ID: the application role's
	pgLogs []*os.File         // the clusters' log files, closed by Stop
	outMu  sync.Mutex         // shared by every child's Stdout and Stderr writer
	runMu  sync.Mutex         // serialises writes of run.json
	stop   sync.Once
	errs   error
	// stopReceiver stops the sample callback receiver; nil without one.
	stopReceiver func()
	// migrateURLs are the schema owner's, by cell ID; empty with DatabaseURL.
	migrateURLs map[string]string
	// urlMu guards dbURLs and migrateURLs after Start: MoveCellDatabase
	// changes them.
	urlMu sync.RWMutex
	// copies are the cross-site copies StartSiteCopy started, stopped
	// by Stop after the cells; guarded by copyMu.
	copyMu sync.Mutex
	copies []*SiteCopy
	// stopWatch stops the failover watchdogs and waits for them; nil
	// without any.
	stopWatch func()
}

// Start starts Postgres for every cell, the issuer simulator, the cells and
// the GTR, in that order, each one healthy before the next starts, all
// bounded by ctx. On failure it stops whatever it started and returns an
// error naming the component, with the end of its log.
func Start(ctx context.Context, cfg Config) (*Platform, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("platform: config: %w", err)
	}
	// Children, logs and errors see absolute paths, whatever our working
	// directory.
	for _, path := range []*string{&cfg.BinDir, &cfg.DataDir, &cfg.GTRConfig, &cfg.RefData} {
		abs, err := filepath.Abs(*path)
		if err != nil {
			return nil, fmt.Errorf("platform: config: %w", err)
		}
		*path = abs
	}
	p := &Platform{
		cfg:    cfg,
		logDir: filepath.Join(cfg.DataDir, "logs"),
		procs:  map[string]*Proc{},
		pairs:  map[string]*pgPair{},
		dbURLs: map[string]string{},
	}
	p.migrateURLs = map[string]string{}
	if err := os.MkdirAll(p.logDir, 0o755); err != nil {
		return nil, fmt.Errorf("platform: %w", err)
	}
	panKey, err := ensureSecret(filepath.Join(cfg.DataDir, "pan.key"))
	if err != nil {
		return nil, fmt.Errorf("platform: %w", err)
	}
	dbStart := time.Now()
	if err := p.startDatabases(ctx); err != nil {
		p.Stop()
		return nil, err
	}
	p.startWatchdogs()
	if len(p.pairs) > 0 {
		p.logf("databases up in %d ms: %s", time.Since(dbStart).Milliseconds(), p.DescribeDatabases())
	}

	if cfg.NATS {
		if err := p.startNATS(ctx); err != nil {
			p.Stop()
			return nil, err
		}
	}

	p.add(IssuerSim, cfg.IssuerAddr, "issuersim", slices.Concat([]string{"-listen", cfg.IssuerAddr},
		tlsArgs(p.TLSFiles(IssuerCertName)), p.metricsArgs(cfg.IssuerAddr))...)
	for _, cell := range cfg.Cells {
		for _, in := range cfg.instances(cell) {
			p.add(in.Name, in.Addr, "cell",
				"-id", cell.ID,
				"-instance", in.Name,
				"-listen", in.Addr,
				"-issuer", cfg.IssuerAddr,
				"-refdata", cfg.RefData,
				"-pan-key-file", panKey,
				"-callback-ca-file", p.CAFile(),
				"-partners-state-file", filepath.Join(cfg.DataDir, in.Name+"-partners-state.json"))
			// The URLs hold passwords: in the environment, which only our
			// user reads, rather than on a command line that anyone's ps
			// shows and the component's log records.
			p.procs[in.Name].env = append(p.procs[in.Name].env,
				"CELL_DATABASE_URL="+p.dbURLs[cell.ID], "CELL_MIGRATE_DATABASE_URL="+p.migrateURLs[cell.ID])
			p.procs[in.Name].args = slices.Concat(p.procs[in.Name].args, tlsArgs(p.TLSFiles(cell.ID)), p.metricsArgs(in.Addr))
		}
	}
	if err := p.provisionTrust(); err != nil {
		p.Stop()
		return nil, fmt.Errorf("platform: provisioning certificates and partner keys: %w", err)
	}
	// The launcher checks the cells' and the issuer's health as the tools'
	// identity (their servers take only verified clients), each pinned to
	// the identity it dials.
	issuerTLS, err := p.opsTLS(hop.Issuer)
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("platform: %w", err)
	}
	p.procs[IssuerSim].creds = issuerTLS
	for _, cell := range cfg.Cells {
		cellTLS, err := p.opsTLS(hop.Cell(cell.ID))
		if err != nil {
			p.Stop()
			return nil, fmt.Errorf("platform: %w", err)
		}
		for _, in := range cfg.instances(cell) {
			p.procs[in.Name].creds = cellTLS
		}
	}
	if err := p.startReceiver(); err != nil {
		p.Stop()
		return nil, fmt.Errorf("platform: sample callback receiver: %w", err)
	}
	creds, err := p.gtrTLS()
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("platform: %w", err)
	}
	p.addGTR(GTR, cfg.GTRAddr, cfg.AdminAddr, cfg.RESTAddr, "gtr", cfg.GTRSite, cfg.GTRDialFrom, creds)
	if !cfg.NoBackupGTR {
		p.addGTR(GTRBackup, cfg.BackupGTRAddr, cfg.BackupAdminAddr, cfg.BackupRESTAddr, "gtr-backup", cfg.BackupGTRSite, cfg.BackupGTRDialFrom, creds)
	}

	for _, proc := range p.order {
		if proc.Running() {
			continue // NATS, started first for the reference data
		}
		if err := proc.start(ctx); err != nil {
			p.Stop()
			return nil, fmt.Errorf("platform: %w", err)
		}
	}
	if err := p.writeRunInfo(); err != nil {
		p.Stop()
		return nil, fmt.Errorf("platform: %w", err)
	}
	// A component restarted later has a new process ID: tools outside
	// this process read it from run.json.
	for _, proc := range p.order {
		proc.started = func() { _ = p.writeRunInfo() }
	}
	return p, nil
}

// addGTR adds a GTR replica, an access point: its own listeners, replica
// ID, site and state files (gtr-state.json, gtr-partners-state.json and the
// audit spool gtr-audit.jsonl for the primary; <name>-... for the others),
// the shared config, seeds, operators and certificate, in site; restAddr ""
// serves no REST. Loopback, which every client here shares, is throttled
// after failed admin logins as in production (-admin-throttle-loopback's
// default): no test of the platform's fails ten in a minute; one that
// floods a GTR of its own turns it off there.
func (p *Platform) addGTR(name, addr, adminAddr, restAddr, stateName, site, dialFrom string, creds credentials.TransportCredentials) {
	cfg := p.cfg
	certFile, keyFile := p.GTRCertFiles()
	p.add(name, addr, "gtr", "-listen", addr, "-admin-listen", adminAddr, "-config", cfg.GTRConfig,
		"-operators", p.OperatorsFile(), "-audit-file", filepath.Join(cfg.DataDir, stateName+"-audit.jsonl"),
		"-state-file", filepath.Join(cfg.DataDir, stateName+"-state.json"),
		"-tls-cert", certFile, "-tls-key", keyFile, "-partners", p.PartnersFile(),
		"-partners-state-file", filepath.Join(cfg.DataDir, stateName+"-partners-state.json"), "-reflection",
		"-replica-id", name, "-site", site, "-cell-ca", p.CAFile())
	p.procs[name].creds = creds
	p.procs[name].args = append(p.procs[name].args, p.metricsArgs(addr)...)
	if restAddr != "" {
		p.procs[name].args = append(p.procs[name].args, "-rest-listen", restAddr)
	}
	if dialFrom != "" {
		p.procs[name].args = append(p.procs[name].args, "-cell-dial-from", dialFrom)
	}
}

// tlsArgs are a cell's or the issuer's flags for its certificate files.
func tlsArgs(f tlsconf.Files) []string {
	return []string{"-tls-cert", f.Cert, "-tls-key", f.Key, "-tls-ca", f.CA}
}

func (p *Platform) add(name, addr, bin string, args ...string) {
	proc := &Proc{
		Name:    name,
		Addr:    addr,
		path:    filepath.Join(p.cfg.BinDir, bin),
		args:    args,
		env:     append(os.Environ(), p.cfg.Env...),
		logPath: filepath.Join(p.logDir, name+".log"),
		stdout:  newPrefixWriter(name, p.cfg.Stdout, &p.outMu),
		stderr:  newPrefixWriter(name, p.cfg.Stderr, &p.outMu),
	}
	p.procs[name] = proc
	p.order = append(p.order, proc)
}

// Stop stops the GTR replicas first (no new traffic), then the cells, then the issuer
// simulator (SIGTERM, then SIGKILL after 10s), then Postgres. It reports
// every component that did not stop cleanly. Later calls return the first
// call's result.
func (p *Platform) Stop() error {
	p.stop.Do(func() {
		_ = os.Remove(RunFile(p.cfg.DataDir))
		var errs []error
		for _, name := range []string{GTR, GTRBackup} {
			if g := p.procs[name]; g != nil {
				errs = append(errs, g.Stop())
			}
		}
		var wg sync.WaitGroup
		var cellProcs []*Proc
		for _, cell := range p.cfg.Cells {
			for _, in := range p.cfg.instances(cell) {
				if proc := p.procs[in.Name]; proc != nil {
					cellProcs = append(cellProcs, proc)
				}
			}
		}
		cellErrs := make([]error, len(cellProcs))
		for i, proc := range cellProcs {
			wg.Go(func() { cellErrs[i] = proc.Stop() })
		}
		wg.Wait()
		errs = append(errs, cellErrs...)
		if s := p.procs[IssuerSim]; s != nil {
			errs = append(errs, s.Stop())
		}
		if m := p.procs[NATSMon]; m != nil {
			errs = append(errs, m.Stop())
		}
		for _, n := range p.NATSServers() {
			errs = append(errs, n.Stop())
		}
		if p.stopWatch != nil {
			p.stopWatch()
		}
		p.copyMu.Lock()
		copies := p.copies
		p.copyMu.Unlock()
		for _, c := range copies {
			errs = append(errs, c.Stop())
		}
		for _, cell := range p.cfg.Cells {
			if pp := p.pairs[cell.ID]; pp != nil {
				// The primary first: its walsender hands the standby
				// the shutdown checkpoint.
				prim, sb := pp.current()
				for _, c := range []*pgcluster.Cluster{prim, sb} {
					if c != nil {
						errs = append(errs, c.Stop())
					}
				}
			}
		}
		for _, f := range p.pgLogs {
			f.Close()
		}
		if p.stopReceiver != nil {
			p.stopReceiver()
		}
		p.errs = errors.Join(errs...)
	})
	return p.errs
}

// Process returns the component called name ("gtr", "gtr-backup",
// "issuersim", "nats", or a cell ID), or nil.
func (p *Platform) Process(name string) *Proc { return p.procs[name] }

// Processes returns every component in start order.
func (p *Platform) Processes() []*Proc { return append([]*Proc(nil), p.order...) }

// Postgres returns the private cluster of cellID that is its primary now
// (after a failover, the promoted standby), or nil when the platform uses
// DatabaseURL.
func (p *Platform) Postgres(cellID string) *pgcluster.Cluster {
	pp := p.pairs[cellID]
	if pp == nil {
		return nil
	}
	prim, _ := pp.current()
	return prim
}

// Config returns the configuration the platform runs with, defaults filled in.
func (p *Platform) Config() Config { return p.cfg }

// LogDir returns the directory of the components' logs.
func (p *Platform) LogDir() string { return p.logDir }

// ensureSecret creates path holding 32 random bytes in hex (mode 0600) if
// it does not exist, checks it if it does, and returns path.
func ensureSecret(path string) (string, error) {
	name := filepath.Base(path)
	if b, err := os.ReadFile(path); err == nil {
		if k, err := hex.DecodeString(strings.TrimSpace(string(b))); err != nil || len(k) != 32 {
			return "", fmt.Errorf("%s: want 64 hex digits", path)
		}
		return path, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	_, err = f.WriteString(hex.EncodeToString(key) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return path, nil
}

// stopTimeout is how long a component gets to exit after SIGTERM: more
// than the GTR's and the cell's own bound on finishing the work in flight
// (their ShutdownTimeout, 15 s), as a pod's termination grace period is, so
// that a slow drain is the component's to log and end, not a kill.
const stopTimeout = 20 * time.Second

// MetricsAddr is where the component listening on addr serves /metrics
// when Config.Metrics is set: the same host, port + 2000.
func MetricsAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	n, err := strconv.Atoi(port)
	if err != nil || n+2000 > 65535 {
		return ""
	}
	return net.JoinHostPort(host, strconv.Itoa(n+2000))
}

func (p *Platform) metricsArgs(addr string) []string {
	if !p.cfg.Metrics {
		return nil
	}
	if m := MetricsAddr(addr); m != "" {
		return []string{"-metrics-listen", m}
	}
	return nil
}
