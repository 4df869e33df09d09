package load

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cellpay/cellpay/internal/dev/testutil/grpctest"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
	"github.com/cellpay/cellpay/pkg/client/failover"
)

// TestAccessPointsRideThroughTheLossOfTheHomeSite: over real gRPC, three
// access points in two sites (listed with the other site's first) in
// front of one ledger, as the platform's share the cells. The run starts
// on the first of the home site; stopping the home site's two a third of
// the way through moves the submits and the follow-ups to the other
// site's without a failed request, and the report counts the answers by
// access point and shows the crossing.
func TestAccessPointsRideThroughTheLossOfTheHomeSite(t *testing.T) {
	ctx := setup(t)
	l := newLedger()
	serve := func() (*grpc.Server, string) {
		s := grpc.NewServer()
		cellpayv1.RegisterPaymentsServer(s, l)
		healthpb.RegisterHealthServer(s, health.NewServer()) // the client probes the first of the home site
		return s, grpctest.ServeOn(t, s)
	}
	a1, a1Addr := serve()
	a2, a2Addr := serve()
	_, b1Addr := serve()

	const count = 300
	cfg := closedConfig(TargetGTR, "", count)
	// An open loop paces the run over about 1.5 s, so that most of it
	// comes after the stop even when a loaded host answers late (at 500/s
	// over 0.6 s, 187 of 300 had been sent when the 100th was answered);
	// room for every request in flight during the move, so that none is
	// dropped.
	cfg.Mode, cfg.Rate, cfg.Concurrency = ModeOpen, 200, 200
	cfg.Duration, cfg.FollowUps = 10*time.Second, 0.3
	cfg.AccessPoints = []client.AccessPoint{{Addr: b1Addr, Site: "site-b"}, {Addr: a1Addr, Site: "site-a"}, {Addr: a2Addr, Site: "site-a"}}
	// A patient partner, as pkg/client's test of the same loss: a
	// call's back-off retries go where the rules say, the stopped access
	// point until a rule has moved the client.
	cfg.Client = client.Config{
		HomeSite: "site-a", MaxAttempts: 50, Backoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		Failover: failover.Config{ProbeInterval: 50 * time.Millisecond, EvalInterval: 50 * time.Millisecond, SplitRatio: 100, MaxSwitches: 20},
	}
	var (
		done, failedOver atomic.Int64
		mu               sync.Mutex
		failed           []Result
		afterStop        = map[string]int{} // answers by access point to the requests sent after the stop
		stoppedAt        time.Time
	)
	cfg.OnResult = func(r Result) {
		if r.FailedOver {
			failedOver.Add(1)
		}
		mu.Lock()
		defer mu.Unlock()
		if r.Err != nil {
			failed = append(failed, r)
		}
		if !stoppedAt.IsZero() && r.Sent.After(stoppedAt) {
			afterStop[r.Endpoint]++
		}
		if done.Add(1) == count/3 {
			// The home site is lost: its servers close their
			// listeners and connections, failing the calls in flight.
			a1.Stop()
			a2.Stop()
			stoppedAt = time.Now()
		}
	}
	var fuFailed atomic.Int64
	cfg.OnFollowUp = func(r FollowUpResult) {
		if r.Err != nil || r.Transaction.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
			fuFailed.Add(1)
		}
	}
	rep, err := Run(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failed) > 0 || len(rep.Errors) > 0 || rep.Sent != count || rep.Completed != count || rep.Dropped != 0 {
		t.Fatalf("sent %d, completed %d, dropped %d, errors %v; first failed %+v", rep.Sent, rep.Completed, rep.Dropped, rep.Errors, failed)
	}
	if rep.Addr != a1Addr {
		t.Errorf("Addr %q, want the first of the home site, %q", rep.Addr, a1Addr)
	}
	eps := rep.Endpoints
	if len(eps) != 3 || eps[a1Addr] == 0 || eps[b1Addr] == 0 || eps[a1Addr]+eps[a2Addr]+eps[b1Addr] != count || rep.FailedOver != failedOver.Load() {
		t.Fatalf("endpoints %v, failed over %d (OnResult saw %d)", eps, rep.FailedOver, failedOver.Load())
	}
	if afterStop[b1Addr] < count/10 || len(afterStop) != 1 {
		t.Fatalf("answers to the requests sent after the stop, by access point: %v; want the other site's only", afterStop)
	}
	if !slices.ContainsFunc(rep.Switches, func(e client.Event) bool {
		return e.FromSite == "site-a" && e.To == b1Addr && e.ToSite == "site-b" && e.Rule != ""
	}) {
		t.Fatalf("no switch to the other site: %+v", rep.Switches)
	}
	if fu := rep.FollowUps; fu.Sent == 0 || fu.Answered != fu.Sent || fu.Calls["VOID"]["APPROVED"] == 0 || fuFailed.Load() != 0 {
		t.Fatalf("follow-ups %+v (%d not APPROVED): want every one answered APPROVED", fu, fuFailed.Load())
	}
	t.Logf("endpoints %v, failed over %d, switches %+v, follow-up switches %d", eps, rep.FailedOver, rep.Switches, len(rep.FollowUps.Switches))
}

// TestAccessPointsRefusedByTheClient: what pkg/client refuses of the
// access points or the home site is a refused configuration, with the
// client's words naming the field; Run fails before any request.
func TestAccessPointsRefusedByTheClient(t *testing.T) {
	ctx := setup(t)
	aps := []client.AccessPoint{{Addr: "127.0.0.1:1", Site: "site-a"}, {Addr: "127.0.0.1:2", Site: "site-b"}}
	tests := []struct {
		name string
		aps  []client.AccessPoint
		home string
		want string
	}{
		{"home site not among the sites", aps, "site-c", `Config.HomeSite "site-c": no access point is in it`},
		{"no home site", aps, "", "Config.HomeSite is empty"},
		{"site of another form", []client.AccessPoint{{Addr: "127.0.0.1:1", Site: "Site A"}}, "Site A", "AccessPoint[0].Site"},
		{"an address twice", []client.AccessPoint{aps[0], {Addr: aps[0].Addr, Site: "site-b"}}, "site-a", "AccessPoint[1].Addr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := closedConfig(TargetGTR, "", 1)
			cfg.AccessPoints, cfg.Client.HomeSite = tt.aps, tt.home
			cfg.OnResult = func(r Result) { t.Errorf("request %s sent", r.Request.GetTransactionId()) }
			_, err := Run(ctx, cfg, nil)
			if !errors.Is(err, ErrInvalidConfig) || !errors.Is(err, client.ErrInvalidAccessPoints) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run: %v, want ErrInvalidConfig and the client's ErrInvalidAccessPoints naming %q", err, tt.want)
			}
		})
	}
}
