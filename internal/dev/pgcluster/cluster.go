// Package pgcluster starts a private PostgreSQL cluster from the installed
// server binaries, for tests and for running the platform on one machine.
//
// The server runs as a child process, never daemonised: it is in its own
// process group (a terminal's Ctrl-C reaches us, and we shut it down in
// order) and gets a fast-shutdown signal if we die, so a crashed test binary
// does not leave a postmaster behind. It listens on 127.0.0.1 only.
//
// Without Config.TLS it trusts every connection (tests' throwaway
// clusters): it must never be exposed beyond loopback. With it, TCP takes
// only TLS and SCRAM passwords (EnsureRoles makes the roles that have
// them), and the superuser has no password: it connects by the Unix
// socket in a directory only we can reach, and never over TCP.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Superuser is the role initdb creates and every URL connects as.
const Superuser = "postgres"

// Config describes a cluster. The zero value is not valid: DataDir is required.
type Config struct {
	// DataDir is created and initialised with initdb when it is missing or
	// empty, and reused when it already holds a cluster.
	DataDir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// BinDir holds initdb and postgres; "" finds the newest
	// /usr/lib/postgresql/*/bin. (Only cmd/ reads PG_BIN_DIR.)
	BinDir string
	// Log receives the server's log; nil writes DataDir/postgres.log.
	Log io.Writer
	// Settings are extra postgresql.conf settings, applied on the server's
	// command line after the defaults (max_connections 200, shared_buffers
	// 128MB) so they override them. port, listen_addresses and
	// unix_socket_directories are owned by the cluster and rejected here.
	Settings map[string]string
	// NoSync trades durability for speed, for throwaway test clusters only:
	// initdb --no-sync, and fsync and synchronous_commit off in the server.
	// Leave it false whenever a crash must not lose committed data.
	NoSync bool
	// TLS, when set, turns on TLS and password authentication (see the
	// package doc). The files are copied into the data dir on every Start,
	// so a renewed certificate is served from the next one.
	TLS *TLS
	// Standby, when set, makes the cluster a streaming standby: a missing
	// or empty DataDir is filled by a base backup of the primary instead
	// of initdb, and one that holds a primary is refused (ErrNotStandby).
	// See standby.go. The server keeps the primary's settings otherwise.
	Standby *Standby
	// ReplicationUser, with TLS, is the role that may connect for
	// replication (hostssl replication, SCRAM): the `all` database keyword
	// of the other pg_hba lines does not cover replication. Give it to a
	// primary and to its standby alike, since the standby may be promoted.
	ReplicationUser string
}

// TLS names the server's certificate and private key, PEM files.
type TLS struct {
	CertFile, KeyFile string
}

func (c Config) validate() error {
	if c.DataDir == "" {
		return errors.New("DataDir is required")
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("port %d out of range", c.Port)
	}
	// synchronous_standby_names changes at run time (ALTER SYSTEM, see
	// SetSynchronousStandby), which a command-line setting would override.
	managed := []string{"port", "listen_addresses", "unix_socket_directories", "synchronous_standby_names"}
	if c.Standby != nil {
		if err := c.Standby.validate(c.TLS != nil); err != nil {
			return err
		}
		managed = append(managed, "primary_conninfo", "primary_slot_name")
	}
	if c.ReplicationUser != "" && !simpleName.MatchString(c.ReplicationUser) {
		return errors.New("ReplicationUser must be [a-z0-9_]+")
	}
	if c.TLS != nil {
		if c.TLS.CertFile == "" || c.TLS.KeyFile == "" {
			return errors.New("TLS: CertFile and KeyFile are required")
		}
		managed = append(managed, tlsManaged...)
	}
	for _, k := range managed {
		if _, ok := c.Settings[k]; ok {
			return fmt.Errorf("setting %q is managed by pgcluster", k)
		}
	}
	return nil
}

