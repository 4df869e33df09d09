package benchrun

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Metric identifies a figure: the same name in two units (a process's CPU
// in s and in µs/tx) is two metrics.
type Metric struct {
	Name string `json:"name"`
	Unit string `json:"unit,omitempty"`
}

// String is "name unit", or the name alone when there is no unit.
func (m Metric) String() string {
	if m.Unit == "" {
		return m.Name
	}
	return m.Name + " " + m.Unit
}

// Sample is one value of a metric in one run.
type Sample struct {
	Metric
	Value float64 `json:"value"`
}

// String is "name value unit", the way a BENCH line gives it.
func (s Sample) String() string {
	return strings.TrimSpace(fmt.Sprintf("%s %v %s", s.Name, s.Value, s.Unit))
}

// The harness's own metrics.
var (
	// MetricWall is a command run's wall time.
	MetricWall = Metric{Name: "wall", Unit: "s"}
	// MetricCPU is the user+sys time of a command run and the descendants
	// it reaped.
	MetricCPU = Metric{Name: "cpu", Unit: "s"}
)

// cpuPrefix starts the per-process CPU metrics; with the harness's wall
// and cpu it is reserved: a command printing them would mix its samples
// with the harness's.
const cpuPrefix = "cpu:"

func isReserved(name string) bool {
	return name == MetricWall.Name || name == MetricCPU.Name || strings.HasPrefix(name, cpuPrefix)
}

// errNotMetric: the line holds no metric. Other parse errors are lines
// that look like one and are malformed, which the harness warns about.
var errNotMetric = errors.New("not a metric line")

// benchMarker introduces a metric line; it may come after any prefix, such
// as go test -v's "file_test.go:12: ".
const benchMarker = "BENCH "

// parseLine returns the samples a line of a command's stdout holds: a
// BENCH line gives one, a Go benchmark result line one per value/unit
// pair. A line that is neither returns errNotMetric.
func parseLine(line string) ([]Sample, error) {
	if strings.HasPrefix(line, "Benchmark") {
		if s, ok := parseGoBench(line); ok {
			return s, nil
		}
	}
	i := markerIndex(line)
	if i < 0 {
		return nil, errNotMetric
	}
	f := strings.Fields(line[i+len(benchMarker):])
	if len(f) != 2 && len(f) != 3 {
		return nil, fmt.Errorf("BENCH line %q: want BENCH <name> <value> [<unit>]", line)
	}
	v, err := strconv.ParseFloat(f[1], 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return nil, fmt.Errorf("BENCH line %q: value %q is not a finite number", line, f[1])
	}
	if isReserved(f[0]) {
		return nil, fmt.Errorf("BENCH line %q: %q is the harness's own metric", line, f[0])
	}
	m := Metric{Name: f[0]}
	if len(f) == 3 {
		m.Unit = f[2]
	}
	return []Sample{{Metric: m, Value: v}}, nil
}

// markerIndex is where benchMarker starts as a word of line (at its start
// or after a space), or -1.
func markerIndex(line string) int {
	for off := 0; ; {
		i := strings.Index(line[off:], benchMarker)
		if i < 0 {
			return -1
		}
		i += off
		if i == 0 || line[i-1] == ' ' || line[i-1] == '\t' {
			return i
		}
		off = i + 1
	}
}

// parseGoBench reads a Go benchmark result line, as golang.org/x/perf's
// benchfmt does: the name, an iteration count, then value/unit pairs:
//
//	BenchmarkRoute/hit-2   	 1000	  123.4 ns/op	  16 B/op	  1 allocs/op
//
// The name loses its -N GOMAXPROCS suffix. As with benchstat, a
// sub-benchmark whose own name ends in -<digits> loses that instead when
// run with GOMAXPROCS=1, where Go adds no suffix.
func parseGoBench(line string) ([]Sample, bool) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 {
		return nil, false
	}
	if _, err := strconv.ParseUint(f[1], 10, 64); err != nil {
		return nil, false
	}
	name := stripProcs(f[0])
	out := make([]Sample, 0, (len(f)-2)/2)
	for i := 2; i < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, false
		}
		out = append(out, Sample{Metric: Metric{Name: name, Unit: f[i+1]}, Value: v})
	}
	return out, true
}

// stripProcs drops a trailing -<digits> from a benchmark name.
func stripProcs(name string) string {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || i == len(name)-1 {
		return name
	}
	for _, c := range name[i+1:] {
		if c < '0' || c > '9' {
			return name
		}
	}
	return name[:i]
}

// Kind is how a metric's values read: which way is better, and the words
// for it.
type Kind int

// Kinds of metric.
const (
	// KindUnknown: neither direction is better; "higher", "lower".
	KindUnknown Kind = iota
	// KindRate: higher is better (tx/s, MB/s, throughput).
	KindRate
	// KindTime: higher is slower (s, ms, ns/op; wall, cpu).
	KindTime
	// KindCost: higher is costlier (B/op, allocs/op, CPU µs per operation).
	KindCost
)

// timeUnits are units of a duration, per operation or not.
var timeUnits = map[string]bool{
	"s": true, "ms": true, "µs": true, "us": true, "ns": true,
	"ns/op": true, "sec/op": true, "ms/op": true, "µs/op": true, "us/op": true,
}

// KindOf classifies m by its unit and name.
func KindOf(m Metric) Kind {
	switch {
	case strings.HasSuffix(m.Unit, "/s") || strings.Contains(strings.ToLower(m.Name), "throughput"):
		return KindRate
	case m == MetricWall || m == MetricCPU || timeUnits[m.Unit]:
		return KindTime
	case m.Unit == "B/op" || m.Unit == "allocs/op" || strings.HasPrefix(m.Unit, "µs/") || strings.HasPrefix(m.Unit, "us/"):
		return KindCost
	}
	return KindUnknown
}

// words are the verdict words for a higher and a lower value.
func (k Kind) words() (higher, lower string) {
	switch k {
	case KindRate:
		return "higher (better)", "lower (worse)"
	case KindTime:
		return "slower", "faster"
	case KindCost:
		return "costlier", "cheaper"
	}
	return "higher", "lower"
}
