// Package testutil holds the helpers that tests across the repository share:
// waiting for an effect with a bound, reading a process's run state and
// scraping its metrics.
//
// A fault test never assumes that a signal, a kill or a stop took effect the
// moment it was sent: it waits, with a bound, for the effect it asserts. This
// package must never be imported by non-test code.
package testutil

import (
	"bytes"
	"fmt"
	"math"
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

// BinEnv names a directory holding the platform's binaries (bin/ after
// make build), which make test sets so that every test process uses the
// binaries it built once instead of linking its own: with the end-to-end
// shards and the platform tests, that was about twenty links of the same
// seven binaries per run.
const BinEnv = "CELLPAY_TEST_BIN"

// PrebuiltBin returns BinEnv's directory, or "" when a test must build the
// binaries it needs.
func PrebuiltBin() string { return os.Getenv(BinEnv) }

// BenchLine logs one figure of a benchmark test as a line the benchmark
// harness (cmd/benchrun) reads from go test -v output: "BENCH <name>
// <value> <unit>". name is lowercase words joined by _, with the variant in
// it when one run measures several (throughput_sync); unit is ms, s, tx/s,
// ratio, % or count. A value that is not a finite number (a ratio to zero)
// is logged without the marker, since benchrun refuses such a line: the run
// then has no sample of that figure.
func BenchLine(t testing.TB, name string, value float64, unit string) {
	t.Helper()
	if math.IsNaN(value) || math.IsInf(value, 0) {
		t.Logf("%s: %v %s is not a finite number, no figure for benchrun", name, value, unit)
		return
	}
	t.Logf("BENCH %s %g %s", name, value, unit)
}
