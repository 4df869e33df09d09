package payments

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cellpay/cellpay/cmd/gtr/internal/cellconn"
	"github.com/cellpay/cellpay/internal/telemetry"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

// BenchmarkSubmitOverGRPC measures a partner's call through a real gRPC
// server in front of the payments server, to a fake cell, with and without
// the otelgrpc instrumentation the GTR runs with.
func BenchmarkSubmitOverGRPC(b *testing.B) {
	for _, instrumented := range []bool{false, true} {
		b.Run("otel="+strconv.FormatBool(instrumented), func(b *testing.B) {
			var srvOpts []grpc.ServerOption
			var dialOpts []grpc.DialOption
			if instrumented {
				tel, err := telemetry.Setup(context.Background(), telemetry.Config{Service: "gtr", Instance: "bench"})
				if err != nil {
					b.Fatal(err)
				}
				defer tel.Close(context.Background())
				srvOpts, dialOpts = tel.PublicServerOptions(), tel.DialOptions()
			}
			a := &fakeCell{}
			a.do = func(r *cellproto.ProcessRequest, s srv) error { return approve(r, s, a.id) }
			addr := serve(b, a)
			table, err := routing.Compile(routing.Spec{Version: 1, Rules: []routing.Rule{{Name: "all", Pool: "p"}},
				Cells: []routing.Cell{{ID: "c1", Addr: addr, Pool: "p", Weight: 100}}})
			if err != nil {
				b.Fatal(err)
			}
			a.id = "c1"
			pool := cellconn.New(dialOpts...)
			defer pool.Close()
			pay, err := New(Config{Table: func() *routing.Table { return table }, Cells: pool})
			if err != nil {
				b.Fatal(err)
			}
			lis, _ := net.Listen("tcp", "127.0.0.1:0")
			gs := grpc.NewServer(srvOpts...)
			cellpayv1.RegisterPaymentsServer(gs, pay)
			go gs.Serve(lis)
			defer gs.Stop()
			conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			defer conn.Close()
			client := cellpayv1.NewPaymentsClient(conn)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					if _, err := client.SubmitTransaction(ctx, req("o-"+strconv.Itoa(i)+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
