package pgcluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// serverUser is the OS account the server runs as when we are root: initdb
// and postgres refuse to run as root.
const serverUser = "postgres"

// findBinDir returns the newest /usr/lib/postgresql/<major>/bin that holds
// a postgres binary (the Debian layout).
func findBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	type cand struct {
		dir   string
		major float64
	}
	var cands []cand
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err != nil {
			continue
		}
		major, err := strconv.ParseFloat(filepath.Base(filepath.Dir(d)), 64)
		if err != nil {
			continue
		}
		cands = append(cands, cand{d, major})
	}
	if len(cands) == 0 {
		return "", errors.New("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin; install one or set BinDir")
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].major > cands[j].major })
	return cands[0].dir, nil
}

// serverCredential returns the credential to run the server with: nil when
// we are not root, else the serverUser account's.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(serverUser)
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL refuses to; need the %q user to run it as: %w", serverUser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: uid %q: %w", serverUser, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: gid %q: %w", serverUser, u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// prepareDataDir creates dir, and when the server runs as another user,
// hands dir to it and makes every parent searchable (o+x, never o+r) so the
// server can reach it: os.MkdirTemp and t.TempDir make 0700 root dirs.
func prepareDataDir(dir string, cred *syscall.Credential) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if cred == nil {
		return nil
	}
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("data dir parent: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			keep := fi.Mode() & (fs.ModePerm | fs.ModeSticky | fs.ModeSetgid | fs.ModeSetuid)
			if err := os.Chmod(p, keep|0o001); err != nil {
				return fmt.Errorf("data dir parent: %w", err)
			}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// initdb initialises c.dataDir unless it already holds a cluster.
func (c *Cluster) initdb(ctx context.Context, noSync bool) error {
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		return nil
	}
	args := []string{
		"-D", c.dataDir,
		"-U", Superuser,
		"--auth=trust", // loopback only, see the package doc
		"--encoding=UTF8",
		"--no-locale", // byte-order collation: the same on every machine
		"--no-instructions",
	}
	if noSync {
		args = append(args, "--no-sync")
	}
	cmd := c.command("initdb", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := runContext(ctx, cmd); err != nil {
		return fmt.Errorf("initdb %s: %w\n%s", c.dataDir, err, strings.TrimSpace(out.String()))
	}
	return c.log.record(out.Bytes())
}

// runContext runs cmd, killing it if ctx ends first.
func runContext(ctx context.Context, cmd *exec.Cmd) error {
	ch, err := startChild(cmd)
	if err != nil {
		return err
	}
	select {
	case <-ch.done:
		return ch.err
	case <-ctx.Done():
		_ = ch.signalGroup(syscall.SIGKILL)
		<-ch.done
		return ctx.Err()
	}
}

// command returns a command for one of the server binaries, run as the
// server user, in its own process group, from the data directory (our
// working directory may not be readable by the server user).
func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.binDir, name), args...)
	cmd.Dir = c.dataDir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	cmd.WaitDelay = killTimeout
	return cmd
}

// maxSocketPath is the room in sockaddr_un.sun_path, less its NUL.
const maxSocketPath = 107

// socketDir is the directory of the server's Unix socket: sock inside the
// data dir, or, when that path is too long for a socket address, a
// directory of its own in the system's temporary directory named after a
// hash of the data dir (the same on every start, removed on a clean
// stop). Either is mode 0700:
// only we (and the server user) reach the socket, which with TLS is how
// the superuser connects.
func socketDir(dataDir string) string {
	dir := filepath.Join(dataDir, "sock")
	if len(dir)+len("/.s.PGSQL.65535.lock") <= maxSocketPath {
		return dir
	}
	sum := sha256.Sum256([]byte(dataDir))
	return filepath.Join(os.TempDir(), "pgcluster-"+hex.EncodeToString(sum[:8]))
}

func (c *Cluster) prepareSocketDir() error {
	dir := socketDir(c.dataDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("socket dir: %w", err)
	}
	// A directory outside the data dir may have been made by someone else
	// (a shared /tmp): take it only if it is a directory of ours or the
	// server user's.
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("socket dir: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || (int(st.Uid) != os.Geteuid() && (c.cred == nil || st.Uid != c.cred.Uid)) {
		return fmt.Errorf("socket dir %s: not a directory owned by us or the server user", dir)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("socket dir: %w", err)
	}
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("socket dir: %w", err)
		}
	}
	return nil
}

// removeSocketDir removes a socket directory outside the data dir once the
// server has removed its socket (a clean stop); the next start makes it
// again.
func (c *Cluster) removeSocketDir() {
	if dir := socketDir(c.dataDir); filepath.Dir(dir) != c.dataDir {
		_ = os.Remove(dir) // fails, harmlessly, when not empty
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
