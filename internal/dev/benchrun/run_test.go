package benchrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		runs, variants int
		want           string // variant indexes, runs separated by |
	}{
		{1, 1, "0"},
		{3, 1, "0|0|0"},
		{4, 2, "01|10|01|10"},
		{3, 3, "012|210|012"},
	}
	for _, tt := range tests {
		var runs []string
		for run := 1; run <= tt.runs; run++ {
			runs = append(runs, strings.Trim(strings.ReplaceAll(fmt.Sprint(Order(run, tt.variants)), " ", ""), "[]"))
		}
		if got := strings.Join(runs, "|"); got != tt.want {
			t.Errorf("%d runs of %d variants: %s, want %s", tt.runs, tt.variants, got, tt.want)
		}
	}
}

// TestRunInterleaves runs two fake variants: they run A B B A A B, and the
// summaries compare what they printed and what was measured.
func TestRunInterleaves(t *testing.T) {
	t.Parallel()
	f := &fakeExec{commands: map[string]fakeCommand{}}
	cfg := fakeConfig(t, newFakeHost(), f, Variant{"a", "cmd-a"}, Variant{"b", "cmd-b"})
	cfg.Runs = 6
	f.commands["cmd-a"] = fakeCommand{stdout: "BENCH p50 1 ms\nnoise\n", wall: time.Second, cpu: time.Second}
	f.commands["cmd-b"] = fakeCommand{stdout: "x_test.go:3: BENCH p50 100 ms\n", wall: time.Second, cpu: 2 * time.Second}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"cmd-a", "cmd-b", "cmd-b", "cmd-a", "cmd-a", "cmd-b", "cmd-b", "cmd-a", "cmd-a", "cmd-b", "cmd-b", "cmd-a"}
	if !slices.Equal(f.ran, want) {
		t.Fatalf("ran %v, want %v", f.ran, want)
	}
	if len(res.Records) != 12 || res.Records[1].Variant != "b" || res.Records[1].Run != 1 || res.Records[2].Run != 2 {
		t.Fatalf("records %+v", res.Records)
	}
	if r := res.Records[0]; r.Busy != nil || r.Noisy || r.Load1 != 0.42 {
		t.Errorf("record without a quiet check: %+v", r)
	}
	got := map[string]Comparison{}
	for _, m := range res.Metrics {
		for _, c := range m.Comparisons {
			got[m.String()] = c
		}
	}
	for metric, text := range map[string]string{
		"wall s": "no difference (inside the spread)",
		"cpu s":  "slower",
		"p50 ms": "slower",
	} {
		if got[metric].Text != text {
			t.Errorf("%s: %+v, want %q", metric, got[metric], text)
		}
	}
	if res.Machine.Model != "Fake CPU 9000" || !res.Date.Equal(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("machine %+v, date %v", res.Machine, res.Date)
	}
}

func TestQuietWait(t *testing.T) {
	t.Parallel()
	quiet, busy := cpuLine(10, 190), cpuLine(100, 100) // 0.05 and 0.5 of a second's ticks
	// readings accumulates per-second deltas into the counters /proc/stat
	// would show.
	readings := func(deltas ...string) []string {
		var out []string
		var tb, ti int
		out = append(out, cpuLine(0, 0))
		for _, d := range deltas {
			b, _ := parseCPUTimes([]byte(d))
			tb += int(b.busy)
			ti += int(b.total - b.busy)
			out = append(out, cpuLine(tb, ti))
		}
		return out
	}
	tests := []struct {
		name      string
		stats     []string
		wait      time.Duration
		wantSleep int
		wantBusy  float64
		wantNoisy bool
	}{
		{"quiet at once", readings(quiet), 2 * time.Minute, 1, 0.05, false},
		{"quiet after two busy seconds", readings(busy, busy, quiet), 2 * time.Minute, 3, 0.05, false},
		{"never quiet", readings(busy, busy, busy, busy, busy), 3 * time.Second, 3, 0.5, true},
		{"never quiet, a wait under a poll", readings(busy, busy), time.Millisecond, 1, 0.5, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newFakeHost()
			h.stats = tt.stats
			f := &fakeExec{commands: map[string]fakeCommand{"c": {}}}
			var log bytes.Buffer
			s := &noSleep{}
			cfg := fakeConfig(t, h, f, Variant{"a", "c"})
			cfg.QuietWait, cfg.Sleep, cfg.Log = tt.wait, s.sleep, &log
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := res.Records[0]
			if s.n != tt.wantSleep || r.Busy == nil || math.Abs(*r.Busy-tt.wantBusy) > 1e-9 || r.Noisy != tt.wantNoisy {
				t.Errorf("slept %d, record %+v (busy %v); want %d sleeps, busy %v, noisy %v", s.n, r, r.Busy, tt.wantSleep, tt.wantBusy, tt.wantNoisy)
			}
			if tt.wantNoisy != strings.Contains(log.String(), "marked noisy") {
				t.Errorf("log: %s", log.String())
			}
		})
	}
}

