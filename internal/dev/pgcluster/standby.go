package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Streaming replication. A standby is a cluster whose data dir began as a
// base backup of a running primary (pg_basebackup, over TLS as the
// replication role when the primary has TLS) and that streams the
// primary's WAL through a physical replication slot, under an
// application_name that the primary's synchronous_standby_names can
// name. Which server is the primary is the caller's to decide; this
// package only performs: EnsureReplication on the primary, Config.Standby
// for the standby, SetSynchronousStandby, Promote, Fence.

// Standby makes a cluster a streaming standby of a primary on 127.0.0.1.
type Standby struct {
	// PrimaryPort is the primary's TCP port on 127.0.0.1.
	PrimaryPort int
	// User and Password are the replication role's (EnsureReplication),
	// for a primary with TLS. Without TLS, "" connects as the superuser
	// by initdb's trust rules.
	User, Password string
	// CAFile verifies the primary's certificate (sslmode=verify-full)
	// when User is set. It is copied into the data dir on every start.
	CAFile string
	// Slot is the primary's physical replication slot (EnsureReplication
	// makes it) and Name the standby's application_name, which
	// synchronous_standby_names names. Both are [a-z0-9_]+.
	Slot, Name string
}

var simpleName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

func (s Standby) validate(tls bool) error {
	if s.PrimaryPort < 1 || s.PrimaryPort > 65535 {
		return fmt.Errorf("standby: primary port %d out of range", s.PrimaryPort)
	}
	if !simpleName.MatchString(s.Slot) || !simpleName.MatchString(s.Name) {
		return errors.New("standby: Slot and Name must be [a-z0-9_]+")
	}
	if tls && (s.User == "" || s.Password == "" || s.CAFile == "") {
		return errors.New("standby: with TLS, User, Password and CAFile are required")
	}
	return nil
}

// Files a standby keeps in its data dir.
const (
	standbyCAFile   = "cellpay-primary-ca.crt"
	standbyPassFile = "cellpay-replication.pgpass"
	fencedFile      = "cellpay.fenced"
)

// Errors callers branch on.
var (
	// ErrFenced: the cluster was fenced (Fence) and never runs again.
	ErrFenced = errors.New("pgcluster: fenced: this server must never run again (it was a primary that was failed over)")
	// ErrNotStandby: Config.Standby names a data dir that holds a primary
	// (no standby.signal): running it as a standby would hide a diverged
	// history, so it is refused.
	ErrNotStandby = errors.New("pgcluster: the data dir holds a primary, not a standby")
)

// IsStandby reports whether dataDir holds a cluster in standby mode
// (standby.signal), which is what it starts as.
func IsStandby(dataDir string) bool {
	_, err := os.Stat(filepath.Join(dataDir, "standby.signal"))
	return err == nil
}

// IsFenced reports whether dataDir holds a fenced cluster.
func IsFenced(dataDir string) bool {
	_, err := os.Stat(filepath.Join(dataDir, fencedFile))
	return err == nil
}

