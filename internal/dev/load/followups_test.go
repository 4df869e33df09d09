package load

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/internal/dev/testutil/grpctest"
	"github.com/cellpay/cellpay/internal/followup"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client/failover"
)

// ledger is a Payments server that approves every submit and holds the
// follow-ups to the rule book (internal/followup): a rule broken is
// FAILED_PRECONDITION, as the platform answers it. A follow-up ID sent
// again gets its first answer. It records every follow-up it is sent.
type ledger struct {
	cellpayv1.UnimplementedPaymentsServer
	// answer, if set, answers a follow-up in the rule book's stead when
	// its last result is true.
	answer func(kind cellpayv1.PaymentType, id string) (*cellpayv1.Transaction, error, bool)
	// delay is how long a follow-up waits before its answer.
	delay time.Duration

	mu    sync.Mutex
	auths map[string]*followup.Ledger                    // by partner/ID
	done  map[string]*cellpayv1.Transaction              // follow-ups' answers, by partner/ID
	got   []received                                     // every follow-up call, in order
	reqs  map[string][]proto.Message                     // every follow-up request, by partner/ID
	subs  map[string]*cellpayv1.SubmitTransactionRequest // approved submits, by partner/ID
}

// received is one follow-up call.
type received struct {
	kind                  cellpayv1.PaymentType
	partner, id, original string
	amount                int64
	at                    time.Time
}

func newLedger() *ledger {
	return &ledger{auths: map[string]*followup.Ledger{}, done: map[string]*cellpayv1.Transaction{},
		reqs: map[string][]proto.Message{}, subs: map[string]*cellpayv1.SubmitTransactionRequest{}}
}

func serveLedger(t *testing.T, p cellpayv1.PaymentsServer) string {
	return grpctest.Serve(t, func(s *grpc.Server) { cellpayv1.RegisterPaymentsServer(s, p) })
}

func (l *ledger) SubmitTransaction(_ context.Context, req *cellpayv1.SubmitTransactionRequest) (*cellpayv1.Transaction, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := req.GetPartnerId() + "/" + req.GetTransactionId()
	l.auths[k] = &followup.Ledger{Authorized: req.GetAmount().GetMinorUnits()}
	l.subs[k] = req
	return &cellpayv1.Transaction{TransactionId: req.GetTransactionId(), Status: cellpayv1.TransactionStatus_APPROVED}, nil
}

func (l *ledger) CaptureTransaction(ctx context.Context, req *cellpayv1.CaptureTransactionRequest) (*cellpayv1.Transaction, error) {
	return l.followUp(ctx, cellpayv1.PaymentType_CAPTURE, req, req.GetAmount())
}

func (l *ledger) RefundTransaction(ctx context.Context, req *cellpayv1.RefundTransactionRequest) (*cellpayv1.Transaction, error) {
	return l.followUp(ctx, cellpayv1.PaymentType_REFUND, req, req.GetAmount())
}

func (l *ledger) VoidTransaction(ctx context.Context, req *cellpayv1.VoidTransactionRequest) (*cellpayv1.Transaction, error) {
	return l.followUp(ctx, cellpayv1.PaymentType_VOID, req, nil)
}

// followUpRequest is what the three follow-up requests share.
type followUpRequest interface {
	proto.Message
	GetTransactionId() string
	GetPartnerId() string
	GetOriginalTransactionId() string
	GetMarket() string
}

