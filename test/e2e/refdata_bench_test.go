package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/internal/refdata/refnats"
)

// TestRefdataBenchmark measures, on the real binaries with a nats-server
// process: the lag from publish to applied in every cell at 100 updates per
// second, and transaction throughput while 10,000-entry snapshots are being
// applied against the same load without them. It is not part of the default
// run:
//
//	CELLPAY_REFDATA_BENCH=1 go test ./test/e2e/ -run TestRefdataBenchmark -v -timeout 10m
//
// Results go to BENCHMARKS.md (section 4) by hand.
func TestRefdataBenchmark(t *testing.T) {
	if os.Getenv("CELLPAY_REFDATA_BENCH") == "" {
		t.Skip("set CELLPAY_REFDATA_BENCH=1 to run the reference data benchmark")
	}
	ctx := ctxFor(t, 8*time.Minute)
	e := startRefEnv(t, ctx, 3)
	source := filepath.Join(env.root, "config", "refdata")
	e.publish(ctx, "snapshot", "-source", source)
	e.waitCells(ctx, "version 1", func(s refdata.Status) bool { return s.Version == 1 })
	pub := &refnats.Publisher{JS: e.js}

	// 1. Publish-to-applied lag at 100 updates per second for 20 s.
	lags := measureLag(t, ctx, e, pub, 100, 20*time.Second)
	for _, id := range sortedCells(lags) {
		l := lags[id]
		t.Logf("lag %s: %d versions seen, p50 %v, p99 %v, max %v", id, len(l), pct(l, 50), pct(l, 99), pct(l, 100))
	}
	var all []time.Duration
	for _, l := range lags {
		all = append(all, l...)
	}
	t.Logf("lag all cells: %d samples, p50 %v, p99 %v, max %v", len(all), pct(all, 50), pct(all, 99), pct(all, 100))
	// The headline figures as BENCH lines, for benchrun (make bench-refdata
	// runs this test through it).
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	testutil.BenchLine(t, "lag_p50", ms(pct(all, 50)), "ms")
	testutil.BenchLine(t, "lag_p99", ms(pct(all, 99)), "ms")
	testutil.BenchLine(t, "lag_max", ms(pct(all, 100)), "ms")

	// 2. Throughput: baseline, with 10,000-entry snapshots applying, baseline.
	big := bigSnapshot(t, source)
	e.publish(ctx, "snapshot", "-source", source) // back to the sample before the load
	opts, err := e.p.GTRDialOptions()
	if err != nil {
		t.Fatal(err)
	}
	run := func(name string) load.Report {
		rep, err := load.Run(ctx, load.Config{
			Target: load.TargetGTR, Addr: e.gtrAddr, DialOptions: opts, Mode: load.ModeClosed, Concurrency: 16,
			Count: load.MaxCount, Duration: 10 * time.Second, Seed: 7, RunID: "bench-" + runID + "-" + name,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %.0f tx/s, completed %d, errors %v, p50 %.1f ms, p99 %.1f ms", name, rep.Throughput, rep.Completed, rep.Errors, rep.Latency.P50, rep.Latency.P99)
		return rep
	}
	run("warmup")
	// Interleaved pairs, so that drift on a shared host falls on both sides:
	// first with a new 10k-entry snapshot every second, then back to back
	// (the next published as soon as every cell serves the last).
	for _, every := range []time.Duration{time.Second, 0} {
		v := "every_1s" // the variant, in the BENCH lines' names
		if every == 0 {
			v = "back_to_back"
		}
		var base, loaded float64
		const pairs = 3
		for i := 1; i <= pairs; i++ {
			b := run(fmt.Sprintf("baseline-every-%v-%d", every, i))
			stop := make(chan struct{})
			var applied atomic.Int64
			var wg sync.WaitGroup
			wg.Go(func() { applied.Store(int64(publishBigSnapshots(t, ctx, e, pub, big, stop, every))) })
			l := run(fmt.Sprintf("with-10k-snapshots-every-%v-%d", every, i))
			close(stop)
			wg.Wait()
			t.Logf("pair %d (every %v): %+.1f%% with %d snapshots of %d entries applied during the run",
				i, every, 100*(l.Throughput-b.Throughput)/b.Throughput, applied.Load(), len(big.MCC)+len(big.FXRates)+len(big.Currencies))
			// One sample of each a pair, three a run.
			testutil.BenchLine(t, "throughput_baseline_"+v, b.Throughput, "tx/s")
			testutil.BenchLine(t, "throughput_snapshots_"+v, l.Throughput, "tx/s")
			testutil.BenchLine(t, "throughput_change_"+v, 100*(l.Throughput-b.Throughput)/b.Throughput, "%")
			testutil.BenchLine(t, "snapshots_applied_"+v, float64(applied.Load()), "count")
			base += b.Throughput / pairs
			loaded += l.Throughput / pairs
		}
		t.Logf("throughput (a snapshot every %v): baseline %.0f tx/s, during 10k snapshots %.0f tx/s: %+.1f%% (mean of %d interleaved pairs)",
			every, base, loaded, 100*(loaded-base)/base, pairs)
	}
}

// measureLag publishes updates at rate per second for d and returns, per
// cell, the lag from each version's publish time to the moment its status
// report naming it arrived (an upper bound on publish-to-applied).
func measureLag(t *testing.T, ctx context.Context, e *refEnv, pub *refnats.Publisher, rate int, d time.Duration) map[string][]time.Duration {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]map[uint64]time.Duration{}
	sub, err := e.nc.Subscribe(refdata.StatusSubjectPrefix+"*", func(m *nats.Msg) {
		now := time.Now()
		var st refdata.Status
		if json.Unmarshal(m.Data, &st) != nil || st.PublishedAt.IsZero() {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if seen[st.Cell] == nil {
			seen[st.Cell] = map[uint64]time.Duration{}
		}
		if _, ok := seen[st.Cell][st.Version]; !ok {
			seen[st.Cell][st.Version] = now.Sub(st.PublishedAt)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var last uint64
	first := uint64(0)
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		// Rates move by a hundredth of a cent each time: every update is new.
		res, err := pub.Update(ctx, refdata.Update{FXRates: map[string]string{"USD": "1." + strconv.Itoa(1000+int(last%9000))}})
		if err != nil {
			t.Fatal(err)
		}
		last = res.Version
		if first == 0 {
			first = last
		}
	}
	e.waitCells(ctx, fmt.Sprintf("version %d", last), func(s refdata.Status) bool { return s.Version == last })
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	out := map[string][]time.Duration{}
	for cell, versions := range seen {
		for v, lag := range versions {
			if v >= first && v <= last {
				out[cell] = append(out[cell], lag)
			}
		}
	}
	t.Logf("published versions %d..%d (%d updates at %d/s)", first, last, last-first+1, rate)
	return out
}

// bigSnapshot is the sample with every four-digit MCC: 10,000 codes.
func bigSnapshot(t *testing.T, source string) refdata.File {
	t.Helper()
	f, err := refdata.ReadSource(source)
	if err != nil {
		t.Fatal(err)
	}
	risks := []string{refdata.RiskLow, refdata.RiskMedium, refdata.RiskHigh}
	for i := range 10000 {
		code := fmt.Sprintf("%04d", i)
		if _, ok := f.MCC[code]; !ok {
			f.MCC[code] = refdata.MCC{Category: fmt.Sprintf("generated_%02d", i/100), Risk: risks[i%3]}
		}
	}
	return f
}

// publishBigSnapshots publishes a distinct 10,000-entry snapshot, waits
// until every cell serves it, and repeats until stop; it returns how many
// it published.
func publishBigSnapshots(t *testing.T, ctx context.Context, e *refEnv, pub *refnats.Publisher, f refdata.File, stop <-chan struct{}, every time.Duration) int {
	n := 0
	next := time.Now()
	for {
		select {
		case <-stop:
			return n
		case <-time.After(time.Until(next)):
		}
		next = time.Now().Add(every)
		f.FXRates["USD"] = "1.0" + strconv.Itoa(800+n%100)
		res, err := pub.Snapshot(ctx, f, true)
		if err != nil {
			t.Error(err)
			return n
		}
		n++
		for ctx.Err() == nil {
			st, _ := refnats.CollectStatus(ctx, e.nc, 100*time.Millisecond)
			done := len(st) == len(e.cells)
			for _, s := range st {
				done = done && s.Version >= res.Version
			}
			if done {
				break
			}
		}
	}
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)].Round(10 * time.Microsecond)
}

func sortedCells[V any](m map[string]V) []string {
	var ids []string
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
