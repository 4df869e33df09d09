package benchrun

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
)

// Host is the part of the machine the harness reads: /proc.
type Host interface {
	// ReadProc returns the content of /proc/<name>, as "stat", "loadavg"
	// or "42/cmdline". A file that does not exist (its process has
	// exited) gives an error matching os.ErrNotExist.
	ReadProc(name string) ([]byte, error)
	// PIDs lists the processes that exist now, in any order; some may
	// have exited by the time they are read.
	PIDs() ([]int, error)
}

// ProcHost is the real Host: the /proc of this machine.
type ProcHost struct{}

// ReadProc reads /proc/<name>.
func (ProcHost) ReadProc(name string) ([]byte, error) { return os.ReadFile("/proc/" + name) }

// PIDs lists the numeric entries of /proc.
func (ProcHost) PIDs() ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// cpuTimes is the first line of /proc/stat, in clock ticks: all CPUs.
type cpuTimes struct {
	busy, total uint64
}

// parseCPUTimes reads the "cpu" line of /proc/stat: user nice system idle
// iowait irq softirq steal guest guest_nice. Guest time is already counted
// in user and nice, so the total stops at steal. Busy is the total less
// idle and iowait: a CPU waiting on the disk is free to run a benchmark.
func parseCPUTimes(stat []byte) (cpuTimes, error) {
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 6 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("/proc/stat: no cpu line: %q", line)
	}
	var t cpuTimes
	var idle uint64
	for i, s := range f[1:min(len(f), 9)] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat: field %d: %w", i+1, err)
		}
		t.total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	t.busy = t.total - idle
	return t, nil
}

// busyShare is the share (0..1) of CPU time spent busy between readings a
// and b; 0 when no time passed.
func busyShare(a, b cpuTimes) float64 {
	if b.total <= a.total || b.busy < a.busy {
		return 0
	}
	return min(1, float64(b.busy-a.busy)/float64(b.total-a.total))
}

// readCPUTimes reads /proc/stat of h.
func readCPUTimes(h Host) (cpuTimes, error) {
	b, err := h.ReadProc("stat")
	if err != nil {
		return cpuTimes{}, err
	}
	return parseCPUTimes(b)
}

// loadAvg1 is the 1-minute load average of h.
func loadAvg1(h Host) (float64, error) {
	b, err := h.ReadProc("loadavg")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, errors.New("/proc/loadavg: empty")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/loadavg: %w", err)
	}
	return v, nil
}

// Machine describes the host, for the header of a report.
type Machine struct {
	CPUs   int    `json:"cpus"`
	Model  string `json:"model"`
	Kernel string `json:"kernel"`
}

// String is "2 CPUs (model), Linux release".
func (m Machine) String() string {
	return fmt.Sprintf("%d CPUs (%s), %s", m.CPUs, m.Model, m.Kernel)
}

// machineOf reads what it can of the host; unknown fields say "?".
func machineOf(h Host) Machine {
	m := Machine{CPUs: runtime.NumCPU(), Model: "?", Kernel: "Linux ?"} // NumCPU follows the affinity mask, as nproc does
	if b, err := h.ReadProc("cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := h.ReadProc("sys/kernel/osrelease"); err == nil { // uname -r
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	return m
}

// clockTicks is USER_HZ, the unit of the times in /proc/<pid>/stat: 100 on
// every architecture Go runs Linux on (sysconf(_SC_CLK_TCK) reads the same
// constant; it is not the kernel's HZ).
const clockTicks = 100

// procStat is what the harness needs of /proc/<pid>/stat.
type procStat struct {
	ppid int
	// cpu is utime+stime+cutime+cstime in seconds: the process's own time
	// and that of the children it reaped (a Postgres postmaster reaps its
	// backends), so that summing a live tree between two readings counts
	// every process that ran in between exactly once.
	cpu float64
}

// parseProcStat reads /proc/<pid>/stat. The command name, in parentheses,
// may hold spaces and parentheses: fields are counted after the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
	// cmajflt utime stime cutime cstime ...
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("stat: %d fields after the name, want 15 or more", len(f))
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, fmt.Errorf("stat: ppid: %w", err)
	}
	var ticks int64
	for _, s := range f[11:15] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("stat: times: %w", err)
		}
		ticks += v
	}
	return procStat{ppid: ppid, cpu: float64(ticks) / clockTicks}, nil
}

