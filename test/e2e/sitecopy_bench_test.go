package e2e

import (
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/dev/pgcluster"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
)

// TestSiteCopyBenchmark measures what a cell's cross-site copy costs
// (docs/design/sites.md): cell-a's database streams asynchronously to a
// copy in the other site over a link of 20 ms each way (platform.SiteLink,
// StartSiteCopy), and closed-loop load through the GTR runs with the copy
// streaming and stopped, in the order copy, none, none, copy, so that a
// drift of the shared machine falls on both alike. Per phase: throughput,
// p50 and p99 (what the copy adds on the home path: nothing is the goal,
// since no commit waits for it), and the CPU µs per cell-a transaction of
// cell-a's primary Postgres (its WAL sender to the copy included) and of
// the copy itself.
//
// A measurement, not a pass/fail test:
//
//	CELLPAY_SITECOPY_BENCH=1 go test ./test/e2e -run TestSiteCopyBenchmark -v
//
// (make bench-sitecopy runs it through benchrun).
func TestSiteCopyBenchmark(t *testing.T) {
	if os.Getenv("CELLPAY_SITECOPY_BENCH") == "" {
		t.Skip("a benchmark: set CELLPAY_SITECOPY_BENCH=1 (make bench-sitecopy)")
	}
	const (
		concurrency = 16
		phase       = 8 * time.Second
		cell        = "cell-a"
	)
	ctx := ctxFor(t, 8*time.Minute)
	ports, err := testutil.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	link := platform.NewSiteLink(20 * time.Millisecond)
	t.Cleanup(func() { link.Close() })
	sc, err := env.p.StartSiteCopy(ctx, cell, link, ports[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Stop() })
	prim := env.p.Postgres(cell)
	setMode := func(mode string) {
		t.Helper()
		switch {
		case mode == "copy" && !sc.Cluster().Running():
			if err := sc.Cluster().Restart(ctx); err != nil {
				t.Fatal(err)
			}
		case mode == "none" && sc.Cluster().Running():
			if err := sc.Cluster().Stop(); err != nil {
				t.Fatal(err)
			}
		}
		if mode == "copy" {
			// Caught up before the phase: a copy restarted replays what
			// it missed first.
			if _, err := prim.WaitStreaming(ctx, sc.Name); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 30*time.Second, "the copy caught up", func() bool {
				lag, err := sc.Lag(ctx)
				return err == nil && lag.Streaming && lag.Bytes < 64<<10
			})
		}
	}
	for i, mode := range []string{"copy", "none", "none", "copy"} {
		setMode(mode)
		var onCell atomic.Int64
		pgCPU, copyCPU := treeCPU(prim), treeCPU(sc.Cluster())
		rep, err := load.Run(ctx, load.Config{
			Target: load.TargetGTR, Addr: env.gtrAddr, DialOptions: env.gtrOpts, Mode: load.ModeClosed,
			Concurrency: concurrency, Count: 100_000, Duration: phase, Seed: uint64(i + 1),
			RunID: runID + "-scbench-" + mode + "-" + string(rune('a'+i)), PerRequestTimeout: 10 * time.Second,
			OnResult: func(r load.Result) {
				if r.Err == nil && r.Transaction.GetCellId() == cell {
					onCell.Add(1)
				}
			},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := float64(onCell.Load())
		pgUs, copyUs := pgCPU()/n, copyCPU()/n
		var errs int64
		for _, e := range rep.Errors {
			errs += e
		}
		t.Logf("%-4s %7.1f tx/s  p50 %6.1f ms  p99 %6.1f ms  %s: %.0f tx, its Postgres %.0f µs/tx, the copy %.0f µs/tx, errors %d",
			mode, rep.Throughput, rep.Latency.P50, rep.Latency.P99, cell, n, pgUs, copyUs, errs)
		// Each mode runs twice: two samples a run.
		testutil.BenchLine(t, "throughput_"+mode, rep.Throughput, "tx/s")
		testutil.BenchLine(t, "p50_"+mode, rep.Latency.P50, "ms")
		testutil.BenchLine(t, "p99_"+mode, rep.Latency.P99, "ms")
		testutil.BenchLine(t, "primary_cpu_us_per_tx_"+mode, pgUs, "µs")
		if mode == "copy" {
			testutil.BenchLine(t, "copy_cpu_us_per_tx", copyUs, "µs")
		}
		testutil.BenchLine(t, "errors_"+mode, float64(errs), "count")
	}
}

// treeCPU starts measuring the CPU time of a Postgres server's processes
// (the postmaster and every process it started: backends, WAL senders
// and receivers); the function it returns ends the measurement and says
// it in µs. A process started meanwhile counts whole; one gone before the
// end is not counted (backends here live as long as the pools).
func treeCPU(c *pgcluster.Cluster) func() float64 {
	read := func() map[int]time.Duration {
		m := map[int]time.Duration{}
		for _, pid := range c.Pids() {
			if d, ok := cpuTime(pid); ok {
				m[pid] = d
			}
		}
		return m
	}
	before := read()
	return func() float64 {
		var sum time.Duration
		for pid, d := range read() {
			sum += d - before[pid]
		}
		return float64(sum.Microseconds())
	}
}
