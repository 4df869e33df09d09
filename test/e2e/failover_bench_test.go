package e2e

import (
	"encoding/json"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/dev/testutil"
)

// TestFailoverBenchmark measures failover on the real platform: open-loop
// load through the GTR, kill -9 of one cell, restart later. It reports the
// time from the kill to the last transaction the GTR sent to the dead cell,
// p99 latency while failing over, and throughput before, during and after.
// It is a measurement, not a pass/fail test: run it with
//
//	CELLPAY_FAILOVER_BENCH=1 go test ./test/e2e -run TestFailoverBenchmark -v
//
// (make bench-failover); CELLPAY_FAILOVER_JSON=FILE writes the numbers.
func TestFailoverBenchmark(t *testing.T) {
	if os.Getenv("CELLPAY_FAILOVER_BENCH") == "" {
		t.Skip("a benchmark: set CELLPAY_FAILOVER_BENCH=1 (make bench-failover)")
	}
	const (
		rate     = 150.0
		total    = 24 * time.Second
		killAt   = 8 * time.Second
		healAt   = 16 * time.Second
		victim   = "cell-b"
		duringTo = 2 * time.Second // "during": the first seconds after the kill
	)
	ctx := ctxFor(t, 3*time.Minute)
	type sample struct {
		sent    time.Time
		lat     time.Duration
		cell    string
		attempt int32
		code    codes.Code // codes.OK when the call was answered
	}
	var mu sync.Mutex
	var samples []sample
	cfg := load.Config{
		Target: load.TargetGTR, Addr: env.gtrAddr, DialOptions: env.gtrOpts, Mode: load.ModeOpen, Rate: rate, Concurrency: 512,
		Count: int64(rate * total.Seconds()), Duration: total, Seed: 42, RunID: runID + "-fobench",
		PerRequestTimeout: 10 * time.Second,
		OnResult: func(r load.Result) {
			mu.Lock()
			samples = append(samples, sample{r.Sent, r.Latency, r.Transaction.GetCellId(), r.Transaction.GetAttempts(), status.Code(r.Err)})
			mu.Unlock()
		},
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() { _, err := load.Run(ctx, cfg, nil); done <- err }()
	time.Sleep(killAt)
	kill := time.Now()
	if err := env.p.Process(victim).Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(healAt - killAt)
	heal := time.Now()
	restartCell(t, ctx, victim)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// The last transaction sent to the dead cell: a request scheduled after
	// the kill whose first attempt went there shows up re-routed (attempt
	// 2 or more).
	var last time.Duration
	var rerouted, errs int
	var before, during, after []sample
	// errCodes counts partners' errors by code and by when they were sent
	// (before the kill, in the first seconds after it, until the restart,
	// after it), so that a run with errors says which they were.
	errCodes := map[string]int{}
	for _, s := range samples {
		if s.code != codes.OK {
			errs++
			phase := "after_restart"
			switch {
			case s.sent.Before(kill):
				phase = "before_kill"
			case s.sent.Before(kill.Add(duringTo)):
				phase = "first_2s"
			case s.sent.Before(heal):
				phase = "until_restart"
			}
			errCodes[s.code.String()+" "+phase]++
		}
		if s.sent.After(kill) && s.sent.Before(heal) && s.attempt > 1 {
			rerouted++
			last = max(last, s.sent.Sub(kill))
		}
		switch {
		case s.sent.Before(kill) && s.sent.After(start.Add(2*time.Second)):
			before = append(before, s)
		case s.sent.After(kill) && s.sent.Before(kill.Add(duringTo)):
			during = append(during, s)
		case s.sent.After(kill.Add(duringTo)) && s.sent.Before(heal):
			after = append(after, s)
		}
	}
	p99 := func(ss []sample) float64 {
		if len(ss) == 0 {
			return 0
		}
		l := make([]time.Duration, len(ss))
		for i, s := range ss {
			l[i] = s.lat
		}
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		return float64(l[len(l)*99/100]) / float64(time.Millisecond)
	}
	tput := func(ss []sample, d time.Duration) float64 {
		ok := 0
		for _, s := range ss {
			if s.code == codes.OK {
				ok++
			}
		}
		return float64(ok) / d.Seconds()
	}
	res := map[string]any{
		"rate":                          rate,
		"kill_to_last_sent_to_dead_ms":  float64(last) / float64(time.Millisecond),
		"rerouted_after_kill":           rerouted,
		"errors":                        errs,
		"errors_by_code_and_phase":      errCodes,
		"p99_ms_before":                 p99(before),
		"p99_ms_during":                 p99(during),
		"p99_ms_after":                  p99(after),
		"throughput_before":             tput(before, kill.Sub(start.Add(2*time.Second))),
		"throughput_during":             tput(during, duringTo),
		"throughput_after":              tput(after, heal.Sub(kill.Add(duringTo))),
		"transactions":                  len(samples),
		"health_interval_ms":            250,
		"consecutive_failures_to_eject": 3,
		"envoy_outlier_interval_ms":     10000,
		"envoy_consecutive_5xx":         5,
		"envoy_base_ejection_time_ms":   30000,
		"gtr_attempt_timeout_ms":        2000,
		"victim":                        victim,
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	t.Logf("failover:\n%s", b)
	// The headline figures again as BENCH lines, for benchrun (make
	// bench-failover runs this test through it and reads only these).
	testutil.BenchLine(t, "kill_to_last_sent_to_dead", float64(last)/float64(time.Millisecond), "ms")
	testutil.BenchLine(t, "rerouted", float64(rerouted), "count")
	testutil.BenchLine(t, "errors", float64(errs), "count")
	testutil.BenchLine(t, "p99_before", p99(before), "ms")
	testutil.BenchLine(t, "p99_during", p99(during), "ms")
	testutil.BenchLine(t, "p99_after", p99(after), "ms")
	testutil.BenchLine(t, "throughput_before", tput(before, kill.Sub(start.Add(2*time.Second))), "tx/s")
	testutil.BenchLine(t, "throughput_during", tput(during, duringTo), "tx/s")
	testutil.BenchLine(t, "throughput_after", tput(after, heal.Sub(kill.Add(duringTo))), "tx/s")
	testutil.BenchLine(t, "tx", float64(len(samples)), "count")
	if f := os.Getenv("CELLPAY_FAILOVER_JSON"); f != "" {
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