// Timeouts for shutting the server down. Fast shutdown normally takes well
// under a second; the bound is there so a wedged server cannot hang a test.
const (
	stopTimeout = 30 * time.Second
	killTimeout = 5 * time.Second
)

// Cluster is a running (or stopped) private cluster. Its methods are safe for
// concurrent use.
type Cluster struct {
	dataDir  string
	binDir   string
	port     int
	cred     *syscall.Credential // nil: run as ourselves
	tls      bool                // Config.TLS was set: the superuser uses the socket
	replUser string              // Config.ReplicationUser
	args     []string            // postgres command line after the binary
	log      logSink

	mu  sync.Mutex // guards srv; held across start and stop so they do not interleave
	srv *child     // nil before the first start
	// stopped: the last exit was asked for (Stop, Restart), not a crash.
	stopped bool
	// fenced: Fence was called; the server never starts again.
	fenced bool

	// probeMu guards probe, the superuser session InRecovery keeps
	// between calls. It is not mu: a check must not wait for a restart.
	probeMu sync.Mutex
	probe   *pgx.Conn
}

// Start initialises cfg.DataDir if needed, starts the server and waits until
// it accepts connections or ctx ends. On error nothing is left running.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("pgcluster: config: %w", err)
	}
	c, err := newCluster(cfg)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	if IsFenced(c.dataDir) {
		return nil, ErrFenced
	}
	if cfg.Standby != nil {
		if err := c.prepareStandby(ctx, *cfg.Standby, cfg.NoSync); err != nil {
			if errors.Is(err, ErrNotStandby) {
				return nil, err
			}
			return nil, fmt.Errorf("pgcluster: %w", err)
		}
	} else if err := c.initdb(ctx, cfg.NoSync); err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	if cfg.TLS != nil {
		if err := c.prepareTLS(*cfg.TLS); err != nil {
			return nil, fmt.Errorf("pgcluster: %w", err)
		}
	}

	// A port picked by us can be taken by someone else before the server
	// binds it; pick another rather than fail.
	attempts := 1
	if cfg.Port == 0 {
		attempts = 3
	}
	for i := 0; ; i++ {
		if cfg.Port == 0 {
			if c.port, err = freePort(); err != nil {
				return nil, fmt.Errorf("pgcluster: %w", err)
			}
		}
		c.args = serverArgs(c.dataDir, c.port, cfg)
		c.mu.Lock()
		err = c.start(ctx)
		c.mu.Unlock()
		if err == nil {
			return c, nil
		}
		if i+1 >= attempts || ctx.Err() != nil || !errors.Is(err, errExited) {
			return nil, fmt.Errorf("pgcluster: start: %w%s", err, c.log.tailSection())
		}
	}
}

