package healthport_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/healthport"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestHealthOnly serves a health server on a health port over real gRPC
// and checks that health answers there, NOT_SERVING included, and that
// nothing else does: not the Cell API, not the issuer's, not reflection.
func TestHealthOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(cellproto.Cell_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	hp, err := healthport.Listen("127.0.0.1:0", hs)
	if err != nil {
		t.Fatal(err)
	}
	defer hp.Stop()
	conn, err := grpc.NewClient(hp.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)

	for _, svc := range []string{"", cellproto.Cell_ServiceDesc.ServiceName} {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check(%q) = %v, %v; want SERVING", svc, r, err)
		}
	}
	hs.Shutdown() // what the owner does at SIGTERM
	if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("after Shutdown: Check = %v, %v; want NOT_SERVING", r, err)
	}

	unserved := map[string]error{}
	_, unserved["cellpay Cell.Get"] = cellproto.NewCellClient(conn).Get(ctx, &cellproto.GetRequest{})
	_, unserved["issuer Authorize"] = issuerproto.NewIssuerClient(conn).Authorize(ctx, &issuerproto.AuthorizeRequest{})
	if s, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx); err != nil {
		unserved["reflection"] = err
	} else {
		_, unserved["reflection"] = s.Recv()
	}
	for what, err := range unserved {
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("%s on the health port: %v, want Unimplemented", what, err)
		}
	}
}

// TestListenError: a port in use is an error, not a silent no-probe.
func TestListenError(t *testing.T) {
	hs := health.NewServer()
	hp, err := healthport.Listen("127.0.0.1:0", hs)
	if err != nil {
		t.Fatal(err)
	}
	defer hp.Stop()
	if other, err := healthport.Listen(hp.Addr().String(), hs); err == nil {
		other.Stop()
		t.Fatal("second Listen on the same address succeeded")
	}
}
