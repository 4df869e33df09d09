package cell_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cellpay/cellpay/cmd/cell/internal/cell"
	"github.com/cellpay/cellpay/internal/cardkeys"
	"github.com/cellpay/cellpay/internal/pgtest"
	"github.com/cellpay/cellpay/internal/testutil"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// issuerServer serves an approver as the Issuer service.
type issuerServer struct {
	issuerproto.UnimplementedIssuerServer
	a *approver
}

func (s issuerServer) Authorize(ctx context.Context, in *issuerproto.AuthorizeRequest) (*issuerproto.AuthorizeResponse, error) {
	return s.a.Authorize(ctx, in)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestTwoInstancesRun: two cell.Run of one cell on one database, each
// serving; one of them runs the reconciler, and when it stops the other
// takes over.
func TestTwoInstancesRun(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, pgtest.IgnoreGoroutines()) })
	url := pgtest.NewDatabase(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	issuerproto.RegisterIssuerServer(gs, issuerServer{a: &approver{}})
	go gs.Serve(lis)
	defer gs.Stop()
	keys, err := cardkeys.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	type instance struct {
		addr string
		logs *testutil.Buffer
		stop func()
	}
	start := func(id string) instance {
		in := instance{addr: freeAddr(t), logs: &testutil.Buffer{}}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- cell.Run(ctx, cell.Config{ID: "cell-t", Instance: id, Listen: in.addr, DatabaseURL: url,
				IssuerAddr: lis.Addr().String(), RefDataFile: "../../../../config/refdata.json", Keys: keys,
				Callbacks: cell.Callbacks{Off: true}, ShutdownTimeout: 2 * time.Second,
				Log: slog.New(slog.NewTextHandler(in.logs, nil))})
		}()
		in.stop = func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("instance %s: %v", id, err)
			}
		}
		conn, err := grpc.NewClient(in.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		hc := healthpb.NewHealthClient(conn)
		testutil.Eventually(t, 20*time.Second, id+" serving", func() bool {
			r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
			return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
		})
		return in
	}
	const leads = "this instance runs the cell's reconciler"
	a := start("a")
	testutil.Eventually(t, 5*time.Second, "a leads", func() bool { return strings.Contains(a.logs.String(), leads) })
	b := start("b")
	defer b.stop()
	time.Sleep(2 * time.Second) // b tries every second meanwhile
	if strings.Contains(b.logs.String(), leads) {
		t.Fatal("b runs the reconciler while a does")
	}
	a.stop()
	testutil.Eventually(t, 5*time.Second, "b takes over", func() bool { return strings.Contains(b.logs.String(), leads) })
}
