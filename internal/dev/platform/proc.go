package platform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cellpay/cellpay/internal/dev/pgcluster"
)

// ErrNotRunning is returned by Signal when the component is not running.
var ErrNotRunning = errors.New("platform: not running")

// Proc is one component of the platform, a child process. Its methods are
// safe for concurrent use.
type Proc struct {
	Name string // "gtr", "issuersim" or the cell ID
	Addr string // the gRPC address its health is checked on

	path    string
	args    []string
	env     []string
	logPath string
	// ready, when set, replaces the gRPC health check (for NATS).
	ready func(ctx context.Context, exited <-chan struct{}) error
	// creds are the transport credentials of its health check; nil for
	// plaintext.
	creds  credentials.TransportCredentials
	stdout *prefixWriter
	stderr *prefixWriter

	mu  sync.Mutex   // guards cur; held across start and stop so they do not interleave
	cur *run         // the latest run; nil before the first
	pid atomic.Int64 // cur's process ID, readable without mu
	// started, when set, is called (with mu held) after each start that
	// became healthy: the platform rewrites its RunInfo.
	started func()
}

// run is one run of a Proc's process.
type run struct {
	cmd   *exec.Cmd
	done  chan struct{} // closed once the process has exited and been reaped
	err   error         // cmd.Wait's result; read only after done is closed
	asked atomic.Bool   // we asked it to exit: its exit is not a crash
}

// start runs the process and waits until its gRPC health check answers
// SERVING, it exits, or ctx ends; on failure the process is killed and the
// error names the component and quotes its log. p.mu must not be held.
func (p *Proc) start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.startLocked(ctx)
}

func (p *Proc) startLocked(ctx context.Context) error {
	r, err := p.spawn()
	if err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	p.cur = r
	p.pid.Store(int64(r.cmd.Process.Pid))
	wait := func(ctx context.Context, exited <-chan struct{}) error {
		return waitHealthy(ctx, p.Addr, p.creds, exited)
	}
	if p.ready != nil {
		wait = p.ready
	}
	if err := wait(ctx, r.done); err != nil {
		p.killLocked()
		return fmt.Errorf("%s: not healthy at %s: %w%s", p.Name, p.Addr, err, p.logTail())
	}
	if p.started != nil {
		p.started()
	}
	return nil
}

// spawn starts the process from a goroutine locked to its OS thread, which
// then reaps it. Pdeathsig fires when the thread that forked the child exits,
// not when our process does (go.dev/issue/27505); holding the thread until
// Wait returns ties the signal to our life.
func (p *Proc) spawn() (*run, error) {
	logf, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = p.env
	cmd.Stdout = io.MultiWriter(logf, p.stdout)
	cmd.Stderr = io.MultiWriter(logf, p.stderr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = time.Second // a grandchild holding the pipes must not hang Wait
	fmt.Fprintf(logf, "--- %s: %s %s\n", time.Now().Format(time.RFC3339), p.path, strings.Join(p.args, " "))

	r := &run{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go p.supervise(r, logf, started)
	if err := <-started; err != nil {
		return nil, err
	}
	return r, nil
}

func (p *Proc) supervise(r *run, logf *os.File, started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer logf.Close()
	if err := r.cmd.Start(); err != nil {
		started <- err
		return
	}
	started <- nil
	r.err = r.cmd.Wait()
	p.stdout.flush()
	p.stderr.flush()
	if !r.asked.Load() {
		msg := fmt.Sprintf("exited unexpectedly: %v\n", exitText(r.err))
		fmt.Fprint(logf, msg)
		p.stderr.Write([]byte(msg))
	}
	close(r.done)
}

func (r *run) running() bool {
	if r == nil {
		return false
	}
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

func (r *run) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.done:
		return true
	case <-t.C:
		return false
	}
}

// signalGroup signals the process's group (its pid, by Setpgid) unless it
// has been reaped, after which the pid may be someone else's.
func (r *run) signalGroup(sig syscall.Signal) error {
	if !r.running() {
		return ErrNotRunning
	}
	return syscall.Kill(-r.cmd.Process.Pid, sig)
}

// Signal sends sig to the component's process group, e.g. SIGSTOP and
// SIGCONT to pause it. It returns ErrNotRunning if the process has exited.
func (p *Proc) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("platform: %s: unsupported signal %v", p.Name, sig)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.cur.signalGroup(s); err != nil {
		if errors.Is(err, ErrNotRunning) {
			return fmt.Errorf("%w: %s", ErrNotRunning, p.Name)
		}
		return fmt.Errorf("platform: signal %s: %w", p.Name, err)
	}
	return nil
}

