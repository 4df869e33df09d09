package platform

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cellpay/cellpay/internal/hop"
)

// errExited marks a component that exited before it became healthy.
var errExited = errors.New("exited before becoming healthy")

// waitHealthy polls the gRPC health service at addr (the server's overall
// health: empty service name) until it answers SERVING, the process exits
// (exited closes), or ctx ends.
func waitHealthy(ctx context.Context, addr string, creds credentials.TransportCredentials, exited <-chan struct{}) error {
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), hop.Reconnect)
	if err != nil {
		return err
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	var last error
	for {
		last = checkOnce(ctx, client)
		if last == nil {
			return nil
		}
		select {
		case <-exited:
			return errExited
		case <-ctx.Done():
			return fmt.Errorf("%w (last check: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func checkOnce(ctx context.Context, client healthpb.HealthClient) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("status %v", s)
	}
	return nil
}

// CheckHealth asks the gRPC health service at addr once, bounded by ctx,
// and returns nil if it answers SERVING. It dials with opts, plaintext when
// there are none.
func CheckHealth(ctx context.Context, addr string, opts ...grpc.DialOption) error {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return err
	}
	defer conn.Close()
	return checkOnce(ctx, healthpb.NewHealthClient(conn))
}