// conninfoValue quotes v for a libpq conninfo string.
func conninfoValue(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// Connection timeouts to the primary, in seconds. The standby's WAL
// receiver reconnects by itself, so a short one only costs a retry; the
// base backup connects once, and on a machine busy starting several
// clusters a TLS handshake with a SCRAM exchange has taken longer than 2 s.
const (
	streamConnectTimeout = 2
	backupConnectTimeout = 30
)

// primaryConninfo is how the standby on dataDir reaches its primary, with
// the password in a passfile so that the command line (ps) never holds it.
func primaryConninfo(s Standby, passfile, caFile string, connectTimeout int) string {
	parts := []string{
		"host=127.0.0.1",
		"port=" + strconv.Itoa(s.PrimaryPort),
		"application_name=" + s.Name,
		"connect_timeout=" + strconv.Itoa(connectTimeout),
	}
	if s.User == "" {
		parts = append(parts, "user="+Superuser, "sslmode=disable")
	} else {
		parts = append(parts, "user="+conninfoValue(s.User), "passfile="+conninfoValue(passfile),
			"sslmode=verify-full", "sslrootcert="+conninfoValue(caFile),
			// No client certificate: it authenticates by password, and
			// libpq would look for one in ~/.postgresql, a home that may not
			// be the server user's. A missing file is skipped quietly.
			"sslcert="+conninfoValue(passfile+".no-client-cert"))
	}
	return strings.Join(parts, " ")
}

func standbySettings(dataDir string, s Standby) map[string]string {
	return map[string]string{
		"primary_conninfo":  primaryConninfo(s, filepath.Join(dataDir, standbyPassFile), filepath.Join(dataDir, standbyCAFile), streamConnectTimeout),
		"primary_slot_name": s.Slot,
		"hot_standby":       "on",
	}
}

func passfileLine(s Standby) []byte {
	esc := strings.NewReplacer(`\`, `\\`, `:`, `\:`)
	return []byte("127.0.0.1:" + strconv.Itoa(s.PrimaryPort) + ":*:" + esc.Replace(s.User) + ":" + esc.Replace(s.Password) + "\n")
}

// prepareStandby makes c.dataDir a base backup of the primary unless it
// already holds a cluster, which must then be a standby; and writes the
// files its primary_conninfo names.
func (c *Cluster) prepareStandby(ctx context.Context, s Standby, noSync bool) error {
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		if !IsStandby(c.dataDir) {
			return ErrNotStandby
		}
	} else if err := c.basebackup(ctx, s, noSync); err != nil {
		return err
	}
	if s.User == "" {
		return nil
	}
	ca, err := os.ReadFile(s.CAFile)
	if err != nil {
		return fmt.Errorf("standby: %w", err)
	}
	if err := c.writeOwned(standbyCAFile, ca, 0o644); err != nil {
		return fmt.Errorf("standby: %w", err)
	}
	return c.writeOwned(standbyPassFile, passfileLine(s), 0o600)
}

// basebackup fills the empty c.dataDir with a copy of the primary,
// streaming the WAL written meanwhile through the slot, and marks it a
// standby. The CA and password it connects with sit in a directory of
// their own beside the data dir (which pg_basebackup wants empty) for the
// time it runs.
func (c *Cluster) basebackup(ctx context.Context, s Standby, noSync bool) error {
	tmp := filepath.Join(filepath.Dir(c.dataDir), "."+filepath.Base(c.dataDir)+".basebackup")
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("basebackup: %w", err)
	}
	if err := prepareDataDir(tmp, c.cred); err != nil {
		return fmt.Errorf("basebackup: %w", err)
	}
	defer os.RemoveAll(tmp)
	conninfo := primaryConninfo(s, filepath.Join(tmp, "pgpass"), filepath.Join(tmp, "ca.crt"), backupConnectTimeout)
	if s.User != "" {
		ca, err := os.ReadFile(s.CAFile)
		if err != nil {
			return fmt.Errorf("basebackup: %w", err)
		}
		tc := &Cluster{dataDir: tmp, cred: c.cred}
		if err := tc.writeOwned("ca.crt", ca, 0o644); err != nil {
			return fmt.Errorf("basebackup: %w", err)
		}
		if err := tc.writeOwned("pgpass", passfileLine(s), 0o600); err != nil {
			return fmt.Errorf("basebackup: %w", err)
		}
	}
	args := []string{"-D", c.dataDir, "-d", conninfo, "-X", "stream", "-S", s.Slot, "-c", "fast", "--no-password"}
	if noSync {
		args = append(args, "--no-sync")
	}
	cmd := c.command("pg_basebackup", args...)
	cmd.Dir = tmp // the data dir must stay empty
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := runContext(ctx, cmd); err != nil {
		// Leave no half copy: the next start would take it for a standby.
		c.emptyDataDir()
		return fmt.Errorf("pg_basebackup from port %d: %w\n%s", s.PrimaryPort, err, strings.TrimSpace(out.String()))
	}
	// The copy holds the primary's runtime leftovers: none is ours.
	for _, f := range []string{"sock", "postgres.log", fencedFile} {
		_ = os.RemoveAll(filepath.Join(c.dataDir, f))
	}
	if err := c.writeOwned("standby.signal", nil, 0o600); err != nil {
		return fmt.Errorf("basebackup: %w", err)
	}
	return c.log.record(out.Bytes())
}

func (c *Cluster) emptyDataDir() {
	entries, _ := os.ReadDir(c.dataDir)
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(c.dataDir, e.Name()))
	}
}

// Replication is the role standbys stream with: REPLICATION LOGIN and
// nothing else, with a SCRAM password (sent as a verifier, as
// EnsureRoles does).
type Replication struct {
	User, Password string
}

// EnsureReplication prepares the primary at serverURL (a superuser's)
// for a standby: the replication role r, unless r.User is "" (clusters
// without TLS replicate as the superuser), and the physical slot, made
// with its WAL reserved at once so that a base backup through it misses
// nothing. It is safe to repeat.
func EnsureReplication(ctx context.Context, serverURL string, r Replication, slot string) error {
	if !simpleName.MatchString(slot) {
		return errors.New("pgcluster: replication: slot must be [a-z0-9_]+")
	}
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("pgcluster: replication: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if r.User != "" {
		if !simpleName.MatchString(r.User) {
			return errors.New("pgcluster: replication: User must be [a-z0-9_]+")
		}
		if err := validPassword(r.Password); err != nil {
			return fmt.Errorf("pgcluster: replication: %w", err)
		}
		verifier, err := scramVerifier(r.Password)
		if err != nil {
			return fmt.Errorf("pgcluster: replication: %w", err)
		}
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", r.User).Scan(&exists); err != nil {
			return fmt.Errorf("pgcluster: replication: %w", err)
		}
		verb := "CREATE"
		if exists {
			verb = "ALTER"
		}
		if _, err := conn.Exec(ctx, verb+" ROLE "+pgx.Identifier{r.User}.Sanitize()+
			" LOGIN REPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS PASSWORD '"+verifier+"'"); err != nil {
			return fmt.Errorf("pgcluster: replication: role %s: %w", r.User, err)
		}
	}
	if _, err := conn.Exec(ctx, `SELECT pg_create_physical_replication_slot($1, true)
		WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, slot); err != nil {
		return fmt.Errorf("pgcluster: replication: slot %s: %w", slot, err)
	}
	return nil
}

// superConn connects to the cluster as the superuser.
func (c *Cluster) superConn(ctx context.Context) (*pgx.Conn, error) {
	return pgx.Connect(ctx, c.URL("postgres"))
}

// SetSynchronousStandby sets the primary's synchronous_standby_names to
// name, so that a commit returns only once the standby called name has
// flushed it (synchronous_commit on, the default), or with "" to no
// standby at all: commits then return on the primary's own flush. It is
// kept in postgresql.auto.conf (ALTER SYSTEM), so it survives a restart,
// and waits, bounded by ctx, until new sessions see it. Commits waiting
// for a standby when it is cleared are released.
func (c *Cluster) SetSynchronousStandby(ctx context.Context, name string) error {
	if name != "" && !simpleName.MatchString(name) {
		return errors.New("pgcluster: synchronous standby: name must be [a-z0-9_]+")
	}
	conn, err := c.superConn(ctx)
	if err != nil {
		return fmt.Errorf("pgcluster: synchronous standby: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '"+name+"'"); err != nil {
		return fmt.Errorf("pgcluster: synchronous standby: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("pgcluster: synchronous standby: %w", err)
	}
	// The reload is a signal: wait until a new session sees the value.
	for {
		got, err := c.showOnNewSession(ctx, "synchronous_standby_names")
		if err == nil && got == name {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: synchronous standby: waiting for the reload: %w (last: %q, %v)", ctx.Err(), got, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *Cluster) showOnNewSession(ctx context.Context, setting string) (string, error) {
	conn, err := c.superConn(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var v string
	err = conn.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&v)
	return v, err
}

// SynchronousStandby returns the primary's synchronous_standby_names.
func (c *Cluster) SynchronousStandby(ctx context.Context) (string, error) {
	return c.showOnNewSession(ctx, "synchronous_standby_names")
}

// WaitStreaming waits, bounded by ctx, until the standby called name
// streams from this primary, and returns its sync_state (async, sync,
// potential, quorum).
func (c *Cluster) WaitStreaming(ctx context.Context, name string) (string, error) {
	for {
		state, err := c.streamingState(ctx, name)
		if err == nil && state != "" {
			return state, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("pgcluster: waiting for standby %s to stream: %w (last error: %v)", name, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitSynchronous waits, bounded by ctx, until the standby called name
// streams as the synchronous one (sync_state sync): the walsenders see a
// new synchronous_standby_names a moment after sessions do.
func (c *Cluster) WaitSynchronous(ctx context.Context, name string) error {
	for {
		state, err := c.streamingState(ctx, name)
		if err == nil && state == "sync" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: waiting for standby %s to be synchronous: %w (state %q, last error: %v)", name, ctx.Err(), state, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *Cluster) streamingState(ctx context.Context, name string) (string, error) {
	conn, err := c.superConn(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var state string
	err = conn.QueryRow(ctx, "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'", name).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return state, err
}

// InRecovery reports whether the server is a standby (pg_is_in_recovery).
// It asks on a session it keeps from call to call, made again after any
// error, so that a watchdog can call it twice a second: a new session is
// a backend start, about 50 ms of the server's CPU on a 2-core host, and
// a check that connected each time cost each primary a tenth of a core
// while idle. (Patroni and CloudNativePG's instance manager keep their
// session too.) A server that hangs fails the query by ctx, and the
// reconnect after it by ctx again; only a postmaster frozen while its
// backends run goes unseen, as the cells' own sessions would keep working.
func (c *Cluster) InRecovery(ctx context.Context) (bool, error) {
	c.probeMu.Lock()
	defer c.probeMu.Unlock()
	if c.probe == nil || c.probe.IsClosed() {
		conn, err := c.superConn(ctx)
		if err != nil {
			return false, err
		}
		c.probe = conn
	}
	var r bool
	if err := c.probe.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&r); err != nil {
		c.closeProbeLocked()
		return false, err
	}
	return r, nil
}

// closeProbe closes InRecovery's session, if any (a stopped or killed
// server's is broken anyway: this frees it at once).
func (c *Cluster) closeProbe() {
	c.probeMu.Lock()
	defer c.probeMu.Unlock()
	c.closeProbeLocked()
}

func (c *Cluster) closeProbeLocked() {
	if c.probe == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond) // a goodbye to a server that may be gone
	defer cancel()
	_ = c.probe.Close(ctx)
	c.probe = nil
}

// Promote turns a standby into a primary (pg_promote, waiting until it
// takes writes), then clears its synchronous_standby_names: it has no
// standby yet, and the name its copy of postgresql.auto.conf may hold
// (the old primary's, which named this very server) would make every
// commit wait forever. The caller requires a standby again with
// SetSynchronousStandby once one streams.
func (c *Cluster) Promote(ctx context.Context) error {
	conn, err := c.superConn(ctx)
	if err != nil {
		return fmt.Errorf("pgcluster: promote: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&ok); err != nil {
		return fmt.Errorf("pgcluster: promote: %w", err)
	}
	if !ok {
		return errors.New("pgcluster: promote: not promoted within 60 s")
	}
	if err := c.SetSynchronousStandby(ctx, ""); err != nil {
		return fmt.Errorf("pgcluster: promote: %w", err)
	}
	return nil
}

// Fence makes sure the server never accepts a write again: it kills it
// (SIGKILL to its whole group) if it still runs, marks the data dir
// (cellpay.fenced, which Start refuses), and makes every later Restart
// fail with ErrFenced. A data dir that is gone already is fine: there is
// nothing left to start.
func (c *Cluster) Fence() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fenced = true
	if err := c.kill(); err != nil {
		return err
	}
	if _, err := os.Stat(c.dataDir); err != nil {
		return nil
	}
	if err := c.writeOwned(fencedFile, []byte("fenced at "+time.Now().UTC().Format(time.RFC3339)+"\n"), 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pgcluster: fence: %w", err)
	}
	return nil
}

// Crashed reports whether the server exited without being asked to (Stop,
// Restart or Fence): a crash, an OOM kill, someone's kill -9, or Kill,
// which stands for those.
func (c *Cluster) Crashed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.srv != nil && !c.srv.running() && !c.stopped && !c.fenced
}

// Exited returns a channel closed when the server process of the current
// run exits (for whatever reason; Crashed tells which), or nil before
// the first start. A watchdog waits on it to see a crash at once rather
// than at its next check.
func (c *Cluster) Exited() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.srv == nil {
		return nil
	}
	return c.srv.done
}