// Kill sends SIGKILL, as a crash would, and waits for the process to be
// reaped. Killing a component that is not running does nothing.
func (p *Proc) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killLocked()
}

func (p *Proc) killLocked() error {
	r := p.cur
	if !r.running() {
		return nil
	}
	r.asked.Store(true)
	_ = r.signalGroup(syscall.SIGKILL)
	if !r.wait(stopTimeout) {
		return fmt.Errorf("platform: %s (pid %d) survived SIGKILL for %v", p.Name, r.cmd.Process.Pid, stopTimeout)
	}
	return nil
}

// Stop sends SIGTERM and waits up to 10s for the process to exit, then kills
// it. It reports a process that had to be killed or exited with an error.
// Stopping a component that is not running does nothing.
func (p *Proc) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopLocked()
}

func (p *Proc) stopLocked() error {
	r := p.cur
	if !r.running() {
		return nil
	}
	r.asked.Store(true)
	_ = r.signalGroup(syscall.SIGTERM)
	_ = r.signalGroup(syscall.SIGCONT) // a paused process must run to exit
	if r.wait(stopTimeout) {
		if r.err != nil && !terminatedBy(r.err, syscall.SIGTERM) {
			return fmt.Errorf("platform: stop %s: %s%s", p.Name, exitText(r.err), p.logTail())
		}
		return nil
	}
	if err := p.killLocked(); err != nil {
		return err
	}
	return fmt.Errorf("platform: stop %s: no exit within %v of SIGTERM; killed%s", p.Name, stopTimeout, p.logTail())
}

// Restart starts the component again with the same arguments and waits for
// it to be healthy, bounded by ctx. A running component is stopped first.
func (p *Proc) Restart(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.stopLocked(); err != nil {
		return err
	}
	if err := p.startLocked(ctx); err != nil {
		return fmt.Errorf("platform: restart %w", err)
	}
	return nil
}

// CheckHealth asks the component's gRPC health service once, bounded by
// ctx, over the transport it serves (TLS for the GTR), and returns nil if it
// answers SERVING.
func (p *Proc) CheckHealth(ctx context.Context) error {
	creds := p.creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	return CheckHealth(ctx, p.Addr, grpc.WithTransportCredentials(creds))
}

// SetEnv sets the environment variable key to value for the
// component's next start (Restart, or a start after Kill): the running
// process keeps the environment it was started with. A platform moves a
// cell's database this way (MoveCellDatabase).
func (p *Proc) SetEnv(key, value string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	prefix := key + "="
	env := make([]string, 0, len(p.env)+1)
	for _, kv := range p.env {
		if !strings.HasPrefix(kv, prefix) {
			env = append(env, kv)
		}
	}
	p.env = append(env, prefix+value)
}

// Pid returns the process id of the latest run, even if it has exited, or 0
// before the first start. The process is its group's leader.
func (p *Proc) Pid() int { return int(p.pid.Load()) }

// Running reports whether the process is alive (a paused process is).
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur.running()
}

// LogPath returns the file that collects the component's output.
func (p *Proc) LogPath() string { return p.logPath }

// tailSize is how much of a log an error quotes.
const tailSize = 4 << 10

func (p *Proc) logTail() string {
	return logTail(p.logPath)
}

// logTail returns the end of the log at path formatted to follow an error.
func logTail(path string) string {
	t := strings.TrimSpace(pgcluster.TailFile(path, tailSize))
	if t == "" {
		return ""
	}
	return fmt.Sprintf("\n--- %s (tail) ---\n%s", path, t)
}

func terminatedBy(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
