package e2e

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/drill"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/client/failover"
)

// TestAccessPointBenchmark measures the client's failover between the
// access points, by strategy and by how the primary is lost (kill -9,
// SIGSTOP): the time from the loss to the first call the backup served,
// to the switch, and the calls that waited for the retry on the other
// access point, with what waiting cost them. Intervals are the tests' one
// second, not the guide's minute. A measurement, not a pass/fail test:
//
//	CELLPAY_AP_BENCH=1 go test ./test/e2e -run TestAccessPointBenchmark -v
//
// (make bench-access-points); CELLPAY_AP_JSON=FILE writes the numbers.
func TestAccessPointBenchmark(t *testing.T) {
	if os.Getenv("CELLPAY_AP_BENCH") == "" {
		t.Skip("a benchmark: set CELLPAY_AP_BENCH=1 (make bench-access-points)")
	}
	const rate = 100
	type row struct {
		Strategy        string  `json:"strategy"`
		Cut             string  `json:"cut"`
		FirstOnBackupMs float64 `json:"loss_to_first_backup_answer_ms"`
		SwitchMs        float64 `json:"loss_to_switch_ms"`
		SwitchBackMs    float64 `json:"restore_to_switch_back_ms"`
		WaitedForRetry  int     `json:"calls_waited_for_retry"`
		CallsDuringCut  int     `json:"calls_during_cut"`
		RetryP50Ms      float64 `json:"waited_p50_ms"`
		RetryMaxMs      float64 `json:"waited_max_ms"`
		Errors          int     `json:"errors"`
		CallTimeoutMs   int64   `json:"call_timeout_ms"`
		ProbeIntervalMs int64   `json:"probe_interval_ms"`
		EvalIntervalMs  int64   `json:"eval_interval_ms"`
	}
	var rows []row
	for _, strategy := range []failover.Strategy{failover.Probe, failover.SuccessRate, failover.Both} {
		for _, freeze := range []bool{false, true} {
			fo := shortFailover
			fo.Strategy = strategy
			ctx := ctxFor(t, 2*time.Minute)
			rep, err := drill.Run(ctx, drill.Config{
				Load:    accessPointLoad("apb-"+string(strategy)[:3]+map[bool]string{false: "k", true: "s"}[freeze], fo, rate),
				Targets: []drill.Target{primaryTarget(t, freeze)},
				Warmup:  3 * time.Second, Hold: 12 * time.Second, Settle: 4 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			s := rep.Steps[0]
			var waited []float64
			during := 0
			for _, r := range rep.Results {
				if r.Sent.Before(s.CutAt) || !r.Sent.Before(s.RestoredAt) {
					continue
				}
				during++
				if r.FailedOver {
					waited = append(waited, float64(r.Latency)/float64(time.Millisecond))
				}
			}
			slices.Sort(waited)
			r := row{Strategy: string(strategy), Cut: map[bool]string{false: "kill -9", true: "SIGSTOP"}[freeze],
				FirstOnBackupMs: s.FirstOtherAfter * 1000, SwitchMs: s.SwitchAwayAfter * 1000, SwitchBackMs: s.SwitchBackAfter * 1000,
				WaitedForRetry: len(waited), CallsDuringCut: during, Errors: s.ErrorsDuring,
				CallTimeoutMs: callTimeout.Milliseconds(), ProbeIntervalMs: fo.ProbeInterval.Milliseconds(), EvalIntervalMs: fo.EvalInterval.Milliseconds()}
			if len(waited) > 0 {
				r.RetryP50Ms, r.RetryMaxMs = waited[len(waited)/2], waited[len(waited)-1]
			}
			rows = append(rows, r)
			t.Logf("%+v", r)
			// The row's figures as BENCH lines, for benchrun (make
			// bench-access-points runs this test through it), the strategy
			// and the cut in each name (probe_kill, success_rate_stop, ...);
			// a switch that did not happen (-1) gives no line.
			v := strings.ReplaceAll(string(strategy), "-", "_") + map[bool]string{false: "_kill", true: "_stop"}[freeze]
			if s.FirstOtherAfter >= 0 {
				testutil.BenchLine(t, "first_backup_answer_"+v, r.FirstOnBackupMs, "ms")
			}
			if s.SwitchAwayAfter >= 0 {
				testutil.BenchLine(t, "switch_"+v, r.SwitchMs, "ms")
			}
			if s.SwitchBackAfter >= 0 {
				testutil.BenchLine(t, "switch_back_"+v, r.SwitchBackMs, "ms")
			}
			testutil.BenchLine(t, "waited_for_retry_"+v, float64(r.WaitedForRetry), "count")
			if len(waited) > 0 {
				testutil.BenchLine(t, "waited_p50_"+v, r.RetryP50Ms, "ms")
				testutil.BenchLine(t, "waited_max_"+v, r.RetryMaxMs, "ms")
			}
			testutil.BenchLine(t, "errors_"+v, float64(r.Errors), "count")
			thaw(t, env.p.Process("gtr"))
		}
	}
	b, _ := json.MarshalIndent(rows, "", "  ")
	t.Logf("access points:\n%s", b)
	if f := os.Getenv("CELLPAY_AP_JSON"); f != "" {
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
