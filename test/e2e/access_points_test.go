package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/dev/drill"
	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/client"
	"github.com/cellpay/cellpay/pkg/client/failover"
)

// The access point tests: partners ride through the loss of the primary
// GTR access point by the client's failover to the backup (a second GTR
// replica on the same NATS, table and partners), by the real binaries. The
// intervals are shortened from the guide's minute to a second so that a
// test takes half a minute; the rules are the same.

// shortFailover is the guide's rules with one-second intervals.
var shortFailover = failover.Config{ProbeInterval: time.Second, EvalInterval: time.Second, WindowAge: 10 * time.Second}

// probeTimeout and callTimeout bound one probe and one call of the
// tests' clients: a frozen access point costs a call this long before its
// retry on the other. A call is given 2 s: make test runs this shard beside
// two other platforms on two cores, where a healthy access point's p99 was
// 1.1 s and more; at 1 s, TestAccessPointFreeze's client counted a loaded
// but healthy backup's slow answers as failures before the cut and went
// back and forth between the two until its calls ran out of time
// (2026-12-06, one run in six).
const (
	probeTimeout = 200 * time.Millisecond
	callTimeout  = 2 * time.Second
)

// loadSeq numbers the access point loads of this process.
var loadSeq atomic.Int64

// accessPointLoad is open-loop load through both access points.
func accessPointLoad(name string, fo failover.Config, rate float64) load.Config {
	return load.Config{
		Target: load.TargetGTR, Endpoints: []string{env.gtrAddr, env.backupAddr}, DialOptions: env.gtrOpts,
		Mode: load.ModeOpen, Rate: rate, Concurrency: 256, Seed: uint64(time.Now().UnixNano()),
		// A run ID of its own per load (go test -count=N runs a test
		// again in the same process: the same IDs with other payloads
		// would be ALREADY_EXISTS).
		RunID:             fmt.Sprintf("%s-%s-%d", runID, name, loadSeq.Add(1)),
		PerRequestTimeout: 12 * time.Second,
		// Enough attempts to outlast a transaction caught by the cut in the
		// middle of its point-of-no-return handshake: its cell holds it until
		// it stops waiting for the frozen GTR's Proceed (10 s), and the
		// partner's retries (same ID, safe) must still be going then.
		Client: client.Config{Failover: fo, ProbeTimeout: probeTimeout, CallTimeout: callTimeout, MaxAttempts: 30},
	}
}

// primaryTarget cuts the primary access point: kill -9 and restart, or
// SIGSTOP and SIGCONT.
func primaryTarget(t *testing.T, freeze bool) drill.Target {
	gtr := env.p.Process(platform.GTR)
	tgt := drill.Target{Name: "primary access point (kill -9)", Endpoint: env.gtrAddr}
	tgt.Cut = func(context.Context) error { return gtr.Kill() }
	tgt.Restore = gtr.Restart
	if freeze {
		tgt.Name = "primary access point (SIGSTOP)"
		tgt.Cut = func(context.Context) error {
			if err := gtr.Signal(syscall.SIGSTOP); err != nil {
				return err
			}
			if !testutil.Within(10*time.Second, func() bool { return testutil.Stopped(gtr.Pid()) }) {
				t.Error("the primary GTR did not stop")
			}
			return nil
		}
		tgt.Restore = func(ctx context.Context) error {
			if err := gtr.Signal(syscall.SIGCONT); err != nil {
				return err
			}
			testutil.Eventually(t, 15*time.Second, "the primary GTR serving after SIGCONT", func() bool { return gtr.CheckHealth(ctx) == nil })
			return nil
		}
	}
	t.Cleanup(func() { thaw(t, gtr) })
	return tgt
}

// thaw leaves the primary running and healthy for the tests after.
func thaw(t *testing.T, gtr *platform.Proc) {
	_ = gtr.Signal(syscall.SIGCONT)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !gtr.Running() {
		if err := gtr.Restart(ctx); err != nil {
			t.Errorf("restarting the primary GTR: %v", err)
		}
	}
}

