package benchrun

import (
	"errors"
	"maps"
	"math"
	"testing"
)

func TestBusyShare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		a, b string
		want float64
	}{
		{"idle", cpuLine(1000, 5000), cpuLine(1000, 5200), 0},
		{"half busy", cpuLine(1000, 5000), cpuLine(1100, 5100), 0.5},
		{"saturated", cpuLine(1000, 5000), cpuLine(1200, 5000), 1},
		{"a tenth", cpuLine(1000, 5000), cpuLine(1020, 5180), 0.1},
		{"no time passed", cpuLine(1000, 5000), cpuLine(1000, 5000), 0},
		{"counters went back (not the same boot)", cpuLine(1000, 5000), cpuLine(10, 50), 0},
		// user nice system idle iowait irq softirq steal guest guest_nice:
		// steal counts as busy (the host's neighbour took the CPU), iowait
		// as idle, guest not at all (it is inside user already).
		{"all fields", "cpu  10 0 0 100 0 0 0 0 0 0\n", "cpu  20 10 10 130 20 5 5 10 1000 1000\n", 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := parseCPUTimes([]byte(tt.a))
			if err != nil {
				t.Fatal(err)
			}
			b, err := parseCPUTimes([]byte(tt.b))
			if err != nil {
				t.Fatal(err)
			}
			if got := busyShare(a, b); math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("busyShare = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseCPUTimesRejects(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "intr 1 2 3\n", "cpu  1 2 x 4 5\n", "cpu 1 2\n"} {
		if _, err := parseCPUTimes([]byte(in)); err == nil {
			t.Errorf("parseCPUTimes(%q): no error", in)
		}
	}
}

func TestLoadAvg(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	if got, err := loadAvg1(h); err != nil || got != 0.42 {
		t.Errorf("loadAvg1 = %v, %v; want 0.42", got, err)
	}
	h.files["loadavg"] = "x y z"
	if _, err := loadAvg1(h); err == nil {
		t.Error("loadAvg1 of garbage: no error")
	}
}

func TestMachine(t *testing.T) {
	t.Parallel()
	m := machineOf(newFakeHost())
	if m.Model != "Fake CPU 9000" || m.Kernel != "Linux 6.1.0-test" || m.CPUs < 1 {
		t.Errorf("machineOf = %+v", m)
	}
	if m := machineOf(&fakeHost{files: map[string]string{}}); m.Model != "?" || m.Kernel != "Linux ?" {
		t.Errorf("machineOf with nothing readable = %+v", m)
	}
}

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    procStat
		wantErr bool
	}{
		{"42 (postgres) S 7 42 42 0 -1 4194560 5 6 0 0 150 50 1000 200 20 0 1 0 99 1 1\n", procStat{ppid: 7, cpu: 14}, false},
		// A command name holding spaces and parentheses.
		{"43 (a (b) c) R 9 1 1 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 1 1 1\n", procStat{ppid: 9, cpu: 0.1}, false},
		{"44 (x) S 9 1 1\n", procStat{}, true},
		{"no name here", procStat{}, true},
		{"45 (x) S 9 1 1 0 -1 0 0 0 0 0 a 2 3 4 20\n", procStat{}, true},
	}
	for _, tt := range tests {
		got, err := parseProcStat([]byte(tt.in))
		if (err != nil) != tt.wantErr || math.Abs(got.cpu-tt.want.cpu) > 1e-9 || got.ppid != tt.want.ppid {
			t.Errorf("parseProcStat(%q) = %+v, %v; want %+v (error %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestProcName holds the names the former scripts/bench/proccpu.py gave.
func TestProcName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		argv []string
		want string
	}{
		{[]string{"/usr/lib/postgresql/15/bin/postgres", "-D", "/home/u/.cellpay/pg/cell-a/", "-p", "5433"}, "postgres cell-a"},
		{[]string{"postgres", "-D=/data/pg-b"}, "postgres pg-b"},
		{[]string{"postgres", "--D", "/data/pg-c"}, "postgres pg-c"},
		{[]string{"postgres"}, "postgres ?"},
		{[]string{"postgres", "-D"}, "postgres ?"},
		{[]string{"bin/cell", "-instance", "a1", "-listen", ":7081"}, "cell a1"},
		{[]string{"bin/cell", "--id=b"}, "cell b"},
		{[]string{"bin/cell", "-id", "c", "-instance=c2"}, "cell c2"}, // -instance before -id, as proccpu.py did
		{[]string{"bin/cell"}, "cell ?"},
		{[]string{"./bin/gtr", "-listen", "127.0.0.1:7070"}, "gtr 127.0.0.1:7070"},
		{[]string{"./bin/gtr"}, "gtr"},
		{[]string{"/usr/bin/nats-server", "-p", "4222"}, "nats-server"},
		{[]string{"bin/nats-server", "-c", "/d/.cellpay/nats-2.conf"}, "nats-server nats-2"},
		{[]string{"bin/issuersim", "-listen", ":9000"}, "issuersim"},
		{[]string{"cellular", "-instance", "x"}, "cellular"},
		{nil, "?"},
	}
	for _, tt := range tests {
		if got := procName(tt.argv); got != tt.want {
			t.Errorf("procName(%q) = %q, want %q", tt.argv, got, tt.want)
		}
	}
}

func TestSplitCmdline(t *testing.T) {
	t.Parallel()
	got := splitCmdline([]byte("bin/cell\x00-instance\x00a\x00"))
	if len(got) != 3 || got[0] != "bin/cell" || got[2] != "a" {
		t.Errorf("splitCmdline = %q", got)
	}
	if got := splitCmdline(nil); len(got) != 0 {
		t.Errorf("splitCmdline(nil) = %q", got)
	}
}

func TestProcCPU(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	h.proc(100, 1, 500, "bin/cellpay", "run")                                        // the root: not counted
	h.proc(101, 100, 200, "bin/gtr", "-listen", "127.0.0.1:7070")                    // 2 s
	h.proc(102, 100, 100, "/usr/lib/postgresql/15/bin/postgres", "-D", "/pg/cell-a") // 1 s ...
	h.proc(103, 102, 30, "postgres: checkpointer")                                   // ... + its backends
	h.proc(104, 102, 20, "postgres: cellpay cellpay 127.0.0.1(5000) idle")           //
	h.proc(105, 104, 5, "sh")                                                        // a grandchild
	h.proc(106, 100, 10, "bin/cell", "-instance", "a")                               // two cells a sum
	h.proc(107, 100, 15, "bin/cell", "-instance", "a")                               //
	h.proc(200, 1, 9999, "bin/gtr", "-listen", "elsewhere")                          // not under the root
	h.files["108/cmdline"] = "bin/issuersim\x00"                                     // exited: its stat is gone
	got, err := procCPU(h, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"gtr 127.0.0.1:7070": 2, "postgres cell-a": 1.55, "cell a": 0.25}
	if !maps.EqualFunc(got, want, func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }) {
		t.Errorf("procCPU = %v, want %v", got, want)
	}
	if _, err := procCPU(h, 999); !errors.Is(err, errNoRoot) {
		t.Errorf("procCPU of a missing root: %v, want errNoRoot", err)
	}
}

func TestTreeCPUCycle(t *testing.T) {
	t.Parallel()
	// Readings taken while PIDs are reused can make a cycle.
	cpu := map[int]float64{1: 1, 2: 2}
	children := map[int][]int{1: {2}, 2: {1}}
	if got := treeCPU(1, cpu, children); got != 3 {
		t.Errorf("treeCPU over a cycle = %v, want 3", got)
	}
}
