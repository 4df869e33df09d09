package load

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
)

// maxFollowUpQueue bounds the lives waiting for a worker: a life chosen
// while it is full is dropped (counted), as the open loop drops a slot
// rather than delay its schedule.
const maxFollowUpQueue = 1 << 14

// FollowUpKinds are the kinds of follow-up, in the report's order.
var FollowUpKinds = []cellpayv1.PaymentType{cellpayv1.PaymentType_CAPTURE, cellpayv1.PaymentType_VOID, cellpayv1.PaymentType_REFUND}

// FollowUpResult is one finished follow-up, for OnFollowUp.
type FollowUpResult struct {
	// PartnerID and ID name the follow-up, a transaction of its own;
	// Original is the ID of the authorization it follows.
	PartnerID, ID, Original string
	// Kind is CAPTURE, VOID or REFUND.
	Kind cellpayv1.PaymentType
	// Amount is what it asked for, in minor units of the authorization's
	// currency; 0 for a void.
	Amount      int64
	Transaction *cellpayv1.Transaction // nil on error
	Err         error
	Sent        time.Time
	Latency     time.Duration
}

// FollowUpReport is the follow-ups' part of a Report (Config.FollowUps).
type FollowUpReport struct {
	// Share is Config.FollowUps.
	Share float64 `json:"share"`
	// Lives counts the approved authorizations chosen to be followed, by
	// life (capture_refund, void).
	Lives map[string]int64 `json:"lives"`
	// Dropped counts the chosen lives never begun because
	// maxFollowUpQueue lives were already waiting.
	Dropped int64 `json:"dropped"`
	// Sent counts follow-ups sent; Answered those that got an answer (a
	// status), the others failed with a gRPC error.
	Sent     int64 `json:"sent"`
	Answered int64 `json:"answered"`
	// Calls counts the follow-ups sent by kind (CAPTURE, VOID, REFUND),
	// then by outcome: the status answered (APPROVED, DECLINED, PENDING,
	// FAILED, always present) or the error's gRPC code name.
	Calls map[string]map[string]int64 `json:"calls"`
	// Unsent counts the steps of chosen lives never sent: the life ended
	// at a step not APPROVED, the run's time ran out or it was
	// interrupted, or the life was dropped.
	Unsent int64 `json:"unsent"`
	// ElapsedSeconds is the follow-ups' time, from the run's start to
	// the last answer.
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// Switches are the follow-ups' client's switches between access
	// points (two Endpoints, or AccessPoints, only; it decides apart
	// from the submits').
	Switches []client.Event `json:"switches,omitempty"`
}

// followUpConfig is what the follow-ups of one run need.
type followUpConfig struct {
	// Share (0..1) of the approved authorizations are followed, Seed
	// choosing which and by what life (planLife).
	Share float64
	Seed  uint64
	// Workers is how many lives run at once; Queue how many may wait.
	Workers, Queue int
	// Timeout bounds each follow-up, retries included, as
	// PerRequestTimeout bounds each submit.
	Timeout time.Duration
	// Deadline ends the follow-ups with the run's Duration: no follow-up
	// is sent after it; those in flight finish, each within Timeout.
	Deadline time.Time
	// OnAnswer, if set, is called with every follow-up's answer, from
	// many goroutines at once.
	OnAnswer func(FollowUpResult)
}

// authorization is an approved authorization a life follows.
type authorization struct {
	partner, id, market, currency string
}

// queued is a life waiting for a worker.
type queued struct {
	auth authorization
	life life
}

// followUps runs lives beside the load: offer, called with every
// submit's result, chooses the approved authorizations to follow and
// queues their lives; Workers goroutines send each life's steps in
// order, each follow-up with its own transaction ID, through pkg/client
// as the submits go (dialFollowUps): with several access points, resent
// under the same ID on a retryable answer and failed over between them.
type followUps struct {
	cfg    followUpConfig
	api    *client.Client
	ctx    context.Context // the run's: its end stops the lives
	reqCtx context.Context // a follow-up's: outlives ctx, bounded by Timeout
	queue  chan queued
	wg     sync.WaitGroup
	rec    followUpRecorder
	start  time.Time
}