// rideThrough runs the drill of one cut of the primary and checks what
// the issue asks: no error for the partner, the switch within one probe
// interval (and its round), the switch back once the primary is back, and
// the checker finding nothing.
func rideThrough(t *testing.T, name string, freeze bool) {
	ctx := ctxFor(t, 3*time.Minute)
	ccfg := checkerConfig()
	var log strings.Builder
	rep, err := drill.Run(ctx, drill.Config{
		Load:    accessPointLoad(name, shortFailover, 50),
		Targets: []drill.Target{primaryTarget(t, freeze)},
		Warmup:  3 * time.Second, Hold: 12 * time.Second, Settle: 8 * time.Second,
		Checker: &ccfg,
		Log:     &log,
	})
	if err != nil {
		t.Fatalf("drill: %v\n%s", err, log.String())
	}
	var out strings.Builder
	rep.Print(&out)
	t.Logf("%s\n%s", log.String(), out.String())
	s := rep.Steps[0]
	if !rep.OK() {
		t.Errorf("the partner saw errors %v, %d FAILED, or the checker found something", rep.Errors, rep.Failed)
		shown := 0
		for _, r := range rep.Results {
			if r.Err != nil && shown < 5 {
				shown++
				msg := status.Convert(r.Err).Message()
				t.Logf("error %s for %s/%s from %s, sent %s after the cut, after %v: %v%s", status.Code(r.Err), r.PartnerID, r.Request.GetTransactionId(),
					r.Endpoint, r.Sent.Sub(s.CutAt).Round(time.Millisecond), r.Latency.Round(time.Millisecond), msg, logsFor(msg))
			}
		}
	}
	round := shortFailover.ProbeInterval + failover.DefaultProbeCount*probeTimeout
	if s.SwitchAwayAfter < 0 || s.SwitchAwayAfter > (round+500*time.Millisecond).Seconds() {
		t.Errorf("switched to the backup %.2fs after the cut, want within one probe interval and its round (%v)", s.SwitchAwayAfter, round)
	}
	// The switch back is timed from when the primary serves again: the
	// restore (a restart, after kill -9) takes what the host gives it, 4.5 s
	// beside two other platforms, before any probe can succeed.
	if back := s.SwitchBackAfter - s.RestoreTook; s.SwitchBackAfter < 0 || back > (round+3*time.Second).Seconds() {
		t.Errorf("switched back %.2fs after the primary served again, want within %v", back, round+3*time.Second)
	}
	// Once switched back, the primary serves (all but the split's 1%), until
	// the client leaves it again, if it does: under a loaded host a
	// restarted primary may fail a probe round and be left once more,
	// which the damping bounds (TestAccessPointFlapping), not this check.
	back := s.RestoredAt.Add(time.Duration(s.SwitchBackAfter*float64(time.Second)) + 500*time.Millisecond)
	until := time.Now()
	for _, e := range s.SwitchesDuringStep {
		if e.From == env.gtrAddr && e.At.After(back) && e.At.Before(until) {
			until = e.At
		}
	}
	onPrimary, after := 0, 0
	for _, r := range rep.Results {
		if r.Sent.After(back) && r.Sent.Before(until) && r.Err == nil {
			after++
			if r.Endpoint == env.gtrAddr {
				onPrimary++
			}
		}
	}
	if after == 0 || onPrimary*100 < after*95 {
		t.Errorf("after the switch back the primary served %d of %d calls", onPrimary, after)
	}
	t.Logf("%s: switch away %.2fs after the cut, first call on the backup %.3fs after it, back %.2fs after the restore; %d calls failed over; errors %v; after the switch back the primary served %d of %d",
		name, s.SwitchAwayAfter, s.FirstOtherAfter, s.SwitchBackAfter, s.FailedOverDuring, rep.Errors, onPrimary, after)
}

