package pgcluster

// Backups and restores, as CloudNativePG's Barman Cloud plugin makes them
// in Kubernetes, done locally with PostgreSQL's own tools: a base backup
// of a running server (pg_basebackup, tar format, with the WAL it needs to
// be consistent), every WAL segment the server completes archived into a
// directory (pg_receivewal through a replication slot, so that none is
// recycled before it is archived), and a restore: a new data dir made from
// the base backup that replays the archive to its end (restore_command),
// then takes writes on a new timeline. The directories stand in for the
// object store; barman.go does the same with the plugin's own tools
// against an object store.

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Source is a running server to back up, reached for replication as a
// standby reaches its primary (Standby): over TLS as the replication role
// User when it is set, verifying the server's certificate against CAFile;
// as the superuser without TLS when it is "".
type Source struct {
	Port                   int
	User, Password, CAFile string
	// BinDir holds pg_basebackup and pg_receivewal; "" finds the newest.
	BinDir string
}

// backupApplicationName is the application_name backups connect with: no
// synchronous_standby_names names it, so a primary never waits for them.
const backupApplicationName = "cellpay_backup"

// Files of a base backup (pg_basebackup -F tar -X stream).
const (
	baseTar = "base.tar"
	walTar  = "pg_wal.tar"
)

// tool is a client binary of the server's, run as the server user with a
// connection to src: what it needs to connect (the CA, a passfile) sits
// in a directory of its own beside dir, for as long as it runs.
type tool struct {
	binDir string
	cred   *syscall.Credential
	src    Source
	conn   string // the conninfo
	tmp    string
}

func newTool(src Source, dir string) (*tool, error) {
	if src.Port < 1 || src.Port > 65535 {
		return nil, fmt.Errorf("source port %d out of range", src.Port)
	}
	binDir := src.BinDir
	if binDir == "" {
		var err error
		if binDir, err = findBinDir(); err != nil {
			return nil, err
		}
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	t := &tool{binDir: binDir, cred: cred, src: src,
		tmp: filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".conn")}
	if err := os.RemoveAll(t.tmp); err != nil {
		return nil, err
	}
	if err := prepareDataDir(t.tmp, cred); err != nil {
		return nil, err
	}
	s := Standby{PrimaryPort: src.Port, User: src.User, Password: src.Password, Name: backupApplicationName}
	t.conn = primaryConninfo(s, filepath.Join(t.tmp, "pgpass"), filepath.Join(t.tmp, "ca.crt"), backupConnectTimeout)
	if src.User != "" {
		ca, err := os.ReadFile(src.CAFile)
		if err != nil {
			t.close()
			return nil, err
		}
		owner := &Cluster{dataDir: t.tmp, cred: cred}
		if err := owner.writeOwned("ca.crt", ca, 0o644); err != nil {
			t.close()
			return nil, err
		}
		if err := owner.writeOwned("pgpass", passfileLine(s), 0o600); err != nil {
			t.close()
			return nil, err
		}
	}
	return t, nil
}

func (t *tool) close() { _ = os.RemoveAll(t.tmp) }

// command is one of the client binaries, run as the server user, in its
// own process group, from t's directory (which the server user owns).
func (t *tool) command(name string, args ...string) *exec.Cmd {
	c := &Cluster{binDir: t.binDir, dataDir: t.tmp, cred: t.cred}
	return c.command(name, args...)
}

// run runs a client binary to its end, killed if ctx ends first, and
// returns its output.
func (t *tool) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := t.command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	err := runContext(ctx, cmd)
	return strings.TrimSpace(out.String()), err
}

// BaseBackup takes a base backup of src into dir, which must be missing
// or empty: base.tar (the data dir) and pg_wal.tar (the WAL written while
// it ran, enough to make it consistent), as pg_basebackup's tar format
// writes them, and its backup_manifest. It asks for a fast checkpoint, and
// streams the WAL through a temporary slot of its own.
func BaseBackup(ctx context.Context, src Source, dir string) error {
	if err := emptyDir(dir); err != nil {
		return fmt.Errorf("pgcluster: base backup: %w", err)
	}
	t, err := newTool(src, dir)
	if err != nil {
		return fmt.Errorf("pgcluster: base backup: %w", err)
	}
	defer t.close()
	if err := prepareDataDir(dir, t.cred); err != nil {
		return fmt.Errorf("pgcluster: base backup: %w", err)
	}
	out, err := t.run(ctx, "pg_basebackup", "-D", dir, "-F", "tar", "-X", "stream", "-c", "fast", "-d", t.conn, "--no-password")
	if err != nil {
		return fmt.Errorf("pgcluster: pg_basebackup from port %d: %w\n%s", src.Port, err, out)
	}
	return nil
}

// WALArchive is pg_receivewal archiving a server's WAL into a directory
// as the server writes it: each segment is written as NAME.partial and
// renamed NAME once complete, which is when a restore may use it.
type WALArchive struct {
	dir, slot string
	t         *tool
	recv      *child
}

