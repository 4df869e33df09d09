package issuersim

import (
	"context"
	"math"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/dev/testutil/hoptest"
	"github.com/cellpay/cellpay/internal/grpclimits"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// BenchmarkAuthorizeOverMTLS is the cell→issuer hop as
// BenchmarkSubmitOverMTLS (cmd/gtr/internal/payments) is the GTR→cell
// hop: a cell's Authorize to the issuer simulator over real gRPC on
// loopback, plaintext and then as the platform runs it (mutual TLS with
// the cell's certificate, the issuer's RequireAndVerifyClientCert and
// hop.IssuerPolicy, which lets only cells authorize). The two sides are
// built as the processes build them: the server as cmd/issuersim's serve
// (grpclimits.Internal, hop.ServerOptions, issuersim.New), the client as
// cell.Start builds its issuer client (hop.DialOption, grpc.NewClient,
// issuerproto.NewIssuerClient) and called as the cell's server calls it
// (a deadline per call). Telemetry (otelgrpc's handlers, the cell's timed
// client) is left out of both variants, as in the GTR→cell benchmark.
// The connection is long-lived, as the cell's is: the handshake is paid
// once, before the clock, and the record layer and the policy on every
// call. Every call is a new transaction, so every call is a decision.
func BenchmarkAuthorizeOverMTLS(b *testing.B) {
	files := hoptest.PKI(b,
		hoptest.Cert{Name: "cell-a", Hosts: []string{hop.CellHost("cell-a"), hop.Cell("cell-a")}, Usage: pki.Client},
		hoptest.Cert{Name: "issuer", Hosts: []string{"127.0.0.1", hop.Issuer}, Usage: pki.Server})
	hoptest.Variants(b, files("issuer"), hop.IssuerPolicy, files("cell-a"), func(b *testing.B, srvOpts []grpc.ServerOption, dialOpts []grpc.DialOption) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		gs := grpc.NewServer(slices.Concat(grpclimits.Internal.ServerOptions(), srvOpts)...)
		// No card runs out of funds however many calls the clock asks for.
		issuerproto.RegisterIssuerServer(gs, New(Config{Seed: 1, PerCardLimit: math.MaxInt64}))
		go gs.Serve(lis)
		defer gs.Stop()
		conn, err := grpc.NewClient(lis.Addr().String(), dialOpts...)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		client := issuerproto.NewIssuerClient(conn)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if resp, err := client.Authorize(ctx, authReq("warm-"+strconv.FormatInt(time.Now().UnixNano(), 36), CardApproved, 100)); err != nil || !resp.GetApproved() {
			b.Fatal(resp, err) // the handshake, and a refused identity, before the clock
		}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				i++
				id := "a-" + strconv.Itoa(i) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
				callCtx, cancelCall := context.WithTimeout(ctx, 5*time.Second)
				_, err := client.Authorize(callCtx, authReq(id, CardApproved, 100))
				cancelCall()
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
