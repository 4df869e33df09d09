package pgcluster

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"runtime"
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
// group id): the postmaster and every backend.
func (c *child) signalGroup(sig syscall.Signal) error {
	if !c.running() {
		return nil
	}
	return syscall.Kill(-c.pid(), sig)
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

// waitGroupGone waits up to d until no live process is left in the child's
// group, which after a SIGKILL takes a moment for the backends.
func (c *child) waitGroupGone(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && groupAlive(c.pid()) {
		time.Sleep(10 * time.Millisecond)
	}
}

// groupAlive reports whether a process other than a zombie is in group pgid.
// kill(-pgid, 0) is not enough: orphaned backends are reparented to pid 1,
// and a pid 1 that never reaps (some containers) keeps them as zombies.
func groupAlive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true // cannot tell; the caller's bound applies
	}
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces, so split after ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) >= 3 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			return true
		}
	}
	return false
}