func newCluster(cfg Config) (*Cluster, error) {
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	binDir := cfg.BinDir
	if binDir == "" {
		if binDir, err = findBinDir(); err != nil {
			return nil, err
		}
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	if err := prepareDataDir(dataDir, cred); err != nil {
		return nil, err
	}
	return &Cluster{
		dataDir:  dataDir,
		binDir:   binDir,
		port:     cfg.Port,
		cred:     cred,
		tls:      cfg.TLS != nil,
		replUser: cfg.ReplicationUser,
		log:      newLogSink(cfg.Log, filepath.Join(dataDir, "postgres.log"), cred),
	}, nil
}

// serverArgs builds the postgres command line. Settings go on the command
// line rather than into postgresql.conf so a reused data dir always runs with
// the configuration it was started with this time.
func serverArgs(dataDir string, port int, cfg Config) []string {
	settings := map[string]string{
		"max_connections": "200",
		"shared_buffers":  "128MB",
	}
	if cfg.NoSync {
		settings["fsync"] = "off"
		settings["synchronous_commit"] = "off"
	}
	for k, v := range cfg.Settings {
		settings[k] = v
	}
	if cfg.TLS != nil {
		for k, v := range tlsSettings(dataDir) {
			settings[k] = v
		}
	}
	if cfg.Standby != nil {
		for k, v := range standbySettings(dataDir, *cfg.Standby) {
			settings[k] = v
		}
	}
	settings["port"] = strconv.Itoa(port)
	settings["listen_addresses"] = "127.0.0.1"
	settings["unix_socket_directories"] = socketDir(dataDir)

	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := []string{"-D", dataDir}
	for _, k := range keys {
		args = append(args, "-c", k+"="+settings[k])
	}
	return args
}

// Port returns the TCP port the server listens on at 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// DataDir returns the absolute data directory.
func (c *Cluster) DataDir() string { return c.dataDir }

// URL returns a connection URL for database as the superuser: over TCP
// without TLS, or, when the cluster has TLS, over its Unix socket (which
// only we can reach).
func (c *Cluster) URL(database string) string {
	if c.tls {
		q := url.Values{"host": {socketDir(c.dataDir)}, "port": {strconv.Itoa(c.port)}, "sslmode": {"disable"}}
		return (&url.URL{Scheme: "postgres", User: url.User(Superuser), Path: "/" + database, RawQuery: q.Encode()}).String()
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(Superuser),
		Host:     "127.0.0.1:" + strconv.Itoa(c.port),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// CreateDatabase creates database name unless it already exists.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) error {
	return CreateDatabase(ctx, c.URL("postgres"), name)
}

// DropDatabase drops database name if it exists, disconnecting its sessions.
func (c *Cluster) DropDatabase(ctx context.Context, name string) error {
	return DropDatabase(ctx, c.URL("postgres"), name)
}

// CreateDatabase creates database name on the server at serverURL unless it
// already exists. It works against any server, not only a private cluster.
func CreateDatabase(ctx context.Context, serverURL, name string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("pgcluster: create database %s: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	if err == nil && !exists {
		_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: lost a race, which is fine
		err = nil
	}
	if err != nil {
		return fmt.Errorf("pgcluster: create database %s: %w", name, err)
	}
	return nil
}

// DropDatabase drops database name on the server at serverURL if it exists,
// terminating its sessions first (WITH (FORCE)).
func DropDatabase(ctx context.Context, serverURL, name string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("pgcluster: drop database %s: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("pgcluster: drop database %s: %w", name, err)
	}
	return nil
}

// Pid returns the postmaster's process id, or 0 before the first start;
// after the server exits it keeps returning the last one. Its children
// run each in a session of its own: Signal and Kill reach them.
func (c *Cluster) Pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.srv == nil {
		return 0
	}
	return c.srv.pid()
}

// Pids returns the process ids of the running server: the postmaster
// and every live process it started, or none when it is not running. For
// tests that check a stopped server left nothing behind (each child is in
// a session of its own, so the postmaster's process group does not hold
// them).
func (c *Cluster) Pids() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.srv.running() {
		return nil
	}
	return append([]int{c.srv.pid()}, childrenOf(c.srv.pid())...)
}

// Signal sends sig to the server's postmaster and every process it
// started (backends, WAL sender and receiver, checkpointer): SIGSTOP
// freezes the server as a hung host would (its sockets stay open, nothing
// answers, a standby acknowledges no WAL), SIGCONT thaws it. Signalling a
// server that is not running does nothing.
func (c *Cluster) Signal(sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.srv.signalTree(sig)
	return err
}

// Running reports whether the server process is alive.
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.srv.running()
}

// Stop shuts the server down with a fast shutdown (SIGINT to the postmaster:
// sessions are disconnected, then a checkpoint) and waits for it. A server
// that does not exit within 30s is killed and Stop reports it. Stopping a
// stopped cluster does nothing.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stop()
}

