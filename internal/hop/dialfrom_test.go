package hop

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
)

// peerAddr records the address each health check came from.
type peerAddr struct {
	healthpb.UnimplementedHealthServer
	from chan string
}

func (p peerAddr) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if pr, ok := peer.FromContext(ctx); ok {
		p.from <- pr.Addr.String()
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// TestDialFrom: a connection dialed with DialFrom leaves from the address
// given (a site's, on a host with one per site), as the server sees it.
func TestDialFrom(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	p := peerAddr{from: make(chan string, 1)}
	healthpb.RegisterHealthServer(gs, p)
	go gs.Serve(lis)
	defer gs.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), DialFrom(net.ParseIP("127.0.0.2")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if from, _, _ := net.SplitHostPort(<-p.from); from != "127.0.0.2" {
		t.Fatalf("the call came from %s, want 127.0.0.2", from)
	}
}
