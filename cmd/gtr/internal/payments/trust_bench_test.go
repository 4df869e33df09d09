package payments

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cellpay/cellpay/cmd/gtr/internal/auth"
	"github.com/cellpay/cellpay/cmd/gtr/internal/cellconn"
	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/client"
	"github.com/cellpay/cellpay/pkg/routing"
)

// trustGTR is an in-process GTR (the real payments server on a real gRPC
// listener, in front of a fake cell) served three ways: plaintext without
// authentication (main before the trust boundary), TLS without
// authentication, and TLS with API key authentication (as it runs).
type trustGTR struct {
	addr string
	dial []grpc.DialOption
}

var trustModes = []string{"plaintext", "tls", "tls+auth"}

func startTrustGTR(tb testing.TB, mode string) trustGTR {
	tb.Helper()
	a := &fakeCell{id: "c1"}
	a.do = func(r *cellproto.ProcessRequest, s srv) error { return approve(r, s, a.id) }
	cellAddr := serve(tb, a)
	table, err := routing.Compile(routing.Spec{Version: 1, Rules: []routing.Rule{{Name: "all", Pool: "p"}},
		Cells: []routing.Cell{{ID: "c1", Addr: cellAddr, Pool: "p", Weight: 100}}})
	if err != nil {
		tb.Fatal(err)
	}
	pool := cellconn.New()
	tb.Cleanup(func() { pool.Close() })
	pay, err := New(Config{Table: func() *routing.Table { return table }, Cells: pool})
	if err != nil {
		tb.Fatal(err)
	}
	var srvOpts []grpc.ServerOption
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if mode != "plaintext" {
		cert, key, caFile, err := pki.Loopback(filepath.Join(tb.TempDir(), "pki"), "gtr")
		if err != nil {
			tb.Fatal(err)
		}
		tlsCfg, stop, err := tlsconf.ServerConfig(cert, key, 0)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(stop)
		srvOpts = append(srvOpts, grpc.Creds(credentials.NewTLS(tlsCfg)))
		tlsOpt, err := client.TLS(caFile)
		if err != nil {
			tb.Fatal(err)
		}
		dial = []grpc.DialOption{tlsOpt}
	}
	if mode == "tls+auth" {
		reg := &partners.Registry{Version: 1}
		keys := map[string]string{}
		for i := range 50 {
			id := fmt.Sprintf("p-%03d", i+1)
			k, key, err := partners.NewKey(nil, time.Now())
			if err != nil {
				tb.Fatal(err)
			}
			keys[id] = k
			reg.Partners = append(reg.Partners, partners.Partner{ID: id, Status: partners.StatusActive, Keys: []partners.Key{key}})
		}
		ix, err := partners.Compile(reg)
		if err != nil {
			tb.Fatal(err)
		}
		a := &auth.Partners{Index: func() *partners.Index { return ix }}
		srvOpts = append(srvOpts, a.ServerOptions()...)
		dial = append(dial, grpc.WithChainUnaryInterceptor(client.PartnerKeys(keys)))
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	gs := grpc.NewServer(srvOpts...)
	cellpayv1.RegisterPaymentsServer(gs, pay)
	go gs.Serve(lis)
	tb.Cleanup(gs.Stop)
	return trustGTR{addr: lis.Addr().String(), dial: dial}
}

// BenchmarkSubmitTrust: one partner call through the in-process GTR, by
// how it is served.
func BenchmarkSubmitTrust(b *testing.B) {
	for _, mode := range trustModes {
		b.Run(mode, func(b *testing.B) {
			g := startTrustGTR(b, mode)
			conn, err := grpc.NewClient(g.addr, g.dial...)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			c := cellpayv1.NewPaymentsClient(conn)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			run := time.Now().UnixNano()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					if _, err := c.SubmitTransaction(ctx, req(fmt.Sprintf("tb-%d-%d-%p", run, i, &i))); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// TestTrustCostBenchmark (make bench-trust): for each way of serving, the
// load tool's saturated throughput (closed loop), then p50 and p99 at half
// of it (open loop), interleaved so that drift on a shared host falls on
// every side. Not part of make test.
func TestTrustCostBenchmark(t *testing.T) {
	if os.Getenv("CELLPAY_TRUST_BENCH") != "1" {
		t.Skip("set CELLPAY_TRUST_BENCH=1 (make bench-trust)")
	}
	type result struct{ tput, p50, p99 []float64 }
	res := map[string]*result{}
	gtrs := map[string]trustGTR{}
	for _, m := range trustModes {
		res[m] = &result{}
		gtrs[m] = startTrustGTR(t, m)
	}
	ctx := context.Background()
	for round := range 3 {
		for _, m := range trustModes {
			g := gtrs[m]
			sat, err := load.Run(ctx, load.Config{Target: load.TargetGTR, Addr: g.addr, DialOptions: g.dial, Mode: load.ModeClosed,
				Concurrency: 32, Count: load.MaxCount, Duration: 4 * time.Second, Seed: uint64(round + 1), RunID: fmt.Sprintf("sat-%s-%d-%d", strings.ReplaceAll(m, "+", "_"), round, time.Now().UnixNano())}, nil)
			if err != nil || sat.Completed == 0 || len(sat.Errors) > 0 {
				t.Fatalf("%s saturation: %v %+v", m, err, sat.Errors)
			}
			half, err := load.Run(ctx, load.Config{Target: load.TargetGTR, Addr: g.addr, DialOptions: g.dial, Mode: load.ModeOpen,
				Rate: sat.Throughput / 2, Concurrency: 512, Count: int64(sat.Throughput * 2), Duration: 4 * time.Second, Seed: uint64(round + 11),
				RunID: fmt.Sprintf("half-%s-%d-%d", strings.ReplaceAll(m, "+", "_"), round, time.Now().UnixNano())}, nil)
			if err != nil || len(half.Errors) > 0 {
				t.Fatalf("%s half: %v %+v", m, err, half.Errors)
			}
			r := res[m]
			r.tput = append(r.tput, sat.Throughput)
			r.p50 = append(r.p50, half.Latency.P50)
			r.p99 = append(r.p99, half.Latency.P99)
		}
	}
	med := func(v []float64) float64 {
		s := slices.Sorted(slices.Values(v))
		return s[len(s)/2]
	}
	base := res["plaintext"]
	for _, m := range trustModes {
		r := res[m]
		t.Logf("%-10s saturated %7.0f tx/s (%.2f× plaintext)  at half: p50 %.2f ms  p99 %.2f ms (%.2f× plaintext)",
			m, med(r.tput), med(r.tput)/med(base.tput), med(r.p50), med(r.p99), med(r.p99)/med(base.p99))
		// The same figures as BENCH lines, for benchrun (make bench-trust
		// runs this test through it), the mode in each name.
		v := strings.ReplaceAll(m, "+", "_")
		testutil.BenchLine(t, "throughput_"+v, med(r.tput), "tx/s")
		testutil.BenchLine(t, "p50_half_"+v, med(r.p50), "ms")
		testutil.BenchLine(t, "p99_half_"+v, med(r.p99), "ms")
		if m != "plaintext" {
			testutil.BenchLine(t, "throughput_"+v+"_vs_plaintext", med(r.tput)/med(base.tput), "ratio")
			testutil.BenchLine(t, "p99_half_"+v+"_vs_plaintext", med(r.p99)/med(base.p99), "ratio")
		}
	}
}
