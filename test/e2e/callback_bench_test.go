package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/client"
)

// TestCallbackBenchmark (CELLPAY_CALLBACK_BENCH=1, make bench-callbacks)
// measures what callbacks cost a transaction: closed-loop load through the
// GTR, rounds alternating between partners whose callbacks are delivered
// (to a receiver on loopback) and partners with no endpoint (the outbox
// row is written either way, in the statement that records the outcome),
// and the delivery lag from an outcome's record to its arrival.
func TestCallbackBenchmark(t *testing.T) {
	if os.Getenv("CELLPAY_CALLBACK_BENCH") == "" {
		t.Skip("set CELLPAY_CALLBACK_BENCH=1 (make bench-callbacks)")
	}
	ctx := ctxFor(t, 10*time.Minute)
	on, off := newCBPartner(t, "benchon"), newCBPartner(t, sameCellAs(t, ctx, "benchon", "benchoff"))
	r := on.receiver(t, "bench")
	on.set(t, "ordered", []string{r.URL}, "")
	off.set(t, "ordered", nil, "")
	tlsOpt, err := client.TLS(env.p.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	const perRound = 1500
	for round := range 6 {
		p, name := off, "off"
		if round%2 == 1 {
			p, name = on, "on"
		}
		rep, err := load.Run(ctx, load.Config{
			Target: load.TargetGTR, Addr: env.gtrAddr, Mode: load.ModeClosed, Concurrency: 16, Count: perRound, Duration: 90 * time.Second,
			DialOptions: []grpc.DialOption{tlsOpt, grpc.WithChainUnaryInterceptor(client.PartnerKeys(map[string]string{p.id: p.key}))},
			Partners:    []string{p.id}, Seed: uint64(round + 1), RunID: fmt.Sprintf("%s-bench%d", runID, round), PerRequestTimeout: 10 * time.Second,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d callbacks %-3s: %d completed, %.0f tx/s, p50 %.1f ms, p99 %.1f ms", round+1, name, rep.Completed, rep.Throughput, rep.Latency.P50, rep.Latency.P99)
		// The round's figures as BENCH lines, for benchrun (make
		// bench-callbacks runs this test through it): three rounds of each,
		// three samples a run.
		testutil.BenchLine(t, "throughput_"+name, rep.Throughput, "tx/s")
		testutil.BenchLine(t, "p50_"+name, rep.Latency.P50, "ms")
		testutil.BenchLine(t, "p99_"+name, rep.Latency.P99, "ms")
	}
	testutil.Eventually(t, 2*time.Minute, "every callback delivered", func() bool { return len(r.Events()) >= 3*perRound*95/100 })
	time.Sleep(2 * time.Second)
	lags := r.Lags()
	slices.Sort(lags)
	pct := func(p float64) time.Duration { return lags[min(len(lags)-1, int(p*float64(len(lags))))] }
	t.Logf("delivery lag over %d callbacks: p50 %v, p99 %v, max %v", len(lags), pct(0.50).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), lags[len(lags)-1].Round(time.Millisecond))
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	testutil.BenchLine(t, "delivery_lag_p50", ms(pct(0.50)), "ms")
	testutil.BenchLine(t, "delivery_lag_p99", ms(pct(0.99)), "ms")
	testutil.BenchLine(t, "delivery_lag_max", ms(lags[len(lags)-1]), "ms")
}

// sameCellAs returns a partner name, prefix-N, whose transactions the
// table in force sends to the cell that name's go to: the benchmark's two
// partners share a cell, so that only delivery differs between rounds
// (the IDs are new every run, and on different cells the rounds measured
// different cells and a lag without the silent partner's retries).
func sameCellAs(t *testing.T, ctx context.Context, name, prefix string) string {
	t.Helper()
	attrs := func(n string) *adminproto.Attrs {
		return &adminproto.Attrs{PartnerId: runID + "-" + n, Market: "GB", PaymentType: "CARD_AUTHORIZATION"}
	}
	keys := []*adminproto.Attrs{attrs(name)}
	for i := range 64 {
		keys = append(keys, attrs(fmt.Sprintf("%s-%d", prefix, i)))
	}
	r, err := platformAdmin(t).RouteKeys(ctx, &adminproto.RouteKeysRequest{Attrs: keys})
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range r.GetHome()[1:] {
		if h != "" && h == r.GetHome()[0] {
			t.Logf("partners %s and %s-%d on %s", name, prefix, i, h)
			return fmt.Sprintf("%s-%d", prefix, i)
		}
	}
	t.Fatalf("none of 64 names routes to %s's cell %q", name, r.GetHome()[0])
	return ""
}
