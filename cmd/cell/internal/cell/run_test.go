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
	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/internal/dev/testutil"
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

// TestTwoInstancesRun: two instances of one cell on one database, each
// started as main starts one (New, Start, Shutdown) and serving; one of
// them runs the reconciler, and when it stops the other takes over.
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
		in := instance{logs: &testutil.Buffer{}}
		c, err := cell.New(cell.Config{ID: "cell-t", Instance: id, Listen: "127.0.0.1:0", DatabaseURL: url,
			IssuerAddr: lis.Addr().String(), RefDataFile: "../../../../config/refdata.json", Keys: keys,
			Callbacks: cell.Callbacks{Off: true}, ShutdownTimeout: 2 * time.Second,
			Log: slog.New(slog.NewTextHandler(in.logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Start(ctx); err != nil {
			t.Fatalf("instance %s: %v", id, err)
		}
		in.addr = c.Addr().String()
		in.stop = func() {
			if err := c.Shutdown(context.Background()); err != nil {
				t.Errorf("instance %s: %v", id, err)
			}
		}
		t.Cleanup(in.stop) // if the test fails first; a no-op after in.stop
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
