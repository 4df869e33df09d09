package benchrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Execution is what the harness measures of one command run itself.
type Execution struct {
	// Wall is the time from the command's start (Shell: sh's exec) to its
	// exit.
	Wall time.Duration
	// CPU is the user+sys time of the command and every descendant it
	// reaped (and that they reaped), from the rusage of its sh.
	CPU time.Duration
}

// ExecFunc runs command to completion, its stdout and stderr written to
// the writers given, and measures it. It must kill the command and all it
// started when ctx ends, and return an error when the command did not
// exit with status 0; the Execution is filled in either way when the
// command ran.
type ExecFunc func(ctx context.Context, command string, stdout, stderr io.Writer) (Execution, error)

// ErrLeftover: a command's process exited cleanly but a process it
// started outside its process group kept its output open past
// pipeDelay; its output was cut there.
var ErrLeftover = errors.New("benchrun: output held open by a process that left the command's process group")

// pipeDelay bounds the wait for a command's output to close once its sh
// has exited and its process group is killed: only a process that moved
// to a group of its own can still hold it.
const pipeDelay = 5 * time.Second

// Shell is the real ExecFunc: sh -c command in a process group of its
// own. When ctx ends the whole group is killed; when sh exits, so is what
// is left of the group (a run's leftovers must not load the next run).
func Shell(ctx context.Context, command string, stdout, stderr io.Writer) (Execution, error) {
	cmd := exec.Command("sh", "-c", command)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = pipeDelay
	if err := cmd.Start(); err != nil {
		return Execution{}, err
	}
	// Wall time runs from sh's exec to its exit: Go's fork before and the
	// reaping and output copying after are the harness's, and under load
	// they are what moves most.
	start := time.Now()
	var wall time.Duration
	// The group's ID is sh's PID, which cannot be reused until sh is
	// reaped: every kill below happens before cmd.Wait reaps it, under mu,
	// so it can never hit an unrelated process group. (exec's own context
	// handling could kill just after the reap.)
	pgid := cmd.Process.Pid
	var mu sync.Mutex
	reaping := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !reaping {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
	if waitExited(pgid) == nil {
		wall = time.Since(start)
		mu.Lock()
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // the leftovers
		reaping = true
		mu.Unlock()
	}
	stop()
	err := cmd.Wait()
	if wall == 0 {
		wall = time.Since(start)
	}
	x := Execution{Wall: wall}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		x.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		return x, ErrLeftover
	}
	if err != nil {
		return x, fmt.Errorf("sh -c: %w", err)
	}
	return x, nil
}

// waitExited blocks until process pid has exited without reaping it
// (waitid with WNOWAIT), so that its PID stays reserved until cmd.Wait.
func waitExited(pid int) error {
	const pPID = 1     // P_PID
	var info [128]byte // siginfo_t, unread
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}
