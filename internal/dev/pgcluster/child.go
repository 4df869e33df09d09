package pgcluster

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// child is one run of the server process.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // cmd.Wait's result; read only after done is closed
}

// startChild starts cmd and reaps it on a goroutine locked to its OS thread.
//
// Pdeathsig fires when the thread that forked the child exits, not when our
// process does (go.dev/issue/27505). Forking from a locked thread that is
// held until Wait returns ties the signal to our life, not to the life of
// whichever runtime thread happened to run cmd.Start.
func startChild(cmd *exec.Cmd) (*child, error) {
	c := &child{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go c.supervise(started)
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}

func (c *child) supervise(started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.cmd.Start(); err != nil {
		started <- err
		return
	}
	started <- nil
	c.err = c.cmd.Wait()
	close(c.done)
}

func (c *child) running() bool {
	if c == nil {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// signal signals the process itself, if it has not been reaped (after that
// its pid may belong to someone else).
func (c *child) signal(sig syscall.Signal) error {
	if !c.running() {
		return nil
	}
	return syscall.Kill(c.pid(), sig)
}

// signalGroup signals the process's whole group (Setpgid makes its pid the
// group id): for a tool such as initdb, it and every process it started.
// Not for the server: each of a postmaster's children makes itself a
// session leader (Postgres's InitPostmasterChild calls setsid), so the
// postmaster's group holds the postmaster alone; signalTree reaches them.
func (c *child) signalGroup(sig syscall.Signal) error {
	if !c.running() {
		return nil
	}
	return syscall.Kill(-c.pid(), sig)
}

// signalTree signals the process and each of its children (a
// postmaster's backends, WAL sender and receiver, checkpointer...), and
// returns the pids it signalled. The children are listed before and after
// the parent is signalled: a child forked meanwhile is in the second list,
// and one already reparented (the parent killed) in the first.
func (c *child) signalTree(sig syscall.Signal) ([]int, error) {
	if !c.running() {
		return nil, nil
	}
	pids := childrenOf(c.pid())
	err := syscall.Kill(c.pid(), sig)
	for _, k := range childrenOf(c.pid()) {
		if !slices.Contains(pids, k) {
			pids = append(pids, k)
		}
	}
	for _, k := range pids {
		_ = syscall.Kill(k, sig) // gone already: nothing to do
	}
	return append(pids, c.pid()), err
}

// wait waits up to d for the process to exit and reports whether it did.
func (c *child) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.done:
		return true
	case <-t.C:
		return false
	}
}

// waitGone waits up to d until none of pids is a live process (a zombie
// counts as gone), which after a SIGKILL takes a moment for the backends.
func waitGone(pids []int, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && slices.ContainsFunc(pids, alive) {
		time.Sleep(10 * time.Millisecond)
	}
}

// procStat returns the fields of /proc/<pid>/stat after the command's
// closing parenthesis (state, ppid, pgrp, ...), or nil when the process
// is gone. The command may hold spaces and parentheses, hence the last ')'.
func procStat(pid string) []string {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(stat[i+1:]))
}

// alive reports whether pid is a process other than a zombie. Orphaned
// backends are reparented to pid 1, and a pid 1 that never reaps (some
// containers) keeps them as zombies, so kill(pid, 0) is not enough.
func alive(pid int) bool {
	f := procStat(strconv.Itoa(pid))
	return len(f) > 0 && f[0] != "Z"
}

// childrenOf returns the pids of pid's live children.
func childrenOf(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := strconv.Itoa(pid)
	var out []int
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		if f := procStat(e.Name()); len(f) >= 2 && f[0] != "Z" && f[1] == parent {
			if k, err := strconv.Atoi(e.Name()); err == nil {
				out = append(out, k)
			}
		}
	}
	return out
}
