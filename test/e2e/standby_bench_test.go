package e2e

import (
	"encoding/json"
	"os"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/dev/testutil"
)

// TestStandbyBenchmark measures what the synchronous standby costs and
// how fast the launcher fails over, on the real platform in one run:
//
//  1. Closed-loop load through the GTR with every cell's standby
//     synchronous, asynchronous (synchronous_standby_names empty, the standby
//     still streaming) and stopped (the primary alone, as -standby=false
//     runs), in the order sync, async, none, none, async, sync so that a
//     drift of the shared machine falls on every mode alike.
//  2. Open-loop load, kill -9 of one cell's primary: the time from the
//     kill to the watchdog's detection, to the promotion, and to the first
//     transaction sent after the kill that the cell answered (committed on
//     the new primary), then until a new synchronous standby.
//
// A measurement, not a pass/fail test:
//
//	CELLPAY_STANDBY_BENCH=1 go test ./test/e2e -run TestStandbyBenchmark -v
//
// (make bench-standby); CELLPAY_STANDBY_JSON=FILE writes the numbers.
func TestStandbyBenchmark(t *testing.T) {
	if os.Getenv("CELLPAY_STANDBY_BENCH") == "" {
		t.Skip("a benchmark: set CELLPAY_STANDBY_BENCH=1 (make bench-standby)")
	}
	const (
		concurrency = 16
		phase       = 8 * time.Second
	)
	ctx := ctxFor(t, 8*time.Minute)
	setMode := func(mode string) {
		t.Helper()
		for _, c := range env.cells {
			prim, sb := env.p.Postgres(c.ID), env.p.Standby(c.ID)
			if sb == nil {
				t.Fatalf("%s has no standby", c.ID)
			}
			switch mode {
			case "sync":
				if !sb.Running() {
					if err := sb.Restart(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := prim.WaitStreaming(ctx, "cellpay_standby"); err != nil {
					t.Fatal(err)
				}
				if err := prim.SetSynchronousStandby(ctx, "cellpay_standby"); err != nil {
					t.Fatal(err)
				}
				if err := prim.WaitSynchronous(ctx, "cellpay_standby"); err != nil {
					t.Fatal(err)
				}
			case "async", "none":
				if err := prim.SetSynchronousStandby(ctx, ""); err != nil {
					t.Fatal(err)
				}
				if mode == "none" {
					if err := sb.Stop(); err != nil {
						t.Fatal(err)
					}
				} else if !sb.Running() {
					if err := sb.Restart(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	type run struct {
		Mode       string           `json:"mode"`
		Throughput float64          `json:"throughput_tx_s"`
		P50        float64          `json:"p50_ms"`
		P99        float64          `json:"p99_ms"`
		Completed  int64            `json:"completed"`
		Errors     map[string]int64 `json:"errors,omitempty"`
	}
	var runs []run
	for i, mode := range []string{"sync", "async", "none", "none", "async", "sync"} {
		setMode(mode)
		rep, err := load.Run(ctx, load.Config{
			Target: load.TargetGTR, Addr: env.gtrAddr, DialOptions: env.gtrOpts, Mode: load.ModeClosed,
			Concurrency: concurrency, Count: 100_000, Duration: phase, Seed: uint64(i + 1),
			RunID: runID + "-sbbench-" + mode + "-" + string(rune('a'+i)), PerRequestTimeout: 10 * time.Second,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		r := run{Mode: mode, Throughput: rep.Throughput, P50: rep.Latency.P50, P99: rep.Latency.P99, Completed: rep.Completed, Errors: rep.Errors}
		runs = append(runs, r)
		t.Logf("%-5s %7.1f tx/s  p50 %6.1f ms  p99 %6.1f ms  errors %v", mode, r.Throughput, r.P50, r.P99, rep.Errors)
		// The same as BENCH lines, for benchrun (make bench-standby runs this
		// test through it): each mode runs twice, two samples a run.
		var modeErrs int64
		for _, n := range rep.Errors {
			modeErrs += n
		}
		testutil.BenchLine(t, "throughput_"+mode, r.Throughput, "tx/s")
		testutil.BenchLine(t, "p50_"+mode, r.P50, "ms")
		testutil.BenchLine(t, "p99_"+mode, r.P99, "ms")
		testutil.BenchLine(t, "errors_"+mode, float64(modeErrs), "count")
	}
	setMode("sync")

	// Failover under open-loop load.
	const (
		rate   = 100.0
		total  = 16 * time.Second
		killAt = 5 * time.Second
		victim = "cell-a"
	)
	type sample struct {
		sent time.Time
		lat  time.Duration
		cell string
		err  bool
		code string
	}
	var mu sync.Mutex
	var samples []sample
	done := make(chan error, 1)
	go func() {
		_, err := load.Run(ctx, load.Config{
			Target: load.TargetGTR, Addr: env.gtrAddr, DialOptions: env.gtrOpts, Mode: load.ModeOpen, Rate: rate,
			Concurrency: 512, Count: int64(rate * total.Seconds()), Duration: total, Seed: 99,
			RunID: runID + "-sbbench-failover", PerRequestTimeout: 10 * time.Second,
			OnResult: func(r load.Result) {
				mu.Lock()
				samples = append(samples, sample{r.Sent, r.Latency, r.Transaction.GetCellId(), r.Err != nil, status.Code(r.Err).String()})
				mu.Unlock()
			},
		}, nil)
		done <- err
	}()
	time.Sleep(killAt)
	nBefore := len(env.p.Failovers(victim))
	prim := env.p.Postgres(victim)
	kill := time.Now()
	if err := syscall.Kill(-prim.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "failover", func() bool { return len(env.p.Failovers(victim)) > nBefore })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, "a new synchronous standby", func() bool {
		fs := env.p.Failovers(victim)
		return !fs[len(fs)-1].Restored.IsZero()
	})
	f := env.p.Failovers(victim)[len(env.p.Failovers(victim))-1]
	var firstCommit time.Duration = -1
	var lats []float64
	errs := map[string]int{}
	for _, s := range samples {
		if s.err {
			errs[s.code]++
		}
		if !s.err && s.cell == victim && s.sent.After(kill) {
			if d := s.sent.Add(s.lat).Sub(kill); firstCommit < 0 || d < firstCommit {
				firstCommit = d
			}
		}
		if s.sent.After(kill) && s.sent.Before(kill.Add(3*time.Second)) {
			lats = append(lats, float64(s.lat)/float64(time.Millisecond))
		}
	}
	sort.Float64s(lats)
	p99During := 0.0
	if len(lats) > 0 {
		p99During = lats[len(lats)*99/100]
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	res := map[string]any{
		"closed_loop_concurrency":           concurrency,
		"phase_seconds":                     phase.Seconds(),
		"runs":                              runs,
		"failover_rate_tx_s":                rate,
		"failover_kill_to_detected_ms":      ms(f.Detected.Sub(kill)),
		"failover_kill_to_promoted_ms":      ms(f.Promoted.Sub(kill)),
		"failover_detected_to_promoted_ms":  ms(f.Took()),
		"failover_kill_to_first_commit_ms":  ms(firstCommit),
		"failover_promoted_to_restored_ms":  ms(f.Restored.Sub(f.Promoted)),
		"failover_p99_ms_3s_after_kill":     p99During,
		"failover_errors":                   errs,
		"failover_transactions":             len(samples),
		"watchdog_interval_ms":              env.p.Config().FailoverCheckInterval.Milliseconds(),
		"watchdog_failed_checks_to_promote": env.p.Config().FailoverChecks,
		"victim":                            victim,
		"reason":                            f.Reason,
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	t.Logf("standby benchmark:\n%s", b)
	// The failover's figures as BENCH lines, for benchrun.
	testutil.BenchLine(t, "failover_kill_to_detected", ms(f.Detected.Sub(kill)), "ms")
	testutil.BenchLine(t, "failover_kill_to_promoted", ms(f.Promoted.Sub(kill)), "ms")
	testutil.BenchLine(t, "failover_detected_to_promoted", ms(f.Took()), "ms")
	if firstCommit >= 0 { // -1: the cell answered nothing sent after the kill
		testutil.BenchLine(t, "failover_kill_to_first_commit", ms(firstCommit), "ms")
	}
	testutil.BenchLine(t, "failover_promoted_to_restored", ms(f.Restored.Sub(f.Promoted)), "ms")
	testutil.BenchLine(t, "failover_p99_3s_after_kill", p99During, "ms")
	nErrs := 0
	for _, n := range errs {
		nErrs += n
	}
	testutil.BenchLine(t, "failover_errors", float64(nErrs), "count")
	if out := os.Getenv("CELLPAY_STANDBY_JSON"); out != "" {
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
