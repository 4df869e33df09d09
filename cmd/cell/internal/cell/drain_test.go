package cell

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestDrainStopsHardAtItsBound: a stream that does not end (a health
// Watch, over real gRPC on loopback) holds a graceful stop; drain reports
// what is in flight while it waits, stops hard at its bound or when its
// context ends, and returns. With nothing open it returns at once.
func TestDrainStopsHardAtItsBound(t *testing.T) {
	serve := func(t *testing.T) (*grpc.Server, string) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer()
		healthpb.RegisterHealthServer(gs, health.NewServer())
		go gs.Serve(lis)
		t.Cleanup(gs.Stop) // drain's to stop; this if the test ends first
		return gs, lis.Addr().String()
	}

	// Held open, the stream is cut at drain's bound (nil: the configured
	// one) or when its context ends (which drain returns), whichever is
	// first.
	for _, tc := range []struct {
		name        string
		timeout     time.Duration
		ctx         time.Duration
		want        error
		stillReport bool // drain waited past drainReportEvery
	}{
		{"a stream held open", drainReportEvery + time.Second, time.Minute, nil, true},
		{"a stream held open, the context ends first", time.Minute, 300 * time.Millisecond, context.DeadlineExceeded, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs, addr := serve(t)
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Recv(); err != nil { // the stream is open at the server
				t.Fatal(err)
			}
			var logs testutil.Buffer
			done := make(chan error, 1)
			dctx, dcancel := context.WithTimeout(context.Background(), tc.ctx)
			defer dcancel()
			go func() {
				done <- drain(dctx, gs, func() int64 { return 1 }, tc.timeout, slog.New(slog.NewTextHandler(&logs, nil)))
			}()
			select {
			case err := <-done:
				if !errors.Is(err, tc.want) {
					t.Errorf("drain: %v, want %v", err, tc.want)
				}
			case <-time.After(drainReportEvery + 10*time.Second):
				t.Fatal("drain did not return after its bound")
			}
			want := []string{"cell draining", "stopping hard", "cell stopped"}
			if tc.stillReport {
				want = append(want, "cell still draining")
			}
			for _, want := range want {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("drain's log lacks %q:\n%s", want, logs.String())
				}
			}
			if _, err := w.Recv(); err == nil {
				t.Error("the held stream is still open after the hard stop")
			}
		})
	}

	t.Run("nothing open", func(t *testing.T) {
		gs, _ := serve(t)
		var logs testutil.Buffer
		done := make(chan struct{})
		go func() {
			if err := drain(context.Background(), gs, func() int64 { return 0 }, time.Minute, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
				t.Error(err)
			}
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("drain of an idle server did not return")
		}
		if strings.Contains(logs.String(), "stopping hard") {
			t.Errorf("an idle server was stopped hard:\n%s", logs.String())
		}
	})
}
