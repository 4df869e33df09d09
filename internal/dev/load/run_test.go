package load

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
)

func closedConfig(target, addr string, count int64) Config {
	return Config{
		Target:      target,
		Addr:        addr,
		Mode:        ModeClosed,
		Concurrency: 8,
		Count:       count,
		Duration:    15 * time.Second,
		Seed:        7,
		RunID:       "test",
	}
}

func TestClosedLoopCompletesCount(t *testing.T) {
	ctx := setup(t)
	const count = 500
	for _, target := range []string{TargetGTR, TargetCell} {
		t.Run(target, func(t *testing.T) {
			var addr string
			var seenIDs *seen
			if target == TargetGTR {
				f := &fakePayments{answer: approveUnlessDeclineCard}
				addr, seenIDs = servePayments(t, f), &f.seen
			} else {
				f := &fakeCell{script: func(req *cellpayv1.SubmitTransactionRequest) (bool, *cellproto.ProcessEvent, error) {
					st, _ := approveUnlessDeclineCard(req)
					return true, resultEvent(req, st), nil
				}}
				addr, seenIDs = serveCell(t, f), &f.seen
			}
			var lastDone, lastTotal int64
			rep, err := Run(ctx, closedConfig(target, addr, count), func(done, total int64) {
				lastDone, lastTotal = done, total
			})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if rep.Sent != count || rep.Completed != count || rep.StopReason != StopCount {
				t.Errorf("sent %d completed %d stop %q, want %d %d %q", rep.Sent, rep.Completed, rep.StopReason, count, count, StopCount)
			}
			if len(rep.Errors) != 0 || rep.Dropped != 0 || rep.ProtocolErrors != 0 {
				t.Errorf("errors %v dropped %d protocol %d, want none", rep.Errors, rep.Dropped, rep.ProtocolErrors)
			}
			if got := rep.Statuses["APPROVED"]; got != count {
				t.Errorf("APPROVED = %d, want %d", got, count)
			}
			if target == TargetCell && rep.PointOfNoReturn != count {
				t.Errorf("PNR events = %d, want %d", rep.PointOfNoReturn, count)
			}
			ids := seenIDs.snapshot()
			if len(ids) != count {
				t.Errorf("server saw %d distinct IDs, want %d", len(ids), count)
			}
			for id, n := range ids {
				if n != 1 {
					t.Errorf("ID %s sent %d times", id, n)
				}
			}
			if lastDone != count || lastTotal != count {
				t.Errorf("last progress (%d, %d), want (%d, %d)", lastDone, lastTotal, count, count)
			}
			if rep.Latency.Max <= 0 || rep.Latency.P50 > rep.Latency.P99 || rep.Throughput <= 0 {
				t.Errorf("implausible latency/throughput: %+v %v", rep.Latency, rep.Throughput)
			}
		})
	}
}

