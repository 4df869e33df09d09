// Package testutil holds the helpers that tests across the repository share:
// waiting for an effect with a bound, and reading a process's run state.
//
// A fault test never assumes that a signal, a kill or a stop took effect the
// moment it was sent: it waits, with a bound, for the effect it asserts. This
// package must never be imported by non-test code.
package testutil

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// Poll is how often Eventually checks its condition.
const Poll = 10 * time.Millisecond

// Eventually polls cond until it holds, and fails the test if it does not
// within d. what names the awaited effect in the failure.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(d, cond) {
		t.Fatalf("not within %v: %s", d, what)
	}
}

// Within polls cond until it holds or d passes, and reports whether it held.
func Within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(Poll)
	}
	return true
}

// ProcState returns the state letter of process pid from /proc/<pid>/stat
// (R running, S sleeping, T stopped, Z zombie, ...).
func ProcState(pid int) (byte, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ...; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0, fmt.Errorf("testutil: /proc/%d/stat: unexpected format", pid)
	}
	return stat[i+2], nil
}

// Stopped reports whether process pid is stopped by a signal (SIGSTOP).
func Stopped(pid int) bool {
	s, err := ProcState(pid)
	return err == nil && (s == 'T' || s == 't')
}

// Buffer is a bytes.Buffer safe for concurrent writers and readers: a log
// handler's output that a test reads while the code under test writes.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