// ArchiveWAL starts archiving src's WAL into dir through the physical
// replication slot slot, which it creates unless it exists: the server
// keeps every segment the archive has not received yet (up to its
// max_slot_wal_keep_size). It returns once the receiver streams, so that
// a base backup taken after it returns has all the WAL after it in the
// archive. Stop ends it and drops the slot.
func ArchiveWAL(ctx context.Context, src Source, dir, slot string) (*WALArchive, error) {
	if !simpleName.MatchString(slot) {
		return nil, errors.New("pgcluster: archive WAL: slot must be [a-z0-9_]+")
	}
	t, err := newTool(src, dir)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: archive WAL: %w", err)
	}
	a := &WALArchive{dir: dir, slot: slot, t: t}
	if err := prepareDataDir(dir, t.cred); err != nil {
		t.close()
		return nil, fmt.Errorf("pgcluster: archive WAL: %w", err)
	}
	if out, err := t.run(ctx, "pg_receivewal", "--create-slot", "--if-not-exists", "-S", slot, "-d", t.conn, "--no-password"); err != nil {
		t.close()
		return nil, fmt.Errorf("pgcluster: archive WAL: create slot %s: %w\n%s", slot, err, out)
	}
	cmd := t.command("pg_receivewal", "-D", dir, "-S", slot, "-d", t.conn, "--no-password", "--no-loop")
	logf, err := os.Create(filepath.Join(t.tmp, "pg_receivewal.log"))
	if err != nil {
		_ = a.dropSlot(context.WithoutCancel(ctx))
		t.close()
		return nil, fmt.Errorf("pgcluster: archive WAL: %w", err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr.Pdeathsig = syscall.SIGINT
	a.recv, err = startChild(cmd)
	logf.Close() // the child holds its own descriptor
	if err != nil {
		_ = a.dropSlot(context.WithoutCancel(ctx))
		t.close()
		return nil, fmt.Errorf("pgcluster: archive WAL: %w", err)
	}
	// Streaming: the segment it receives is there, as NAME.partial.
	for {
		if names, _ := filepath.Glob(filepath.Join(dir, "*.partial")); len(names) > 0 {
			return a, nil
		}
		select {
		case <-a.recv.done:
			err := fmt.Errorf("pgcluster: archive WAL: pg_receivewal exited: %v\n%s", a.recv.err, a.log())
			_ = a.Stop(context.WithoutCancel(ctx))
			return nil, err
		case <-ctx.Done():
			_ = a.Stop(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("pgcluster: archive WAL: waiting for pg_receivewal to stream: %w\n%s", ctx.Err(), a.log())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Dir is the archive's directory.
func (a *WALArchive) Dir() string { return a.dir }

func (a *WALArchive) log() string {
	return strings.TrimSpace(TailFile(filepath.Join(a.t.tmp, "pg_receivewal.log"), 2000))
}

// WaitFor waits, bounded by ctx, until WAL segment segment (a file name
// such as SwitchWAL returns) is in the archive, complete.
func (a *WALArchive) WaitFor(ctx context.Context, segment string) error {
	if filepath.Base(segment) != segment || len(segment) != 24 {
		return fmt.Errorf("pgcluster: archive WAL: %q is not a WAL segment's name", segment)
	}
	for {
		if _, err := os.Stat(filepath.Join(a.dir, segment)); err == nil {
			return nil
		}
		select {
		case <-a.recv.done:
			return fmt.Errorf("pgcluster: archive WAL: pg_receivewal exited before %s: %v\n%s", segment, a.recv.err, a.log())
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: archive WAL: waiting for %s: %w", segment, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop ends the receiver (SIGINT: it writes what it has received and
// exits) and drops the slot, so that the server keeps no WAL for it. The
// archive stays.
func (a *WALArchive) Stop(ctx context.Context) error {
	defer a.t.close()
	var errs []error
	if a.recv != nil && a.recv.running() {
		_ = a.recv.signal(syscall.SIGINT)
		if !a.recv.wait(stopTimeout) {
			_ = a.recv.signalGroup(syscall.SIGKILL)
			<-a.recv.done
			errs = append(errs, fmt.Errorf("pg_receivewal did not exit within %v of SIGINT; killed", stopTimeout))
		}
	}
	errs = append(errs, a.dropSlot(ctx))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pgcluster: archive WAL: stop: %w", err)
	}
	return nil
}

func (a *WALArchive) dropSlot(ctx context.Context) error {
	out, err := a.t.run(ctx, "pg_receivewal", "--drop-slot", "-S", a.slot, "-d", a.t.conn, "--no-password")
	if err != nil {
		return fmt.Errorf("drop slot %s: %w\n%s", a.slot, err, out)
	}
	return nil
}

// SwitchWAL ends the server's current WAL segment (pg_switch_wal), so
// that an archive receives, complete, every commit made before the call,
// and returns that segment's name for WALArchive.WaitFor. With no WAL
// written since the last switch, it is the segment that switch ended.
func (c *Cluster) SwitchWAL(ctx context.Context) (string, error) {
	conn, err := c.superConn(ctx)
	if err != nil {
		return "", fmt.Errorf("pgcluster: switch WAL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var name string
	// pg_walfile_name takes the segment before a boundary: the one that
	// pg_switch_wal's end (the next segment's start) closes.
	if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&name); err != nil {
		return "", fmt.Errorf("pgcluster: switch WAL: %w", err)
	}
	return name, nil
}

// Restore makes a new server from a base backup (BaseBackup's backupDir)
// and a WAL archive (walDir, ArchiveWAL's, which the server user must be
// able to read): cfg.DataDir, which must be missing or empty, is filled
// from the backup, and the server started with cfg replays every complete
// segment of the archive in recovery (restore_command), then, at the end
// of the archive, takes writes on a new timeline. It returns once it
// does, with synchronous_standby_names cleared (the source's, in the
// backup, names a standby this server does not have: every commit would
// wait for it). cfg must not be a standby.
func Restore(ctx context.Context, backupDir, walDir string, cfg Config) (*Cluster, error) {
	archive, err := filepath.Abs(walDir)
	if err != nil || strings.ContainsAny(archive, `'"\`) {
		return nil, fmt.Errorf("pgcluster: restore: archive %q: unusable in a shell command", walDir)
	}
	dataDir, cred, err := newDataDir(cfg)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: restore: %w", err)
	}
	if err := untar(filepath.Join(backupDir, baseTar), dataDir, cred); err != nil {
		return nil, fmt.Errorf("pgcluster: restore: %w", err)
	}
	if err := untar(filepath.Join(backupDir, walTar), filepath.Join(dataDir, "pg_wal"), cred); err != nil {
		return nil, fmt.Errorf("pgcluster: restore: %w", err)
	}
	// A missing segment (the one still .partial, or past the end) ends
	// the recovery.
	return recoverAt(ctx, dataDir, cred, "cp '"+archive+"/%f' '%p'", cfg)
}

// newDataDir checks cfg for a restore and makes its data dir, empty,
// owned by the server user (returned, nil when it is us).
func newDataDir(cfg Config) (string, *syscall.Credential, error) {
	if cfg.Standby != nil {
		return "", nil, errors.New("a restored server is no standby")
	}
	if _, ok := cfg.Settings["restore_command"]; ok {
		return "", nil, errors.New(`setting "restore_command" is managed by pgcluster`)
	}
	if err := emptyDir(cfg.DataDir); err != nil {
		return "", nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return "", nil, err
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return "", nil, err
	}
	if err := prepareDataDir(dataDir, cred); err != nil {
		return "", nil, err
	}
	return dataDir, cred, nil
}

// recoverAt starts the server of dataDir, filled from a base backup, in
// recovery with restoreCommand, and returns once it has replayed the
// archive to its end and takes writes, with synchronous_standby_names
// cleared.
func recoverAt(ctx context.Context, dataDir string, cred *syscall.Credential, restoreCommand string, cfg Config) (*Cluster, error) {
	// The source's runtime leftovers are none of this server's; the
	// signal files are decided here.
	for _, f := range []string{"sock", "postgres.log", fencedFile, "standby.signal", "recovery.signal"} {
		_ = os.RemoveAll(filepath.Join(dataDir, f))
	}
	owner := &Cluster{dataDir: dataDir, cred: cred}
	if err := owner.writeOwned("recovery.signal", nil, 0o600); err != nil {
		return nil, fmt.Errorf("pgcluster: restore: %w", err)
	}
	settings := map[string]string{}
	for k, v := range cfg.Settings {
		settings[k] = v
	}
	settings["restore_command"] = restoreCommand
	cfg.Settings = settings
	c, err := Start(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: restore: %w", err)
	}
	for {
		rec, err := c.InRecovery(ctx)
		if err == nil && !rec {
			break
		}
		select {
		case <-c.Exited():
			_ = c.Stop()
			return nil, fmt.Errorf("pgcluster: restore: the server exited in recovery%s", c.log.tailSection())
		case <-ctx.Done():
			_ = c.Stop()
			return nil, fmt.Errorf("pgcluster: restore: waiting for the end of recovery: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := c.SetSynchronousStandby(ctx, ""); err != nil {
		_ = c.Stop()
		return nil, fmt.Errorf("pgcluster: restore: %w", err)
	}
	return c, nil
}

// emptyDir checks that dir is missing or empty.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("%s is not empty", dir)
	}
	return nil
}

// untar extracts the tar file into dir, owned by cred (nil: by us):
// directories, regular files and symbolic links (tablespaces), each with
// its mode; a name that leaves dir is refused.
func untar(file, dir string, cred *syscall.Credential) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	own := func(p string) error {
		if cred == nil {
			return nil
		}
		return os.Lchown(p, int(cred.Uid), int(cred.Gid))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := own(dir); err != nil {
		return err
	}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		name := filepath.Clean(h.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("%s: %q leaves the directory", file, h.Name)
		}
		p := filepath.Join(dir, name)
		mode := os.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, mode); err != nil {
				return err
			}
			if err := os.Chmod(p, mode); err != nil {
				return err
			}
		case tar.TypeReg:
			out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %s: %w", file, h.Name, err)
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: %s: entry of type %q, not a directory, file or link", file, h.Name, h.Typeflag)
		}
		if err := own(p); err != nil {
			return err
		}
	}
}
