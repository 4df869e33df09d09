package benchrun

import (
	"errors"
	"slices"
	"testing"
)

func TestParseLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		line    string
		want    []Sample
		wantErr bool // malformed, as opposed to errNotMetric
		notMet  bool
	}{
		{"BENCH with unit", "BENCH p50 1.25 ms", []Sample{{Metric{"p50", "ms"}, 1.25}}, false, false},
		{"BENCH without unit", "BENCH tx 5000", []Sample{{Metric{"tx", ""}, 5000}}, false, false},
		{"go test -v prefix", "    refdata_bench_test.go:12: BENCH lag 3.5e-3 s", []Sample{{Metric{"lag", "s"}, 0.0035}}, false, false},
		{"tabs around", "\tBENCH\ttx 7", nil, false, true}, // the marker is "BENCH " with a space
		{"negative value", "BENCH delta -2 ms", []Sample{{Metric{"delta", "ms"}, -2}}, false, false},
		{"Go benchmark", "BenchmarkRoute/hit-2   \t 1000000\t      123.4 ns/op\t      16 B/op\t       1 allocs/op",
			[]Sample{{Metric{"BenchmarkRoute/hit", "ns/op"}, 123.4}, {Metric{"BenchmarkRoute/hit", "B/op"}, 16}, {Metric{"BenchmarkRoute/hit", "allocs/op"}, 1}}, false, false},
		{"Go benchmark, custom metric and MB/s", "BenchmarkCopy-16  50  2000 ns/op  512.00 MB/s  3.5 tx/op",
			[]Sample{{Metric{"BenchmarkCopy", "ns/op"}, 2000}, {Metric{"BenchmarkCopy", "MB/s"}, 512}, {Metric{"BenchmarkCopy", "tx/op"}, 3.5}}, false, false},
		{"Go benchmark, sub-benchmark ending in a number", "BenchmarkSize/n-1024-2 10 5 ns/op",
			[]Sample{{Metric{"BenchmarkSize/n-1024", "ns/op"}, 5}}, false, false},
		{"Go benchmark, GOMAXPROCS 1 (no suffix)", "BenchmarkX 10 5 ns/op", []Sample{{Metric{"BenchmarkX", "ns/op"}, 5}}, false, false},
		{"benchmark name alone (go test -v)", "BenchmarkRoute/hit", nil, false, true},
		{"benchmark with odd fields", "BenchmarkX-2 10 5 ns/op 7", nil, false, true},
		{"benchmark log line", "BenchmarkX-2 starting now", nil, false, true},
		{"PASS", "PASS", nil, false, true},
		{"ok line", "ok  \tgithub.com/cellpay/cellpay/pkg/routing\t1.234s", nil, false, true},
		{"marker inside a word", "XBENCH tx 1", nil, false, true},
		{"empty", "", nil, false, true},
		{"value not a number", "BENCH tx many", nil, true, false},
		{"value NaN", "BENCH tx NaN", nil, true, false},
		{"value Inf", "BENCH tx +Inf", nil, true, false},
		{"no value", "BENCH tx", nil, true, false},
		{"extra field", "BENCH p50 1 ms extra", nil, true, false},
		{"reserved wall", "BENCH wall 3 s", nil, true, false},
		{"reserved cpu:", "BENCH cpu:gtr 3 s", nil, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseLine(tt.line)
			switch {
			case tt.notMet:
				if !errors.Is(err, errNotMetric) {
					t.Fatalf("parseLine(%q) = %v, %v; want errNotMetric", tt.line, got, err)
				}
			case tt.wantErr:
				if err == nil || errors.Is(err, errNotMetric) {
					t.Fatalf("parseLine(%q) = %v, %v; want a malformed-line error", tt.line, got, err)
				}
			default:
				if err != nil || !slices.Equal(got, tt.want) {
					t.Fatalf("parseLine(%q) = %v, %v; want %v", tt.line, got, err, tt.want)
				}
			}
		})
	}
}

func TestStripProcs(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"BenchmarkX-2":          "BenchmarkX",
		"BenchmarkX-16":         "BenchmarkX",
		"BenchmarkX":            "BenchmarkX",
		"BenchmarkX/a-b":        "BenchmarkX/a-b",
		"BenchmarkX-":           "BenchmarkX-",
		"BenchmarkX/size-64-8":  "BenchmarkX/size-64",
		"BenchmarkX/p-99.9-8":   "BenchmarkX/p-99.9",
		"BenchmarkX/mode=a-b-4": "BenchmarkX/mode=a-b",
	} {
		if got := stripProcs(in); got != want {
			t.Errorf("stripProcs(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestKindAndWords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		m             Metric
		kind          Kind
		higher, lower string
	}{
		{MetricWall, KindTime, "slower", "faster"},
		{MetricCPU, KindTime, "slower", "faster"},
		{Metric{"cpu:gtr", "s"}, KindTime, "slower", "faster"},
		{Metric{"p99", "ms"}, KindTime, "slower", "faster"},
		{Metric{"lag", "µs"}, KindTime, "slower", "faster"},
		{Metric{"BenchmarkRoute", "ns/op"}, KindTime, "slower", "faster"},
		{Metric{"BenchmarkRoute", "B/op"}, KindCost, "costlier", "cheaper"},
		{Metric{"BenchmarkRoute", "allocs/op"}, KindCost, "costlier", "cheaper"},
		{Metric{"cpu:gtr", "µs/tx"}, KindCost, "costlier", "cheaper"},
		{Metric{"throughput", "tx/s"}, KindRate, "higher (better)", "lower (worse)"},
		{Metric{"BenchmarkCopy", "MB/s"}, KindRate, "higher (better)", "lower (worse)"},
		{Metric{"peak_throughput", ""}, KindRate, "higher (better)", "lower (worse)"},
		{Metric{"tx", ""}, KindUnknown, "higher", "lower"},
		{Metric{"errors", ""}, KindUnknown, "higher", "lower"},
		{Metric{"BenchmarkX", "tx/op"}, KindUnknown, "higher", "lower"},
	}
	for _, tt := range tests {
		k := KindOf(tt.m)
		h, l := k.words()
		if k != tt.kind || h != tt.higher || l != tt.lower {
			t.Errorf("%v: kind %d (%q, %q), want %d (%q, %q)", tt.m, k, h, l, tt.kind, tt.higher, tt.lower)
		}
	}
}
