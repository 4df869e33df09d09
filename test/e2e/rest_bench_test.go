package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
)

// TestRESTCostBenchmark (make bench-rest): what the REST/JSON path costs
// the GTR next to gRPC. Each round submits restBenchCalls approvals over
// gRPC, then as many over REST (HTTPS, HTTP/2, the Go client in this
// process), closed loop with restBenchWorkers workers, and reads the
// primary GTR's CPU time (utime+stime, /proc) around each phase: CPU µs
// per call at the GTR, throughput, and p50 and p99 of the calls. Rounds
// interleave the two, so that drift falls on both; the medians of the
// rounds are the run's figures, and benchrun's runs give their spread.
// Not part of make test.
func TestRESTCostBenchmark(t *testing.T) {
	if os.Getenv("CELLPAY_REST_BENCH") != "1" {
		t.Skip("set CELLPAY_REST_BENCH=1 (make bench-rest)")
	}
	const rounds = 3
	ctx := ctxFor(t, 10*time.Minute)
	keys, err := env.p.PartnerKeys()
	if err != nil {
		t.Fatal(err)
	}
	key := keys["p-001"]
	c := restClient(t)
	gtrPid := env.p.Process(platform.GTR).Pid()
	quiet(t, ctx, 0.4, 2*time.Minute)

	type figures struct{ cpu, tput, p50, p99 []float64 }
	res := map[string]*figures{"grpc": {}, "rest": {}}
	for round := range rounds {
		for _, mode := range []string{"grpc", "rest"} {
			call := func(i int) error {
				req := request(fmt.Sprintf("rb-%s-%d-%d", mode, round, i), freshPAN())
				if mode == "grpc" {
					_, err := env.payments.SubmitTransaction(ctx, req)
					return err
				}
				hreq, err := http.NewRequestWithContext(ctx, "POST", "https://"+env.restAddr+submitPath("p-001"), bytes.NewReader(restJSON(t, req)))
				if err != nil {
					return err
				}
				hreq.Header.Set("Authorization", "Bearer "+key)
				resp, err := c.Do(hreq)
				if err != nil {
					return err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("REST: %s", resp.Status)
				}
				return nil
			}
			cpu0 := procCPU(t, gtrPid)
			lat, secs := closedLoop(t, call)
			cpuUs := (procCPU(t, gtrPid) - cpu0).Seconds() * 1e6 / float64(len(lat))
			f := res[mode]
			f.cpu = append(f.cpu, cpuUs)
			f.tput = append(f.tput, float64(len(lat))/secs)
			f.p50 = append(f.p50, quantile(lat, 0.50))
			f.p99 = append(f.p99, quantile(lat, 0.99))
			t.Logf("round %d %-4s: %d calls, %.0f tx/s, GTR %.0f µs/call, p50 %.2f ms, p99 %.2f ms",
				round, mode, len(lat), f.tput[round], cpuUs, f.p50[round], f.p99[round])
		}
	}
	med := func(v []float64) float64 { s := slices.Sorted(slices.Values(v)); return s[len(s)/2] }
	for _, mode := range []string{"grpc", "rest"} {
		f := res[mode]
		testutil.BenchLine(t, "gtr_cpu_us_per_call_"+mode, med(f.cpu), "µs")
		testutil.BenchLine(t, "throughput_"+mode, med(f.tput), "tx/s")
		testutil.BenchLine(t, "p50_"+mode, med(f.p50), "ms")
		testutil.BenchLine(t, "p99_"+mode, med(f.p99), "ms")
	}
	testutil.BenchLine(t, "gtr_cpu_rest_vs_grpc", med(res["rest"].cpu)/med(res["grpc"].cpu), "ratio")
}

// The closed loop of a phase: restBenchCalls calls by restBenchWorkers
// workers, within restBenchFor.
const (
	restBenchCalls   = 1500
	restBenchWorkers = 16
	restBenchFor     = time.Minute
)

// closedLoop runs call restBenchCalls times (i its index) and returns each
// call's latency in ms and the phase's seconds; an error fails the test.
func closedLoop(t *testing.T, call func(i int) error) ([]float64, float64) {
	t.Helper()
	var next atomic.Int64
	var mu sync.Mutex
	lat := make([]float64, 0, restBenchCalls)
	deadline := time.Now().Add(restBenchFor)
	start := time.Now()
	var wg sync.WaitGroup
	for range restBenchWorkers {
		wg.Go(func() {
			for i := int(next.Add(1)); i <= restBenchCalls && time.Now().Before(deadline); i = int(next.Add(1)) {
				began := time.Now()
				if err := call(i); err != nil {
					t.Error(err)
					return
				}
				d := float64(time.Since(began).Microseconds()) / 1000
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() || len(lat) == 0 {
		t.FailNow()
	}
	return lat, time.Since(start).Seconds()
}

// quantile is the q-quantile of v (nearest rank).
func quantile(v []float64, q float64) float64 {
	s := slices.Sorted(slices.Values(v))
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// procCPU is the CPU time process pid has used; the test fails if it is
// gone.
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	cpu, ok := cpuTime(pid)
	if !ok {
		t.Fatalf("process %d is gone", pid)
	}
	return cpu
}