// startFollowUps starts cfg.Workers workers sending through api, which
// finish closes.
func startFollowUps(ctx context.Context, cfg followUpConfig, api *client.Client, start time.Time) *followUps {
	f := &followUps{cfg: cfg, api: api, ctx: ctx, reqCtx: context.WithoutCancel(ctx), queue: make(chan queued, cfg.Queue), start: start}
	f.rec.lives, f.rec.calls = map[string]int64{}, map[string]map[string]int64{}
	for range cfg.Workers {
		f.wg.Go(f.work)
	}
	return f
}

// offer queues the life of r, the submit seq, when r is an approved
// authorization chosen to be followed. It never blocks.
func (f *followUps) offer(seq int64, r Result) {
	req := r.Request
	if r.Err != nil || r.Transaction.GetStatus() != cellpayv1.TransactionStatus_APPROVED ||
		req.GetPaymentType() != cellpayv1.PaymentType_CARD_AUTHORIZATION {
		return
	}
	l, ok := planLife(f.cfg.Seed, uint64(seq), f.cfg.Share, req.GetAmount().GetMinorUnits())
	if !ok {
		return
	}
	f.rec.chose(l.name)
	a := authorization{partner: r.PartnerID, id: req.GetTransactionId(), market: req.GetMarket(), currency: req.GetAmount().GetCurrency()}
	select {
	case f.queue <- queued{auth: a, life: l}:
	default:
		f.rec.dropped.Add(1)
		f.rec.unsent.Add(int64(len(l.steps)))
	}
}

// finish waits for the lives under way and the queued ones (those past
// the run's time or interruption are counted unsent, not sent), closes
// the client and reports. Call it once, after the last offer.
func (f *followUps) finish() (FollowUpReport, error) {
	close(f.queue)
	f.wg.Wait()
	rep := f.rec.report(f.cfg.Share)
	rep.ElapsedSeconds = time.Since(f.start).Seconds()
	rep.Switches = f.api.Events()
	if err := f.api.Close(); err != nil {
		return rep, fmt.Errorf("load: follow-ups: close: %w", err)
	}
	return rep, nil
}

func (f *followUps) work() {
	for q := range f.queue {
		f.live(q)
	}
}

// live sends q's steps in order while each is APPROVED and the run is
// neither out of time nor interrupted; the steps it does not send are
// counted unsent.
func (f *followUps) live(q queued) {
	for i, s := range q.life.steps {
		if f.ctx.Err() != nil || !time.Now().Before(f.cfg.Deadline) {
			f.rec.unsent.Add(int64(len(q.life.steps) - i))
			return
		}
		id := q.auth.id + s.suffix
		sent := time.Now()
		txn, err := f.send(q.auth, id, s)
		f.rec.answer(s.kind, txn, err)
		if f.cfg.OnAnswer != nil {
			f.cfg.OnAnswer(FollowUpResult{PartnerID: q.auth.partner, ID: id, Original: q.auth.id, Kind: s.kind, Amount: s.amount,
				Transaction: txn, Err: err, Sent: sent, Latency: time.Since(sent)})
		}
		if err != nil || txn.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
			f.rec.unsent.Add(int64(len(q.life.steps) - i - 1))
			return
		}
	}
}

