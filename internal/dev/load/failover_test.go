package load

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellpay/cellpay/pkg/client/failover"
)

// TestEndpointsFailOver: through two access points, a dead primary costs
// no request: each call that meets it fails over to the backup once, the
// client moves to the backup when more than half of 10 results in 5 s have
// failed (the fast rule), and the report counts answers by access point.
func TestEndpointsFailOver(t *testing.T) {
	ctx := setup(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	backup := servePayments(t, &fakePayments{answer: approveUnlessDeclineCard})
	cfg := closedConfig(TargetGTR, "", 50)
	cfg.Endpoints = []string{dead, backup}
	cfg.Client.Failover = failover.Config{SplitRatio: 100}
	var failedOver atomic.Int64
	cfg.OnResult = func(r Result) {
		if r.FailedOver && r.Endpoint == backup {
			failedOver.Add(1)
		}
	}
	rep, err := Run(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	fast := failover.Config{}.WithDefaults().FastMinResults
	if rep.Completed != 50 || rep.Endpoints[backup] != 50 || rep.Endpoints[dead] != 0 || rep.FailedOver != failedOver.Load() ||
		failedOver.Load() < int64(fast) || failedOver.Load() == 50 || len(rep.Switches) != 1 {
		t.Fatalf("completed %d, endpoints %v, failed over %d (results %d, want %d or a few more), switches %v; errors %v",
			rep.Completed, rep.Endpoints, rep.FailedOver, failedOver.Load(), fast, rep.Switches, rep.Errors)
	}
	if rep.Addr != dead {
		t.Errorf("Addr %q, want the primary", rep.Addr)
	}
}

func TestEndpointsRefused(t *testing.T) {
	ctx := setup(t)
	for _, eps := range [][]string{
		{"127.0.0.1:1", "10.0.0.1:7070"},
		{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"},
	} {
		cfg := closedConfig(TargetGTR, "", 1)
		cfg.Endpoints = eps
		cfg.Duration = time.Second
		if _, err := Run(ctx, cfg, nil); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("endpoints %v: %v, want ErrInvalidConfig", eps, err)
		}
	}
	cfg := closedConfig(TargetCell, "127.0.0.1:1", 1)
	cfg.Endpoints = []string{"127.0.0.1:1", "127.0.0.1:2"}
	if _, err := Run(ctx, cfg, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("endpoints with the cell target: %v", err)
	}
}