func (c *Cluster) stop() error {
	c.stopped = true
	c.closeProbe()
	if !c.srv.running() {
		return nil
	}
	_ = c.srv.signal(syscall.SIGINT)
	if c.srv.wait(stopTimeout) {
		c.removeSocketDir()
		if err := c.srv.err; err != nil {
			return fmt.Errorf("pgcluster: stop: postgres exited: %w%s", err, c.log.tailSection())
		}
		return nil
	}
	if err := c.kill(); err != nil {
		return err
	}
	return fmt.Errorf("pgcluster: stop: postgres did not exit within %v of SIGINT; killed%s", stopTimeout, c.log.tailSection())
}

// Kill sends SIGKILL to the server and all its backends, as a crash would,
// and waits for them. The next start runs crash recovery. Killing a stopped
// cluster does nothing.
func (c *Cluster) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kill()
}

func (c *Cluster) kill() error {
	c.closeProbe()
	if !c.srv.running() {
		return nil
	}
	// Every backend too: one that outlives its postmaster keeps the shared
	// memory attached, and the next postmaster refuses to start.
	pids, _ := c.srv.signalTree(syscall.SIGKILL)
	if !c.srv.wait(killTimeout) {
		return fmt.Errorf("pgcluster: kill: postgres (pid %d) did not exit within %v of SIGKILL", c.srv.pid(), killTimeout)
	}
	waitGone(pids, killTimeout)
	return nil
}

// Restart starts the server again on the same data directory and port and
// waits until it accepts connections. A running server is stopped first.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fenced {
		return ErrFenced
	}
	if err := c.stop(); err != nil {
		return err
	}
	// A server that was killed may leave a backend exiting for a moment, so an
	// early exit is retried once before giving up.
	err := c.start(ctx)
	if errors.Is(err, errExited) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
		err = c.start(ctx)
	}
	if err != nil {
		return fmt.Errorf("pgcluster: restart: %w%s", err, c.log.tailSection())
	}
	return nil
}

// start runs postgres and waits until it answers. c.mu must be held.
func (c *Cluster) start(ctx context.Context) error {
	if c.fenced || IsFenced(c.dataDir) {
		return ErrFenced
	}
	c.stopped = false
	if err := c.prepareSocketDir(); err != nil {
		return err
	}
	out, closeOut, err := c.log.writer()
	if err != nil {
		return err
	}
	cmd := c.command("postgres", c.args...)
	cmd.Stdout, cmd.Stderr = out, out
	// Fast shutdown if we die: sessions are cut, and the data is consistent.
	// (SIGTERM would be a smart shutdown, which waits for clients.)
	cmd.SysProcAttr.Pdeathsig = syscall.SIGINT
	srv, err := startChild(cmd)
	closeOut() // the child holds its own descriptor
	if err != nil {
		return fmt.Errorf("run postgres: %w", err)
	}
	c.srv = srv
	if err := c.waitReady(ctx); err != nil {
		_ = c.kill()
		return err
	}
	return nil
}

// errExited marks a server that exited before it accepted connections.
var errExited = errors.New("postgres exited during startup")

// waitReady pings the server until it answers, it exits, or ctx ends.
func (c *Cluster) waitReady(ctx context.Context) error {
	var lastErr error
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		lastErr = pingOwn(attempt, c.URL("postgres"), c.dataDir)
		cancel()
		if lastErr == nil {
			return nil
		}
		select {
		case <-c.srv.done:
			return fmt.Errorf("%w: %v", errExited, c.srv.err)
		case <-ctx.Done():
			return fmt.Errorf("waiting for postgres on port %d: %w (last error: %v)", c.port, ctx.Err(), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pingOwn connects to url and checks that the server there runs on
// dataDir. A port picked free a moment ago can be taken by another server
// (a parallel test's): answering for it would hand our caller someone
// else's database, while our own server, unable to bind, exits.
func pingOwn(ctx context.Context, url, dataDir string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var dir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		return err
	}
	if filepath.Clean(dir) != filepath.Clean(dataDir) {
		return fmt.Errorf("the port is served by another postgres (data directory %s)", dir)
	}
	return nil
}