// send sends one follow-up of a, bounded by Timeout.
func (f *followUps) send(a authorization, id string, s step) (*cellpayv1.Transaction, error) {
	ctx, cancel := context.WithTimeout(f.reqCtx, f.cfg.Timeout)
	defer cancel()
	amount := &cellpayv1.Money{MinorUnits: s.amount, Currency: a.currency}
	switch s.kind {
	case cellpayv1.PaymentType_CAPTURE:
		return f.api.Capture(ctx, &cellpayv1.CaptureTransactionRequest{TransactionId: id, PartnerId: a.partner,
			OriginalTransactionId: a.id, Market: a.market, Amount: amount})
	case cellpayv1.PaymentType_REFUND:
		return f.api.Refund(ctx, &cellpayv1.RefundTransactionRequest{TransactionId: id, PartnerId: a.partner,
			OriginalTransactionId: a.id, Market: a.market, Amount: amount})
	default:
		return f.api.Void(ctx, &cellpayv1.VoidTransactionRequest{TransactionId: id, PartnerId: a.partner,
			OriginalTransactionId: a.id, Market: a.market})
	}
}

// dialFollowUps returns the follow-ups' client of cfg's run (defaults
// set, validated): with Endpoints or AccessPoints, pkg/client's retries
// and failover as cfg.Client says, as the submits go, but a client of
// its own (dialAccessPoints); with one Addr, one call per follow-up over
// conn, the submits' connection, as each submit is one call.
func dialFollowUps(cfg Config, conn grpc.ClientConnInterface, opts []grpc.DialOption) (*client.Client, error) {
	if len(cfg.Endpoints) > 0 || len(cfg.AccessPoints) > 0 {
		return dialAccessPoints(cfg, opts, "load: follow-ups")
	}
	if conn == nil {
		return nil, errors.New("load: follow-ups: no connection")
	}
	return client.New(conn, client.Config{MaxAttempts: 1, CallTimeout: cfg.PerRequestTimeout}), nil
}

// followUpRecorder counts the follow-ups of a run; safe for concurrent
// use. Follow-ups are a share of the submits and each waits for an
// answer, so a mutex here is off the submits' path.
type followUpRecorder struct {
	dropped, unsent atomic.Int64

	mu       sync.Mutex
	lives    map[string]int64            // chosen, by life
	calls    map[string]map[string]int64 // sent, by kind, then outcome
	answered int64                       // sent and answered with a status
}

func (r *followUpRecorder) chose(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lives[name]++
}

// answer counts one follow-up by kind and outcome: the status answered,
// or the error's gRPC code name.
func (r *followUpRecorder) answer(kind cellpayv1.PaymentType, txn *cellpayv1.Transaction, err error) {
	outcome := txn.GetStatus().String()
	if err != nil {
		outcome = codeName(status.Code(err))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	byOutcome := r.calls[kind.String()]
	if byOutcome == nil {
		byOutcome = map[string]int64{}
		r.calls[kind.String()] = byOutcome
	}
	byOutcome[outcome]++
	if err == nil {
		r.answered++
	}
}

// codeName is c's canonical name; UNKNOWN for OK (an error without a
// code) and codes outside the standard set, as the submits count them.
func codeName(c codes.Code) string {
	if int(c) >= numCodes || c == codes.OK {
		c = codes.Unknown
	}
	return codeNames[c]
}

func (r *followUpRecorder) report(share float64) FollowUpReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := FollowUpReport{
		Share:    share,
		Lives:    map[string]int64{LifeCaptureRefund: r.lives[LifeCaptureRefund], LifeVoid: r.lives[LifeVoid]},
		Dropped:  r.dropped.Load(),
		Answered: r.answered,
		Calls:    map[string]map[string]int64{},
		Unsent:   r.unsent.Load(),
	}
	for _, kind := range FollowUpKinds {
		rep.Calls[kind.String()] = map[string]int64{}
		for s := range cellpayv1.TransactionStatus_name {
			if st := cellpayv1.TransactionStatus(s); st != cellpayv1.TransactionStatus_TRANSACTION_STATUS_UNSPECIFIED {
				rep.Calls[kind.String()][st.String()] = 0
			}
		}
	}
	for kind, byOutcome := range r.calls {
		if rep.Calls[kind] == nil {
			rep.Calls[kind] = map[string]int64{}
		}
		for outcome, n := range byOutcome {
			rep.Calls[kind][outcome] = n
			rep.Sent += n
		}
	}
	return rep
}
