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
	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/dev/testutil/hoptest"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

// BenchmarkSubmitOverMTLS is BenchmarkSubmitOverGRPC's partner call with
// the GTR→cell hop plaintext and then as the platform runs it: mutual TLS
// with the GTR's certificate and the cell's authorization policy
// (package hop). The partners' side stays plaintext in both, so the
// difference is the hop's cost alone. Connections are long-lived, as the
// GTR's pool keeps them: the handshake is paid once, the record layer and
// the policy on every call.
func BenchmarkSubmitOverMTLS(b *testing.B) {
	files := hoptest.PKI(b,
		hoptest.Cert{Name: "gtr", Hosts: []string{hop.GTR}, Usage: pki.Client},
		hoptest.Cert{Name: "c1", Hosts: []string{"127.0.0.1", hop.Cell("c1")}, Usage: pki.Server})
	hoptest.Variants(b, files("c1"), hop.CellPolicy, files("gtr"), func(b *testing.B, srvOpts []grpc.ServerOption, dialOpts []grpc.DialOption) {
		a := &fakeCell{id: "c1"}
		a.do = func(r *cellproto.ProcessRequest, s srv) error { return approve(r, s, a.id) }
		addr := serve(b, a, srvOpts...)
		table, err := routing.Compile(routing.Spec{Version: 1, Rules: []routing.Rule{{Name: "all", Pool: "p"}},
			Cells: []routing.Cell{{ID: "c1", Addr: addr, Pool: "p", Weight: 100}}})
		if err != nil {
			b.Fatal(err)
		}
		pool := cellconn.New(dialOpts...)
		defer pool.Close()
		pay, err := New(Config{Table: func() *routing.Table { return table }, Cells: pool})
		if err != nil {
			b.Fatal(err)
		}
		lis, _ := net.Listen("tcp", "127.0.0.1:0")
		gs := grpc.NewServer()
		cellpayv1.RegisterPaymentsServer(gs, pay)
		go gs.Serve(lis)
		defer gs.Stop()
		conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		defer conn.Close()
		client := cellpayv1.NewPaymentsClient(conn)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := client.SubmitTransaction(ctx, req("m-warm-"+strconv.FormatInt(time.Now().UnixNano(), 36))); err != nil {
			b.Fatal(err) // the handshake, and a refused identity, before the clock
		}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				i++
				if _, err := client.SubmitTransaction(ctx, req("m-"+strconv.Itoa(i)+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