func (l *ledger) followUp(ctx context.Context, kind cellpayv1.PaymentType, req followUpRequest, amount *cellpayv1.Money) (*cellpayv1.Transaction, error) {
	arrived := time.Now()
	if err := sleep(ctx, l.delay); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k := req.GetPartnerId() + "/" + req.GetTransactionId()
	l.got = append(l.got, received{kind: kind, partner: req.GetPartnerId(), id: req.GetTransactionId(), original: req.GetOriginalTransactionId(),
		amount: amount.GetMinorUnits(), at: arrived})
	l.reqs[k] = append(l.reqs[k], proto.Clone(req))
	if l.answer != nil {
		if txn, err, ok := l.answer(kind, req.GetTransactionId()); ok {
			return txn, err
		}
	}
	if txn, ok := l.done[k]; ok {
		return txn, nil
	}
	auth := l.auths[req.GetPartnerId()+"/"+req.GetOriginalTransactionId()]
	orig := l.subs[req.GetPartnerId()+"/"+req.GetOriginalTransactionId()]
	switch {
	case auth == nil:
		return nil, status.Error(codes.NotFound, "original_transaction_id: no such authorization")
	case req.GetMarket() != orig.GetMarket() || amount != nil && amount.GetCurrency() != orig.GetAmount().GetCurrency():
		return nil, status.Error(codes.FailedPrecondition, "market or currency is not the original's")
	}
	held := amount.GetMinorUnits()
	if kind == cellpayv1.PaymentType_VOID {
		held = auth.Authorized
	}
	if err := auth.Hold(kind, held); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	auth.Settle(kind, held, true)
	txn := &cellpayv1.Transaction{TransactionId: req.GetTransactionId(), OriginalTransactionId: req.GetOriginalTransactionId(), Status: cellpayv1.TransactionStatus_APPROVED}
	l.done[k] = txn
	return txn, nil
}

// calls returns the follow-up calls so far.
func (l *ledger) calls() []received {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]received(nil), l.got...)
}

// followUpResults gathers OnFollowUp's results.
type followUpResults struct {
	mu  sync.Mutex
	all []FollowUpResult
}

func (r *followUpResults) add(res FollowUpResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, res)
}

