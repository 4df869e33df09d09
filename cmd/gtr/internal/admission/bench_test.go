package admission

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/cmd/gtr/internal/auth"
	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/internal/telemetry"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
)

// processCPU is the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRefusal: one refused call of a partner over its rate, on a
// listener served as the GTR's partners' listener is (TLS, the otelgrpc
// stats handler, authentication, admission), refused by the interceptor
// or by the tap handle. cpu-µs/op is the process's CPU per call, client
// and server together (they share the process); the difference between
// the two is the server's saving. bad_key is the same for a call whose API
// key is no partner's (UNAUTHENTICATED), as a flood of guessed keys would be.
func BenchmarkRefusal(b *testing.B) {
	for _, c := range []struct {
		name string
		want codes.Code
	}{{"over_rate", codes.ResourceExhausted}, {"bad_key", codes.Unauthenticated}} {
		for _, withTap := range []bool{false, true} {
			b.Run(c.name+"/tap="+strconv.FormatBool(withTap), func(b *testing.B) { benchRefusal(b, withTap, c.want) })
		}
	}
}

func benchRefusal(b *testing.B, withTap bool, want codes.Code) {
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{Service: "gtr", Instance: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer tel.Close(context.Background())
	cert, key, caFile, err := pki.Loopback(filepath.Join(b.TempDir(), "pki"), "gtr")
	if err != nil {
		b.Fatal(err)
	}
	tlsCfg, stop, err := tlsconf.ServerConfig(cert, key, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	k, pkey, err := partners.NewKey(nil, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	ix, err := partners.Compile(&partners.Registry{Version: 1, Partners: []partners.Partner{{ID: "p-001",
		Status: partners.StatusActive, Keys: []partners.Key{pkey}, Limits: partners.Limits{RatePerSecond: 1, Burst: 1, MaxInFlight: 10}}}})
	if err != nil {
		b.Fatal(err)
	}
	au := &auth.Partners{Index: func() *partners.Index { return ix }}
	lim := NewPartners(false, nil)
	opts := append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}, tel.PublicServerOptions()...)
	opts = append(opts, au.ServerOptions()...)
	opts = append(opts, grpc.ChainUnaryInterceptor(lim.UnaryInterceptor(nil)))
	if withTap {
		opts = append(opts, grpc.InTapHandle(lim.Tap(au.FromHeader, RouterLimit{}, nil)))
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	cellpayv1.RegisterPaymentsServer(gs, okPayments{})
	go gs.Serve(lis)
	defer gs.Stop()
	tlsOpt, err := client.TLS(caFile)
	if err != nil {
		b.Fatal(err)
	}
	if want == codes.Unauthenticated {
		k = "cp_" + strings.Repeat("x", len(k)-3) // no partner's key, of a key's length
	}
	conn, err := grpc.NewClient(lis.Addr().String(), tlsOpt, grpc.WithChainUnaryInterceptor(client.PartnerKeys(map[string]string{"p-001": k})))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := cellpayv1.NewPaymentsClient(conn)
	ctx := context.Background()
	req := &cellpayv1.SubmitTransactionRequest{PartnerId: "p-001", TransactionId: "t"}
	_, _ = c.SubmitTransaction(ctx, req) // the burst's one token
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			// One a second is admitted: the rate is 1/s.
			if _, err := c.SubmitTransaction(ctx, req); err != nil && status.Code(err) != want {
				b.Errorf("want %v, got %v", want, err)
				return
			}
		}
	})
	b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
}
