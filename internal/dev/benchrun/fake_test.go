package benchrun

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every command
// run (and its output copying) must be over when Run returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeHost is a /proc held in memory. Readings of "stat" come from stats
// in turn, the last one repeating.
type fakeHost struct {
	mu    sync.Mutex
	files map[string]string
	stats []string
}

func newFakeHost() *fakeHost {
	return &fakeHost{files: map[string]string{
		"loadavg":              "0.42 0.30 0.20 1/123 4567\n",
		"cpuinfo":              "processor\t: 0\nmodel name\t: Fake CPU 9000\n",
		"sys/kernel/osrelease": "6.1.0-test\n",
	}}
}

func (h *fakeHost) ReadProc(name string) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if name == "stat" && len(h.stats) > 0 {
		s := h.stats[0]
		if len(h.stats) > 1 {
			h.stats = h.stats[1:]
		}
		return []byte(s), nil
	}
	s, ok := h.files[name]
	if !ok {
		return nil, fmt.Errorf("fake /proc/%s: %w", name, os.ErrNotExist)
	}
	return []byte(s), nil
}

func (h *fakeHost) PIDs() ([]int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var pids []int
	for name := range h.files {
		if p, ok := strings.CutSuffix(name, "/stat"); ok {
			if pid, err := strconv.Atoi(p); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids, nil
}

// proc adds or replaces process pid: its parent, CPU ticks
// (utime+stime+cutime+cstime, given as utime) and argv.
func (h *fakeHost) proc(pid, ppid, ticks int, argv ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	comm := "x"
	if len(argv) > 0 {
		comm = argv[0]
	}
	h.files[fmt.Sprintf("%d/stat", pid)] = fmt.Sprintf("%d (%s) S %d 1 1 0 -1 4194304 100 0 0 0 %d 0 0 0 20 0 1 0 100 1000 10\n", pid, comm, ppid, ticks)
	h.files[fmt.Sprintf("%d/cmdline", pid)] = strings.Join(argv, "\x00") + "\x00"
}

// cpuLine is a /proc/stat whose cpu line has the given busy and idle
// ticks (busy split over user and system, idle over idle and iowait).
func cpuLine(busy, idle int) string {
	return fmt.Sprintf("cpu  %d 0 %d %d %d 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n", busy-busy/2, busy/2, idle-idle/2, idle/2)
}

// fakeCommand is what a fake ExecFunc does for one command string.
type fakeCommand struct {
	stdout string
	wall   time.Duration
	cpu    time.Duration
	err    error
	// block: wait for ctx to end, as a command that hangs.
	block bool
	// before runs first (to change the fake host, say).
	before func()
}

// fakeExec runs commands from a table and records the order they ran in.
type fakeExec struct {
	mu       sync.Mutex
	commands map[string]fakeCommand
	ran      []string
}

func (f *fakeExec) exec(ctx context.Context, command string, stdout, _ io.Writer) (Execution, error) {
	f.mu.Lock()
	c, ok := f.commands[command]
	f.ran = append(f.ran, command)
	f.mu.Unlock()
	if !ok {
		return Execution{}, fmt.Errorf("fake: no command %q", command)
	}
	if c.before != nil {
		c.before()
	}
	if _, err := io.WriteString(stdout, c.stdout); err != nil {
		return Execution{}, err
	}
	if c.block {
		<-ctx.Done()
		return Execution{}, ctx.Err()
	}
	return Execution{Wall: c.wall, CPU: c.cpu}, c.err
}

// noSleep is a Sleep that returns at once and counts its calls.
type noSleep struct {
	mu sync.Mutex
	n  int
}

func (s *noSleep) sleep(ctx context.Context, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return ctx.Err()
}

// fakeConfig is a valid Config over fakes: no quiet wait, one run.
func fakeConfig(t *testing.T, h Host, f *fakeExec, variants ...Variant) Config {
	t.Helper()
	return Config{
		Variants: variants, Runs: 1, Quiet: DefaultQuiet, Timeout: time.Minute,
		Host: h, Exec: f.exec,
		Sleep: func(context.Context, time.Duration) error { t.Error("unexpected sleep"); return nil },
		Now:   func() time.Time { return time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC) },
	}
}

// sample finds metric m in rec.
func sample(rec Record, m Metric) (float64, bool) {
	for _, s := range rec.Samples {
		if s.Metric == m {
			return s.Value, true
		}
	}
	return 0, false
}