// TestFollowUps: FollowUps follows a share of the approved authorizations
// by their lives, each follow-up its own ID within the ledger's limits;
// the report counts them by kind and outcome, and OnFollowUp has every
// answer before Run returns. The same seed chooses the same lives under
// another run ID; without FollowUps there is no follow-up and no report.
func TestFollowUps(t *testing.T) {
	ctx := setup(t)
	plans := make([]map[string]received, 2) // by follow-up ID's tail after the run ID
	for i, runID := range []string{"fu-one", "fu-two"} {
		l := newLedger()
		cfg := closedConfig(TargetGTR, serveLedger(t, l), 300)
		cfg.Concurrency, cfg.Seed, cfg.RunID, cfg.FollowUps = 4, 9, runID, 0.5
		var results followUpResults
		cfg.OnFollowUp = results.add
		rep, err := Run(ctx, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		fu := rep.FollowUps
		calls := l.calls()
		t.Logf("%s: %+v", runID, fu)
		if fu == nil || fu.Share != 0.5 || fu.Lives[LifeCaptureRefund] == 0 || fu.Lives[LifeVoid] == 0 || fu.Dropped != 0 || fu.Unsent != 0 {
			t.Fatalf("follow-ups %+v", fu)
		}
		if fu.Sent != int64(len(calls)) || fu.Answered != fu.Sent || len(results.all) != len(calls) {
			t.Fatalf("report says %d sent, %d answered; OnFollowUp had %d; the server got %d", fu.Sent, fu.Answered, len(results.all), len(calls))
		}
		for _, kind := range FollowUpKinds {
			byOutcome := fu.Calls[kind.String()]
			if byOutcome["APPROVED"] == 0 || len(byOutcome) != 4 {
				t.Fatalf("%v: %v, want every one APPROVED, and each status counted", kind, byOutcome)
			}
		}
		if want := fu.Lives[LifeVoid]; fu.Calls["VOID"]["APPROVED"] != want {
			t.Fatalf("%d voids for %d void lives", fu.Calls["VOID"]["APPROVED"], want)
		}
		byID := map[string]received{}
		plans[i] = map[string]received{}
		for _, c := range calls {
			if !strings.HasPrefix(c.id, c.original+"-") || !strings.HasPrefix(c.original, runID+"-") {
				t.Fatalf("follow-up %s of %s", c.id, c.original)
			}
			byID[c.partner+"/"+c.id] = c
			c.at, c.partner = time.Time{}, ""
			tail := strings.TrimPrefix(c.id, runID)
			c.id, c.original = tail, strings.TrimPrefix(c.original, runID)
			plans[i][tail] = c
		}
		for _, r := range results.all {
			c, ok := byID[r.PartnerID+"/"+r.ID]
			if !ok || r.Err != nil || r.Transaction.GetStatus() != cellpayv1.TransactionStatus_APPROVED || r.Kind != c.kind ||
				r.Original != c.original || r.Amount != c.amount || r.Latency <= 0 {
				t.Fatalf("OnFollowUp %+v; the server got %+v", r, c)
			}
		}
	}
	if len(plans[0]) != len(plans[1]) {
		t.Fatalf("seed 9 planned %d follow-ups, then %d", len(plans[0]), len(plans[1]))
	}
	for id, c := range plans[0] {
		if plans[1][id] != c {
			t.Fatalf("seed 9: %s was %+v, then %+v", id, c, plans[1][id])
		}
	}

	l := newLedger()
	cfg := closedConfig(TargetGTR, serveLedger(t, l), 50)
	cfg.OnFollowUp = func(r FollowUpResult) { t.Errorf("follow-up %s without FollowUps", r.ID) }
	rep, err := Run(ctx, cfg, nil)
	if err != nil || rep.FollowUps != nil || len(l.calls()) != 0 {
		t.Fatalf("without FollowUps: %v, report %+v, %d follow-ups sent", err, rep.FollowUps, len(l.calls()))
	}
}

// TestFollowUpsStopAtRefusal: a life ends at its first step not
// APPROVED; its other steps are never sent, and counted unsent.
func TestFollowUpsStopAtRefusal(t *testing.T) {
	ctx := setup(t)
	l := newLedger()
	l.answer = func(kind cellpayv1.PaymentType, id string) (*cellpayv1.Transaction, error, bool) {
		switch {
		case kind == cellpayv1.PaymentType_CAPTURE:
			return &cellpayv1.Transaction{TransactionId: id, Status: cellpayv1.TransactionStatus_DECLINED}, nil, true
		case kind == cellpayv1.PaymentType_VOID:
			return nil, status.Error(codes.FailedPrecondition, "refused"), true
		}
		return nil, nil, false
	}
	cfg := closedConfig(TargetGTR, serveLedger(t, l), 200)
	cfg.Concurrency, cfg.FollowUps = 4, 1
	rep, err := Run(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	fu := rep.FollowUps
	lives := fu.Lives[LifeCaptureRefund] + fu.Lives[LifeVoid]
	if fu.Calls["CAPTURE"]["DECLINED"] != fu.Lives[LifeCaptureRefund] || fu.Calls["VOID"]["FAILED_PRECONDITION"] != fu.Lives[LifeVoid] ||
		fu.Calls["REFUND"]["APPROVED"] != 0 || fu.Sent != lives || fu.Answered != fu.Lives[LifeCaptureRefund] || fu.Unsent == 0 {
		t.Fatalf("follow-ups %+v", fu)
	}
	for _, c := range l.calls() {
		if !strings.HasSuffix(c.id, "-c1") && !strings.HasSuffix(c.id, "-v") {
			t.Fatalf("%v %s sent after its life's first step was refused", c.kind, c.id)
		}
	}
}

// TestFollowUpsTimeBound: no follow-up is sent after the run's Duration,
// and Run returns within Duration and one PerRequestTimeout however many
// lives wait.
func TestFollowUpsTimeBound(t *testing.T) {
	ctx := setup(t)
	l := newLedger()
	l.delay = 300 * time.Millisecond
	const d, timeout = time.Second, 2 * time.Second
	cfg := Config{Target: TargetGTR, Addr: serveLedger(t, l), Mode: ModeOpen, Rate: 200, Count: 400, Concurrency: 2, Duration: d,
		PerRequestTimeout: timeout, RunID: "fu-time", FollowUps: 1}
	start := time.Now()
	rep, err := Run(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	fu := rep.FollowUps
	if fu.Sent == 0 || fu.Unsent == 0 {
		t.Fatalf("follow-ups %+v: want some sent and, with 2 workers at 300 ms a call for 1 s, many unsent", fu)
	}
	if took > d+timeout+3*time.Second {
		t.Fatalf("the run took %v with Duration %v and PerRequestTimeout %v", took, d, timeout)
	}
	for _, c := range l.calls() {
		if c.at.After(start.Add(d + 500*time.Millisecond)) {
			t.Fatalf("%s sent %v after the start, past Duration %v", c.id, c.at.Sub(start), d)
		}
	}
}

// TestFollowUpsInterrupted: the end of ctx ends the lives too; Run
// still returns the report, the lives' steps not sent counted unsent.
func TestFollowUpsInterrupted(t *testing.T) {
	ctx := setup(t)
	l := newLedger()
	l.delay = 200 * time.Millisecond
	// More submits than 700 ms can send: the run is interrupted.
	cfg := closedConfig(TargetGTR, serveLedger(t, l), 1_000_000)
	cfg.Concurrency, cfg.FollowUps, cfg.Duration = 2, 1, 10*time.Second
	runCtx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	rep, err := Run(runCtx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); rep.StopReason != StopInterrupted || took > 4*time.Second {
		t.Fatalf("stop %q after %v", rep.StopReason, took)
	}
	if fu := rep.FollowUps; fu.Sent == 0 || fu.Unsent == 0 {
		t.Fatalf("follow-ups %+v: want some sent before the interruption, the rest unsent", fu)
	}
}

// TestFollowUpsFailover: with two access points, a follow-up the
// primary answers UNAVAILABLE is sent again, identical (the same ID),
// to the backup, as the client retries a submit.
func TestFollowUpsFailover(t *testing.T) {
	ctx := setup(t)
	primary, backup := newLedger(), newLedger()
	primary.answer = func(cellpayv1.PaymentType, string) (*cellpayv1.Transaction, error, bool) {
		return nil, status.Error(codes.Unavailable, "primary down for follow-ups"), true
	}
	// Each access point's submits reach the other's ledger too: the
	// platform's access points share the cells.
	pAddr, bAddr := serveLedger(t, &mirror{ledger: primary, also: backup}), serveLedger(t, &mirror{ledger: backup, also: primary})
	cfg := closedConfig(TargetGTR, "", 60)
	cfg.Endpoints, cfg.Concurrency, cfg.FollowUps = []string{pAddr, bAddr}, 2, 1
	cfg.Client.Failover = failover.Config{SplitRatio: 100}
	rep, err := Run(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	fu := rep.FollowUps
	if fu.Sent == 0 || fu.Answered != fu.Sent || fu.Unsent != 0 {
		t.Fatalf("follow-ups %+v: want every one answered through the backup", fu)
	}
	primary.mu.Lock()
	backup.mu.Lock()
	defer primary.mu.Unlock()
	defer backup.mu.Unlock()
	if len(primary.reqs) == 0 {
		t.Fatal("no follow-up went to the primary first")
	}
	for k, reqs := range primary.reqs {
		again := backup.reqs[k]
		if len(again) == 0 || !proto.Equal(reqs[0], again[0]) {
			t.Fatalf("%s: %v at the primary, %v at the backup", k, reqs, again)
		}
	}
}

// mirror is a ledger that also submits every authorization to another
// (the platform's access points share the cells).
type mirror struct {
	*ledger
	also *ledger
}

func (m *mirror) SubmitTransaction(ctx context.Context, req *cellpayv1.SubmitTransactionRequest) (*cellpayv1.Transaction, error) {
	if _, err := m.also.SubmitTransaction(ctx, req); err != nil {
		return nil, err
	}
	return m.ledger.SubmitTransaction(ctx, req)
}
