package e2e

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// TestFollowUpCostBenchmark (make bench-followups): what a capture, a
// refund and a void cost next to the authorization they follow. Each
// round authorizes restBenchCalls transactions of p-001 (closed loop,
// restBenchWorkers workers), captures each of them in full, refunds each
// in full, then authorizes as many again and voids each; it reads the CPU
// time of the GTR, of p-001's home cell (its instances summed), of that
// cell's Postgres (primary and standby) and of the NATS servers around
// each phase: CPU µs per call per process, throughput, p50 and p99.
// Rounds interleave the kinds; the medians of the rounds (two
// authorizations a round) are the run's figures, and benchrun's runs give
// their spread. Not part of make test.
func TestFollowUpCostBenchmark(t *testing.T) {
	if os.Getenv("CELLPAY_FOLLOWUP_BENCH") != "1" {
		t.Skip("set CELLPAY_FOLLOWUP_BENCH=1 (make bench-followups)")
	}
	const rounds = 3
	ctx := ctxFor(t, 10*time.Minute)
	home := partnerHome(t, ctx, "fb-probe")
	procs := map[string][]int{"gtr": {env.p.Process(platform.GTR).Pid()}}
	for _, in := range env.p.Instances(home) {
		procs["cell"] = append(procs["cell"], env.p.Process(in.Name).Pid())
	}
	procs["postgres"] = env.p.Postgres(home).Pids()
	if sb := env.p.Standby(home); sb != nil {
		procs["postgres"] = append(procs["postgres"], sb.Pids()...)
	}
	for _, n := range env.p.NATSServers() {
		procs["nats"] = append(procs["nats"], n.Pid())
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range procs {
			if !yield(n) {
				return
			}
		}
	})
	cpuOf := func() map[string]time.Duration {
		out := map[string]time.Duration{}
		for n, pids := range procs {
			for _, pid := range pids {
				out[n] += procCPU(t, pid)
			}
		}
		return out
	}
	quiet(t, ctx, 0.4, 2*time.Minute)

	type figures struct {
		cpu            map[string][]float64
		tput, p50, p99 []float64
	}
	res := map[string]*figures{}
	for round := range rounds {
		var (
			mu     sync.Mutex
			auths  = make([]original, restBenchCalls+1)
			failed int
		)
		for phase, mode := range benchFollowUpPhases {
			call := func(i int) error {
				if mode == "authorize" {
					req := request(fmt.Sprintf("fb-%d-%d-%d", round, phase, i), freshPAN())
					txn, err := env.payments.SubmitTransaction(ctx, req)
					if err == nil {
						mu.Lock()
						auths[i] = original{req, txn.GetCellId(), txn}
						mu.Unlock()
					}
					return err
				}
				mu.Lock()
				o := auths[i]
				mu.Unlock()
				if o.txn.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
					mu.Lock()
					failed++
					mu.Unlock()
					return nil
				}
				kind := map[string]cellpayv1.PaymentType{"capture": cellpayv1.PaymentType_CAPTURE, "refund": cellpayv1.PaymentType_REFUND, "void": cellpayv1.PaymentType_VOID}[mode]
				txn, err := followUpOnce(ctx, env.payments, kind, o, o.req.GetTransactionId()+"-"+mode, o.req.GetAmount().GetMinorUnits())
				if err == nil && txn.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
					return fmt.Errorf("%s of %s: %v", mode, o.req.GetTransactionId(), txn.GetStatus())
				}
				return err
			}
			before := cpuOf()
			lat, secs := closedLoop(t, call)
			after := cpuOf()
			f := res[mode]
			if f == nil {
				f = &figures{cpu: map[string][]float64{}}
				res[mode] = f
			}
			line := fmt.Sprintf("round %d %-9s: %d calls, %.0f/s", round, mode, len(lat), float64(len(lat))/secs)
			for _, n := range names {
				us := (after[n] - before[n]).Seconds() * 1e6 / float64(len(lat))
				f.cpu[n] = append(f.cpu[n], us)
				line += fmt.Sprintf(", %s %.0f µs", n, us)
			}
			f.tput = append(f.tput, float64(len(lat))/secs)
			f.p50 = append(f.p50, quantile(lat, 0.50))
			f.p99 = append(f.p99, quantile(lat, 0.99))
			t.Log(line)
			if failed > restBenchCalls/10 {
				t.Fatalf("round %d, %s: %d originals not approved, too few to follow up", round, mode, failed)
			}
			failed = 0
		}
	}
	med := func(v []float64) float64 { s := slices.Sorted(slices.Values(v)); return s[len(s)/2] }
	for _, mode := range []string{"authorize", "capture", "refund", "void"} {
		f := res[mode]
		total := 0.0
		for _, n := range names {
			m := med(f.cpu[n])
			total += m
			testutil.BenchLine(t, fmt.Sprintf("cpu_us_%s_%s", n, mode), m, "µs")
		}
		testutil.BenchLine(t, "cpu_us_total_"+mode, total, "µs")
		testutil.BenchLine(t, "throughput_"+mode, med(f.tput), "tx/s")
		testutil.BenchLine(t, "p50_"+mode, med(f.p50), "ms")
		testutil.BenchLine(t, "p99_"+mode, med(f.p99), "ms")
	}
}

// benchFollowUpPhases: a round's phases, in order. A capture, then a
// refund, of each authorization of the first; a void of each of the
// second (a void needs an authorization with no capture).
var benchFollowUpPhases = []string{"authorize", "capture", "refund", "authorize", "void"}