// procName names a process for the per-process table, from its argv (as
// the former scripts/bench/proccpu.py did): postgres by its data directory, a cell
// by its instance, a GTR by its listen address, a NATS server of a
// cluster by its configuration file (nats-1.conf: "nats-server nats-1"),
// anything else by its program's base name.
func procName(argv []string) string {
	if len(argv) == 0 {
		return "?" // a zombie or a kernel thread
	}
	switch base := path.Base(argv[0]); base {
	case "postgres":
		if d, ok := flagValue(argv, "-D"); ok {
			return "postgres " + path.Base(strings.TrimRight(d, "/"))
		}
		return "postgres ?"
	case "cell":
		if v, ok := flagValue(argv, "-instance"); ok {
			return "cell " + v
		}
		if v, ok := flagValue(argv, "-id"); ok {
			return "cell " + v
		}
		return "cell ?"
	case "gtr":
		if v, ok := flagValue(argv, "-listen"); ok {
			return "gtr " + v
		}
		return "gtr"
	case "nats-server":
		if v, ok := flagValue(argv, "-c"); ok {
			return "nats-server " + strings.TrimSuffix(path.Base(v), ".conf")
		}
		return base
	default:
		return base
	}
}

// flagValue finds a flag's value in argv, as "-f v", "--f v", "-f=v" or
// "--f=v" (flag is given with one dash).
func flagValue(argv []string, flag string) (string, bool) {
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if strings.HasPrefix(a, "--") {
			a = a[1:]
		}
		if a == flag {
			if i+1 < len(argv) {
				return argv[i+1], true
			}
			return "", false
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

// splitCmdline splits /proc/<pid>/cmdline into its arguments.
func splitCmdline(b []byte) []string {
	var argv []string
	for a := range bytes.SplitSeq(b, []byte{0}) {
		if len(a) > 0 {
			argv = append(argv, string(a))
		}
	}
	return argv
}

// errNoRoot: the -procs process does not exist.
var errNoRoot = errors.New("no such process")

// procCPU returns the CPU seconds of every direct child of root, each with
// its whole subtree, by procName; children with one name sum. A process
// that exits while it is read is left out.
func procCPU(h Host, root int) (map[string]float64, error) {
	if _, err := h.ReadProc(strconv.Itoa(root) + "/stat"); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("-procs %d: %w", root, errNoRoot)
		}
		return nil, fmt.Errorf("-procs %d: %w", root, err)
	}
	pids, err := h.PIDs()
	if err != nil {
		return nil, err
	}
	cpu := make(map[int]float64, len(pids))
	children := map[int][]int{}
	for _, pid := range pids {
		b, err := h.ReadProc(strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue // exited while we looked
		}
		st, err := parseProcStat(b)
		if err != nil {
			continue
		}
		cpu[pid] = st.cpu
		children[st.ppid] = append(children[st.ppid], pid)
	}
	out := map[string]float64{}
	for _, child := range children[root] {
		b, err := h.ReadProc(strconv.Itoa(child) + "/cmdline")
		if err != nil {
			continue
		}
		out[procName(splitCmdline(b))] += treeCPU(child, cpu, children)
	}
	return out, nil
}

// treeCPU sums cpu over pid and its descendants. The readings are not one
// instant, so a reused PID could make a cycle: each PID counts once.
func treeCPU(pid int, cpu map[int]float64, children map[int][]int) float64 {
	total, todo, seen := 0.0, []int{pid}, map[int]bool{}
	for len(todo) > 0 {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[p] {
			continue
		}
		seen[p] = true
		total += cpu[p]
		todo = append(todo, children[p]...)
	}
	return total
}