func TestRunFailures(t *testing.T) {
	t.Parallel()
	many := strings.Repeat("BENCH x 1\n", MaxSamples+1)
	tests := []struct {
		name       string
		cmd        fakeCommand
		per        string
		wantErr    string
		wantOutput string // kept in the record, when not ""
	}{
		{"exit status", fakeCommand{stdout: "partial\nBENCH x 1\n", err: errors.New("exit status 3")}, "", "exit status 3", "partial\nBENCH x 1\n"},
		{"timeout", fakeCommand{stdout: "started\n", block: true}, "", "timed out after", ""},
		{"too many samples", fakeCommand{stdout: many}, "", "over 10000 metric samples in one run (the limit)", ""},
		{"line too long", fakeCommand{stdout: strings.Repeat("x", MaxLine+1)}, "", "over 1048576 bytes (the limit)", ""},
		{"per metric missing", fakeCommand{stdout: "BENCH x 1\n"}, "tx", "-per tx: the command printed no such metric", ""},
		{"per metric zero", fakeCommand{stdout: "BENCH tx 0\n"}, "tx", "-per tx: the command printed 0", ""},
		{"per metric in two units", fakeCommand{stdout: "BENCH tx 1\nBENCH tx 2 k\n"}, "tx", `printed it as "tx" and "tx k"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeExec{commands: map[string]fakeCommand{"ok": {stdout: "BENCH x 1\nBENCH tx 1\n"}, "bad": tt.cmd}}
			cfg := fakeConfig(t, newFakeHost(), f, Variant{"a", "ok"}, Variant{"b", "bad"})
			cfg.Runs, cfg.Per = 3, tt.per
			if tt.cmd.block {
				cfg.Timeout = 10 * time.Millisecond
			}
			res, err := Run(context.Background(), cfg)
			if !errors.Is(err, ErrCommandFailed) || !strings.Contains(err.Error(), "b #1") || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err %v, want ErrCommandFailed naming b #1 and %q", err, tt.wantErr)
			}
			if len(res.Records) != 2 || !slices.Equal(f.ran, []string{"ok", "bad"}) {
				t.Fatalf("ran %v: want a stop at the failed run", f.ran)
			}
			r := res.Records[1]
			if r.Err == "" || !strings.Contains(res.Failure, "b #1") {
				t.Errorf("failed record %+v, failure %q", r, res.Failure)
			}
			if tt.wantOutput != "" && r.Output != tt.wantOutput {
				t.Errorf("output kept: %q", r.Output)
			}
			for _, m := range res.Metrics {
				for _, v := range m.Variants {
					if v.Variant == "b" {
						t.Errorf("%v: the failed run's samples were summarised", m.Metric)
					}
				}
			}
		})
	}
}

func TestRunInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakeExec{commands: map[string]fakeCommand{"c": {block: true, before: cancel}}}
	res, err := Run(ctx, fakeConfig(t, newFakeHost(), f, Variant{"a", "c"}))
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrCommandFailed) || res.Failure != "" {
		t.Errorf("err %v, failure %q: want the context's error alone", err, res.Failure)
	}
}

// TestPerProcessCPU: with Procs and Per, each child of the PID gets its
// CPU in seconds and per unit of the metric, and the command and all.
func TestPerProcessCPU(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	h.proc(50, 1, 0, "bin/cellpay")
	h.proc(51, 50, 100, "bin/gtr", "-listen", ":7070")
	h.proc(52, 50, 300, "bin/cell", "-instance", "a")
	f := &fakeExec{commands: map[string]fakeCommand{"load": {
		stdout: "BENCH tx 500\nBENCH tx 500\n", // two loads in one run: 1000 tx
		cpu:    500 * time.Millisecond,
		before: func() {
			h.proc(51, 50, 150, "bin/gtr", "-listen", ":7070") // +0.5 s
			h.proc(52, 50, 400, "bin/cell", "-instance", "a")  // +1 s
			h.proc(53, 50, 7, "bin/issuersim")                 // new: +0.07 s
		},
	}}}
	cfg := fakeConfig(t, h, f, Variant{"a", "load"})
	cfg.Procs, cfg.Per = 50, "tx"
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Records[0]
	for m, want := range map[Metric]float64{
		{"cpu:gtr :7070", "s"}:     0.5,
		{"cpu:cell a", "s"}:        1,
		{"cpu:issuersim", "s"}:     0.07,
		{"cpu:gtr :7070", "µs/tx"}: 500,
		{"cpu:cell a", "µs/tx"}:    1000,
		{"cpu:issuersim", "µs/tx"}: 70,
		{"cpu:command", "µs/tx"}:   500,
		{"cpu:all", "µs/tx"}:       2070,
		{"tx", ""}:                 500,
		MetricCPU:                  0.5,
	} {
		if got, ok := sample(r, m); !ok || math.Abs(got-want) > 1e-6 {
			t.Errorf("%v = %v (found %v), want %v", m, got, ok, want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	ok := func() Config {
		return Config{Variants: []Variant{{"a", "true"}}, Runs: 5, Quiet: 0.15, QuietWait: time.Minute, Timeout: time.Minute}
	}
	tooMany := make([]Variant, MaxVariants+1)
	for i := range tooMany {
		tooMany[i] = Variant{fmt.Sprint("v", i), "true"}
	}
	tests := []struct {
		name   string
		change func(*Config)
		flag   string
	}{
		{"no variant", func(c *Config) { c.Variants = nil }, "-v"},
		{"too many variants", func(c *Config) { c.Variants = tooMany }, "-v"},
		{"empty name", func(c *Config) { c.Variants[0].Name = "" }, "-v"},
		{"name with a space", func(c *Config) { c.Variants[0].Name = "a b" }, "-v"},
		{"name twice", func(c *Config) { c.Variants = append(c.Variants, Variant{"a", "false"}) }, "-v a"},
		{"empty command", func(c *Config) { c.Variants[0].Command = " " }, "-v a"},
		{"no runs", func(c *Config) { c.Runs = 0 }, "-runs"},
		{"too many runs", func(c *Config) { c.Runs = MaxRuns + 1 }, "-runs"},
		{"quiet 0", func(c *Config) { c.Quiet = 0 }, "-quiet"},
		{"quiet over 1", func(c *Config) { c.Quiet = 1.5 }, "-quiet"},
		{"negative quiet wait", func(c *Config) { c.QuietWait = -time.Second }, "-quiet-wait"},
		{"negative procs", func(c *Config) { c.Procs = -1 }, "-procs"},
		{"no timeout", func(c *Config) { c.Timeout = 0 }, "-timeout"},
		{"timeout over the cap", func(c *Config) { c.Timeout = MaxTimeout + 1 }, "-timeout"},
		{"per a harness metric", func(c *Config) { c.Per = "wall" }, "-per"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok()
			tt.change(&c)
			res, err := Run(context.Background(), c)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.flag) || res != nil {
				t.Errorf("Run: %v, %v; want ErrInvalidConfig naming %s", res, err, tt.flag)
			}
		})
	}
	c := ok()
	c.Procs, c.Host = 4242, newFakeHost()
	if _, err := Run(context.Background(), c); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "-procs 4242: no such process") {
		t.Errorf("Run with a missing -procs process: %v", err)
	}
}

// TestLineWriter: lines split across writes, CRLF, a last line without a
// newline, and the prefix on what is passed through.
func TestLineWriter(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	w := &lineWriter{prefix: "[a #1] ", log: &log, stop: func() { t.Error("stopped") }}
	for _, p := range []string{"BENCH tx ", "12\r\nhello\nBENCH bad x\nBenchmarkX-2 1 5 ns/op\nBENCH p50 3 ms"} {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	w.flush()
	want := []Sample{{Metric{"tx", ""}, 12}, {Metric{"BenchmarkX", "ns/op"}, 5}, {Metric{"p50", "ms"}, 3}}
	if !slices.Equal(w.samples, want) {
		t.Errorf("samples %v, want %v", w.samples, want)
	}
	wantLog := "[a #1] BENCH tx 12\n[a #1] hello\n[a #1] BENCH bad x\nbenchrun: [a #1] ignored: BENCH line \"BENCH bad x\": value \"x\" is not a finite number\n[a #1] BenchmarkX-2 1 5 ns/op\n[a #1] BENCH p50 3 ms\n"
	if log.String() != wantLog {
		t.Errorf("log:\n%s\nwant:\n%s", log.String(), wantLog)
	}
	if w.output() != "BENCH tx 12\nhello\nBENCH bad x\nBenchmarkX-2 1 5 ns/op\nBENCH p50 3 ms\n" {
		t.Errorf("tail %q", w.output())
	}
}

func TestLineWriterTail(t *testing.T) {
	t.Parallel()
	w := &lineWriter{log: &bytes.Buffer{}, stop: func() {}}
	line := strings.Repeat("y", 99) + "\n"
	for range 1000 { // 100 kB: the tail keeps the last failTail bytes
		if _, err := w.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.output(); len(got) != failTail || !strings.HasSuffix(got, line) {
		t.Errorf("tail of %d bytes, want %d ending in a whole line", len(got), failTail)
	}
	if len(w.tail) > 2*failTail {
		t.Errorf("tail buffer holds %d bytes, want at most %d", len(w.tail), 2*failTail)
	}
}