func TestAccessPointKill(t *testing.T) { rideThrough(t, "ap-kill", false) }

func TestAccessPointFreeze(t *testing.T) { rideThrough(t, "ap-stop", true) }

// TestAccessPointSplit: while the primary serves, about 1% of the calls
// keep the backup proven, end to end through the real client and both
// access points. The machine's split is exact in its unit test
// (failover.TestSplit: 1 of rolls 0..99); here the rolls are random, so
// the count on the backup is binomial: of 3,000 calls, 30 expected, and
// 12 to 54 hold with probability 0.9998 (10,000 calls held the share to
// 0.5-1.5% but cost the suite a minute of both cores).
func TestAccessPointSplit(t *testing.T) {
	const calls, lo, hi = 3_000, 12, 54
	ctx := ctxFor(t, 4*time.Minute)
	cfg := accessPointLoad("ap-split", failover.Config{}, 0)
	cfg.Mode, cfg.Concurrency, cfg.Count, cfg.Duration = load.ModeClosed, 16, calls, 3*time.Minute
	rep, err := load.Run(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	backup, total := rep.Endpoints[env.backupAddr], rep.Endpoints[env.gtrAddr]+rep.Endpoints[env.backupAddr]
	share := float64(backup) / float64(total) * 100
	t.Logf("split: %d of %d calls on the backup (%.2f%%), errors %v, switches %d, %.0f calls/s", backup, total, share, rep.Errors, len(rep.Switches), rep.Throughput)
	if total != calls || len(rep.Errors) != 0 {
		t.Fatalf("completed %d of %d, errors %v", total, calls, rep.Errors)
	}
	if backup < lo || backup > hi {
		t.Fatalf("%d calls on the backup (%.2f%%), want %d to %d of %d (1%%)", backup, share, lo, hi, calls)
	}
}

// TestAccessPointFlapping: a primary up 2 s, down 2 s (frozen) moves the
// client no more than the damping allows, and it ends on the backup.
func TestAccessPointFlapping(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	gtr := env.p.Process(platform.GTR)
	t.Cleanup(func() { thaw(t, gtr) })
	fo := failover.Config{Strategy: failover.Probe, ProbeInterval: 500 * time.Millisecond, MaxSwitches: 4, DampWindow: time.Minute}
	cfg := accessPointLoad("ap-flap", fo, 20)
	flapFor := 20 * time.Second
	cfg.Duration, cfg.Count = flapFor+2*time.Second, int64(20*(flapFor+2*time.Second).Seconds())
	done := make(chan struct{})
	var rep load.Report
	var runErr error
	go func() { defer close(done); rep, runErr = load.Run(ctx, cfg, nil) }()
	time.Sleep(time.Second)
	flaps := 0
	for end := time.Now().Add(flapFor); time.Now().Before(end); flaps++ {
		if err := gtr.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if err := gtr.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
	}
	<-done
	if runErr != nil {
		t.Fatal(runErr)
	}
	for _, e := range rep.Switches {
		t.Logf("switch %s %s -> %s (%s)", e.At.Format("15:04:05.000"), e.From, e.To, e.Reason)
	}
	t.Logf("flapping: %d down/up cycles, %d switches (at most %d in %v), errors %v, failed over %d, endpoints %v",
		flaps, len(rep.Switches), fo.MaxSwitches, fo.DampWindow, rep.Errors, rep.FailedOver, rep.Endpoints)
	if len(rep.Switches) > fo.MaxSwitches {
		t.Fatalf("%d switches, damping allows %d", len(rep.Switches), fo.MaxSwitches)
	}
	if len(rep.Switches) == 0 || rep.Switches[len(rep.Switches)-1].To != env.backupAddr {
		t.Fatalf("the damped client should rest on the backup; switches %v", rep.Switches)
	}
	if len(rep.Errors) != 0 {
		t.Fatalf("the partner saw errors %v", rep.Errors)
	}
}