func TestOpenLoopRateAndDuration(t *testing.T) {
	ctx := setup(t)
	addr := servePayments(t, &fakePayments{answer: approveUnlessDeclineCard})
	cfg := Config{
		Target: TargetGTR, Addr: addr, Mode: ModeOpen,
		Rate: 200, Concurrency: 100, Count: 100_000, Duration: time.Second,
	}
	rep, err := Run(ctx, cfg, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if slots := rep.Sent + rep.Dropped; slots < 150 || slots > 250 {
		t.Errorf("issued %d requests (sent %d, dropped %d) at 200/s for 1s, want 150..250", slots, rep.Sent, rep.Dropped)
	}
	if rep.StopReason != StopDuration {
		t.Errorf("stop reason %q, want %q", rep.StopReason, StopDuration)
	}
	if rep.ElapsedSeconds > 3 {
		t.Errorf("elapsed %.2fs, want about 1s", rep.ElapsedSeconds)
	}
	if rep.Completed != rep.Sent {
		t.Errorf("completed %d of %d sent", rep.Completed, rep.Sent)
	}
}

func TestOpenLoopStopsAtCount(t *testing.T) {
	ctx := setup(t)
	addr := servePayments(t, &fakePayments{answer: approveUnlessDeclineCard})
	cfg := Config{
		Target: TargetGTR, Addr: addr, Mode: ModeOpen,
		Rate: 500, Concurrency: 50, Count: 50, Duration: 10 * time.Second,
	}
	rep, err := Run(ctx, cfg, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.Sent+rep.Dropped != 50 || rep.StopReason != StopCount {
		t.Errorf("sent %d dropped %d stop %q, want 50 slots and %q", rep.Sent, rep.Dropped, rep.StopReason, StopCount)
	}
	if rep.ElapsedSeconds > 5 {
		t.Errorf("elapsed %.2fs, want about 0.1s", rep.ElapsedSeconds)
	}
}

func TestOpenLoopDropsInsteadOfBlocking(t *testing.T) {
	ctx := setup(t)
	addr := servePayments(t, &fakePayments{answer: approveUnlessDeclineCard, delay: 300 * time.Millisecond})
	cfg := Config{
		Target: TargetGTR, Addr: addr, Mode: ModeOpen,
		Rate: 100, Concurrency: 2, Count: 1000, Duration: 500 * time.Millisecond,
	}
	rep, err := Run(ctx, cfg, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	// About 50 slots in 0.5s; with 2 outstanding of 300ms each, at most 4
	// can be sent.
	if rep.Sent > 4 || rep.Dropped < 30 {
		t.Errorf("sent %d dropped %d, want <= 4 sent and most dropped", rep.Sent, rep.Dropped)
	}
	if rep.Completed != rep.Sent {
		t.Errorf("completed %d of %d sent", rep.Completed, rep.Sent)
	}
	// Measured from the scheduled time, so never below the server's delay.
	if rep.Latency.P50 < 300 {
		t.Errorf("p50 %.1fms, want >= 300ms", rep.Latency.P50)
	}
}

func TestStatusAndErrorCounting(t *testing.T) {
	ctx := setup(t)
	// The answer depends on the sequence number only, so the expected
	// counts follow from the count.
	answer := func(req *cellpayv1.SubmitTransactionRequest) (cellpayv1.TransactionStatus, error) {
		seq := seqOf(t, req.GetTransactionId())
		switch {
		case seq%5 == 0:
			return 0, status.Error(codes.Unavailable, "fake: no cell")
		case seq%7 == 0:
			return 0, status.Error(codes.InvalidArgument, "fake: bad")
		}
		return cellpayv1.TransactionStatus(1 + seq%4), nil
	}
	addr := servePayments(t, &fakePayments{answer: answer})
	const count = 200
	want := map[string]int64{}
	wantErrs := map[string]int64{}
	for seq := int64(1); seq <= count; seq++ {
		switch {
		case seq%5 == 0:
			wantErrs["UNAVAILABLE"]++
		case seq%7 == 0:
			wantErrs["INVALID_ARGUMENT"]++
		default:
			want[cellpayv1.TransactionStatus(1+seq%4).String()]++
		}
	}
	rep, err := Run(ctx, closedConfig(TargetGTR, addr, count), nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, s := range []string{"APPROVED", "DECLINED", "PENDING", "FAILED"} {
		if rep.Statuses[s] != want[s] {
			t.Errorf("%s = %d, want %d", s, rep.Statuses[s], want[s])
		}
	}
	if len(rep.Statuses) != 4 {
		t.Errorf("statuses %v, want exactly the four", rep.Statuses)
	}
	for code, n := range wantErrs {
		if rep.Errors[code] != n {
			t.Errorf("errors[%s] = %d, want %d (all: %v)", code, rep.Errors[code], n, rep.Errors)
		}
	}
	if len(rep.Errors) != len(wantErrs) {
		t.Errorf("errors %v, want %v", rep.Errors, wantErrs)
	}
	if rep.Sent != count || rep.Completed != count-wantErrs["UNAVAILABLE"]-wantErrs["INVALID_ARGUMENT"] {
		t.Errorf("sent %d completed %d", rep.Sent, rep.Completed)
	}
}

func TestCellStreamOutcomes(t *testing.T) {
	ctx := setup(t)
	script := func(req *cellpayv1.SubmitTransactionRequest) (bool, *cellproto.ProcessEvent, error) {
		switch seqOf(t, req.GetTransactionId()) % 4 {
		case 0: // stopped before the PNR
			return false, &cellproto.ProcessEvent{Event: &cellproto.ProcessEvent_Reroutable{
				Reroutable: &cellproto.Reroutable{Reason: "draining"},
			}}, nil
		case 1: // a broken cell: PNR, then nothing
			return true, nil, nil
		case 2:
			return false, nil, status.Error(codes.AlreadyExists, "fake: other payload")
		}
		return true, resultEvent(req, cellpayv1.TransactionStatus_PENDING), nil
	}
	addr := serveCell(t, &fakeCell{script: script})
	rep, err := Run(ctx, closedConfig(TargetCell, addr, 100), nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.Reroutable != 25 || rep.ProtocolErrors != 25 || rep.Errors["ALREADY_EXISTS"] != 25 || rep.Statuses["PENDING"] != 25 {
		t.Errorf("reroutable %d protocol %d errors %v statuses %v, want 25 of each", rep.Reroutable, rep.ProtocolErrors, rep.Errors, rep.Statuses)
	}
	if rep.PointOfNoReturn != 50 || rep.Completed != 50 {
		t.Errorf("PNR %d completed %d, want 50 and 50", rep.PointOfNoReturn, rep.Completed)
	}
}

func TestInterruptStopsAndWaitsForInFlight(t *testing.T) {
	ctx := setup(t)
	addr := servePayments(t, &fakePayments{answer: approveUnlessDeclineCard, delay: 20 * time.Millisecond})
	runCtx, cancel := context.WithCancel(ctx)
	time.AfterFunc(300*time.Millisecond, cancel)
	defer cancel()
	cfg := closedConfig(TargetGTR, addr, 1_000_000)
	rep, err := Run(runCtx, cfg, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.StopReason != StopInterrupted {
		t.Errorf("stop reason %q, want %q", rep.StopReason, StopInterrupted)
	}
	if rep.Completed == 0 || rep.Completed != rep.Sent || len(rep.Errors) != 0 {
		t.Errorf("sent %d completed %d errors %v: in-flight requests should finish", rep.Sent, rep.Completed, rep.Errors)
	}
}

func TestClosedLoopStopsAtDuration(t *testing.T) {
	ctx := setup(t)
	addr := servePayments(t, &fakePayments{answer: approveUnlessDeclineCard, delay: 10 * time.Millisecond})
	cfg := closedConfig(TargetGTR, addr, 1_000_000)
	cfg.Duration = 300 * time.Millisecond
	rep, err := Run(ctx, cfg, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.StopReason != StopDuration || rep.Completed == 0 || rep.ElapsedSeconds > 3 {
		t.Errorf("stop %q completed %d elapsed %.2f, want duration, some, about 0.3s", rep.StopReason, rep.Completed, rep.ElapsedSeconds)
	}
}

func TestUnreachableTargetCountsErrors(t *testing.T) {
	ctx := setup(t)
	// A port nobody listens on: every request fails, none completes.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := lis.Addr().String()
	lis.Close()
	cfg := closedConfig(TargetGTR, addr, 20)
	cfg.PerRequestTimeout = 2 * time.Second
	rep, err := Run(ctx, cfg, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.Completed != 0 || rep.Errors["UNAVAILABLE"] != 20 {
		t.Errorf("completed %d errors %v, want 0 and 20 UNAVAILABLE", rep.Completed, rep.Errors)
	}
}

func TestRunRefusesConfig(t *testing.T) {
	ctx := setup(t)
	_, err := Run(ctx, Config{Target: TargetGTR, Addr: "10.0.0.1:7070", Mode: ModeClosed, Concurrency: 1, Count: 1, Duration: time.Second}, nil)
	if !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Run with a non-loopback address: %v, want ErrInvalidConfig", err)
	}
}

// TestOnResult: every finished request is reported once, with its answer.
func TestOnResultReportsEveryRequest(t *testing.T) {
	ctx := setup(t)
	addr := servePayments(t, &fakePayments{answer: approveUnlessDeclineCard})
	var mu sync.Mutex
	seen := map[string]bool{}
	cfg := closedConfig(TargetGTR, addr, 50)
	cfg.OnResult = func(r Result) {
		mu.Lock()
		defer mu.Unlock()
		if r.Err == nil && r.Transaction.GetTransactionId() != r.Request.GetTransactionId() {
			t.Errorf("answer for %s carries %s", r.Request.GetTransactionId(), r.Transaction.GetTransactionId())
		}
		if r.PartnerID == "" || r.PartnerID != r.Request.GetPartnerId() {
			t.Errorf("result for %s names partner %q, its request %q", r.Request.GetTransactionId(), r.PartnerID, r.Request.GetPartnerId())
		}
		seen[r.Request.GetTransactionId()] = true
	}
	if _, err := Run(ctx, cfg, nil); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 50 {
		t.Fatalf("OnResult saw %d distinct requests, want 50", len(seen))
	}
}

// TestClosedLoopWaitsForTheRetryHint: a closed-loop worker refused with a
// retry hint waits it before its next request, instead of spinning on
// refusals that are answered at once.
func TestClosedLoopWaitsForTheRetryHint(t *testing.T) {
	ctx := setup(t)
	shed, err := status.New(codes.ResourceExhausted, "shed").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(200 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakePayments{answer: func(*cellpayv1.SubmitTransactionRequest) (cellpayv1.TransactionStatus, error) {
		return 0, shed.Err()
	}}
	cfg := closedConfig(TargetGTR, servePayments(t, f), 100_000)
	cfg.Concurrency, cfg.Duration = 2, time.Second
	rep, err := Run(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Two workers, one request each per 200 ms for a second: about 12.
	if rep.Sent > 20 || rep.Errors["RESOURCE_EXHAUSTED"] != rep.Sent {
		t.Fatalf("sent %d, errors %v: want at most 20, every one refused", rep.Sent, rep.Errors)
	}
}
