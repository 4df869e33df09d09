// Package payments is the GTR's public face: it implements cellpay.v1.Payments.
// Each request is validated, routed by pkg/routing to a ranking of cells,
// and forwarded to the first; it is restarted on the next cell of the
// ranking only while no cell has announced the point of no return for it.
//
// The rule this package keeps: once a PointOfNoReturn event has been seen
// for an attempt, that attempt's cell owns the transaction, and the GTR never
// sends it anywhere else. If the stream breaks after that, the partner is
// told PENDING by that cell and reads the outcome later with GetTransaction.
//
// A transaction is identified by (partner, transaction ID): transaction IDs
// are a namespace per partner. Coalescing, the moved cache and every read
// go by the pair, and another partner's transaction is NOT_FOUND, exactly
// like an ID never used.
package payments

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/cmd/gtr/internal/admission"
	"github.com/cellpay/cellpay/cmd/gtr/internal/health"
	"github.com/cellpay/cellpay/internal/retrybudget"
	"github.com/cellpay/cellpay/internal/validate"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/routing"
)

// Cells gives the client for a cell. *cellconn.Pool implements it.
type Cells interface {
	// Client returns a client for cell c, balanced over its instances by
	// b (the cell's pool's balancer); it must not block on the network.
	Client(c *routing.Cell, b routing.Balancer) (cellproto.CellClient, error)
}

// Observer learns the outcome of every attempt; *health.Monitor implements
// it. Record must not block.
type Observer interface {
	// Record records an attempt on a cell: answered, failed by the cell
	// (unreachable, re-routable through its own fault), or timed out.
	Record(cellID string, o health.Outcome)
}

// Metrics counts what happens to transactions; *telemetry.GTR implements
// it. Its methods must not block.
type Metrics interface {
	// Rerouted records an attempt on cellID given up before its point of
	// no return: err says why, cellHealthy as the cell said.
	Rerouted(cellID string, err error, cellHealthy bool)
	// Shed records a request refused by admission control (reason:
	// cell_busy, partner_rate, partner_in_flight).
	Shed(reason string)
	// Done records a transaction's processing ending with txn or err after
	// attempts cells were tried (coalesced duplicates count once).
	Done(txn *cellpayv1.Transaction, err error, attempts int)
}

// Config configures a Server.
type Config struct {
	// Table returns the routing table in force; it must not block.
	Table func() *routing.Table
	Cells Cells
	// Health, if set, is told the outcome of every attempt.
	Health Observer
	// InFlight, if set, is told when an attempt on a cell starts (+1) and
	// ends (-1); it must not block.
	InFlight func(cellID string, delta int)
	// Metrics, if set, counts outcomes and re-routes.
	Metrics Metrics
	// Limits, if set, is the adaptive concurrency limit of every cell: an
	// attempt on a cell at its limit is not made, and the transaction is
	// answered RESOURCE_EXHAUSTED at once (admission control).
	Limits *admission.Cells
	// Partners, if set, tells the GTR-wide limit how many requests each
	// partner has in flight, so that at the limit a partner within its
	// fair share is still admitted (admission.CellLimit.AcquireShare).
	Partners *admission.Partners
	// MaxAttempts bounds the cells one transaction is tried on; default 3.
	MaxAttempts int
	// AttemptTimeout bounds one attempt up to its point of no return;
	// default 2s. Past the PNR the attempt gets the caller's whole deadline.
	AttemptTimeout time.Duration
	// MinAttemptTime: no attempt starts with less of the caller's deadline
	// left than this; default 50ms.
	MinAttemptTime time.Duration
	// DefaultDeadline applies when the caller sets none; default 10s.
	DefaultDeadline time.Duration
	// GetTimeout bounds a GetTransaction's fan-out to the cells; default 3s.
	GetTimeout time.Duration
	// RetryBudget caps re-routes at this share of the requests of the last
	// 10 seconds, plus MinRetries per second (internal/retrybudget);
	// defaults 0.2 and 3. A burst, one cell failing under all that is in
	// flight on it, re-routes whole; a sick pool answers UNAVAILABLE sooner
	// rather than multiplying its load.
	RetryBudget float64
	MinRetries  int
	// Remember is how many re-routed transactions the GTR remembers the
	// completing cell of, so that their replays go straight there;
	// default 100,000.
	Remember int
	Now      func() time.Time
	Log      *slog.Logger
}

func (c *Config) validate() error {
	if c.Table == nil || c.Cells == nil {
		return errors.New("payments: Table and Cells are required")
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 3
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = 2 * time.Second
	}
	if c.MinAttemptTime <= 0 {
		c.MinAttemptTime = 50 * time.Millisecond
	}
	if c.DefaultDeadline <= 0 {
		c.DefaultDeadline = 10 * time.Second
	}
	if c.GetTimeout <= 0 {
		c.GetTimeout = 3 * time.Second
	}
	if c.RetryBudget <= 0 {
		c.RetryBudget = 0.2
	}
	if c.MinRetries <= 0 {
		c.MinRetries = 3
	}
	if c.Remember <= 0 {
		c.Remember = 100_000
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// Server implements cellpayv1.PaymentsServer.
type Server struct {
	cellpayv1.UnimplementedPaymentsServer
	cfg Config

	inflight atomic.Int64 // requests being processed
	retries  *retrybudget.Budget
	// flights coalesces concurrent duplicates: same partner, ID and
	// payload share one processing. The key's fingerprint is keyed by a
	// per-process secret and never leaves the process.
	flights singleflight.Group
	fp      *idempotency.Fingerprinter
	moved   *movedCache
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("payments: %w", err)
	}
	return &Server{
		cfg: cfg, fp: idempotency.NewFingerprinter(secret), moved: newMovedCache(cfg.Remember),
		retries: retrybudget.New(cfg.RetryBudget, cfg.MinRetries, nil),
	}, nil
}

// maxRanked sizes the stack buffer for a ranking; larger pools fall back
// to a heap slice.
const maxRanked = 16

// SubmitTransaction implements the Payments service.
func (s *Server) SubmitTransaction(ctx context.Context, req *cellpayv1.SubmitTransactionRequest) (*cellpayv1.Transaction, error) {
	if err := validate.Request(req, s.cfg.Now()); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.DefaultDeadline)
		defer cancel()
	}
	fp := s.fp.Of(req)
	// Partner and transaction ID are validated ([A-Za-z0-9._-]): the NULs
	// cannot occur in them, so no two keys run together.
	key := req.GetPartnerId() + "\x00" + req.GetTransactionId() + "\x00" + string(fp[:])
	// The shared processing must outlive a first caller who gives up, but
	// not the first caller's deadline.
	deadline, _ := ctx.Deadline()
	ch := s.flights.DoChan(key, func() (any, error) {
		fctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		defer cancel()
		return s.submit(fctx, req, fp)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*cellpayv1.Transaction), nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// submit routes and forwards one transaction, re-routing before its point
// of no return.
func (s *Server) submit(ctx context.Context, req *cellpayv1.SubmitTransactionRequest, fp idempotency.Fingerprint) (txn *cellpayv1.Transaction, err error) {
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	tried := 0
	if m := s.cfg.Metrics; m != nil {
		defer func() { m.Done(txn, err, tried) }()
	}
	// The GTR's own adaptive limit, over all cells: when the whole
	// platform (the GTR included) queues, shed here, before routing.
	gtrSlot := s.gtrSlot(req.GetPartnerId())
	if !gtrSlot.acquired {
		if s.cfg.Metrics != nil {
			s.cfg.Metrics.Shed("gtr_busy")
		}
		return nil, admission.Shed(ctx, admission.RouterBusy, gtrSlot.lim.RetryAfter())
	}
	defer func() {
		o := admission.Served
		if status.Code(err) == codes.DeadlineExceeded {
			o = admission.Dropped
		}
		gtrSlot.release(o)
	}()
	attrs := routing.Attrs{
		TransactionID: req.GetTransactionId(),
		PartnerID:     req.GetPartnerId(),
		Market:        req.GetMarket(),
		PaymentType:   req.GetPaymentType().String(),
		MerchantID:    req.GetMerchant().GetId(),
	}
	table := s.cfg.Table()
	var buf [maxRanked]routing.Choice
	res, err := table.Route(&attrs, buf[:0])
	switch {
	case errors.Is(err, routing.ErrNoRule):
		return nil, status.Errorf(codes.Unavailable, "no routing rule for partner %q, market %s, payment type %s",
			attrs.PartnerID, attrs.Market, attrs.PaymentType)
	case errors.Is(err, routing.ErrNoCell):
		return nil, status.Errorf(codes.Unavailable, "no cell can take transactions for rule %q", res.Rule.Name)
	case err != nil:
		return nil, status.Error(codes.Internal, err.Error())
	}
	txnKey := idempotency.KeyOf(req)
	ranked, err := s.moved.promote(txnKey, fp, res.Ranked)
	if err != nil {
		return nil, status.Error(codes.AlreadyExists, "transaction_id: already used with a different payload")
	}
	attempts := min(len(ranked), s.cfg.MaxAttempts)
	var last error
	s.retries.Request()
	// busy: a cell was skipped at its concurrency limit (retry: the
	// soonest of those cells' retry hints); sent: an attempt reached a
	// cell.
	busy, sent := false, false
	retry := admission.MaxRetryAfter
	shed := func() error {
		if s.cfg.Metrics != nil {
			s.cfg.Metrics.Shed("cell_busy")
		}
		what := "every cell that could take the transaction is at its concurrency limit"
		if sent {
			what += " (a cell refused it before its point of no return, so nothing was charged)"
		}
		return admission.Shed(ctx, what, retry)
	}
	callID := newCallID()
	redirected := false
	// failed: the last attempt sent failed before its PNR, so the next one
	// is a re-route and takes from the retry budget (skipping a busy cell
	// sends nothing and takes nothing).
	failed := false
	for i := 0; i < attempts; i++ {
		if failed && !s.retries.Retry() {
			if busy {
				return nil, shed()
			}
			return nil, status.Errorf(codes.Unavailable, "retry budget exhausted; first attempt: %v", last)
		}
		failed = false
		if dl, _ := ctx.Deadline(); time.Until(dl) < s.cfg.MinAttemptTime {
			return nil, status.Errorf(codes.DeadlineExceeded, "not enough time left for another attempt; last: %v", last)
		}
		cell := ranked[i].Cell
		var lim *admission.CellLimit
		if s.cfg.Limits != nil {
			lim = s.cfg.Limits.Cell(cell.ID)
		}
		if !lim.Acquire() {
			// The cell has as many attempts as its adaptive limit allows:
			// skip it to the next ranked cell (nothing was sent, so the
			// retry budget is not spent). A cell that is merely full does
			// not hold the transaction up, and a pool that is full
			// everywhere sheds.
			busy = true
			retry = min(retry, lim.RetryAfter())
			last = fmt.Errorf("cell %s is at its concurrency limit", cell.ID)
			continue
		}
		tried = i + 1
		sent = true
		began := time.Now()
		call := callInfo{id: callID, home: res.Home != nil && cell.ID == res.Home.ID, balancer: table.Balancer(cell.Pool)}
		out := s.attempt(ctx, cell, req, int32(i+1), res.Rule.Name, i == attempts-1, call, func(toPNR time.Duration) {
			lim.Release(toPNR, admission.Served)
		})
		if !out.released {
			lim.Release(out.sample(time.Since(began)))
		}
		if out.gone {
			// The caller left before the PNR: nothing to re-route, and
			// nothing learned of the cell, nor of the platform's load.
			gtrSlot.release(admission.Ignored)
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		if s.cfg.Health != nil {
			s.cfg.Health.Record(cell.ID, out.health())
		}
		if out.reroute == nil {
			if i > 0 && out.txn != nil {
				s.moved.remember(txnKey, out.txn.GetCellId(), fp)
			}
			return out.txn, out.final
		}
		last, failed = out.reroute, true
		if s.cfg.Metrics != nil {
			s.cfg.Metrics.Rerouted(cell.ID, out.reroute, out.cellHealthy)
		}
		if out.owner != "" && out.owner != cell.ID && !redirected {
			// The transaction directory names the cell that owns the
			// transaction: its state is there, so the next attempt goes
			// there, whatever its weight (a drained cell still answers for
			// what it owns). Once per call.
			if owner, ok := table.Cell(out.owner); ok {
				redirected = true
				ranked = redirect(ranked, i+1, &owner)
				attempts = min(len(ranked), s.cfg.MaxAttempts+1)
			}
		}
		s.cfg.Log.Warn("re-routing before the point of no return",
			"partner_id", req.GetPartnerId(), "transaction_id", req.GetTransactionId(), "cell", cell.ID, "attempt", i+1, "reason", out.reroute)
		if ctx.Err() != nil {
			return nil, status.Errorf(codes.DeadlineExceeded, "deadline passed before the transaction started on a cell; last: %v", last)
		}
	}
	if busy {
		return nil, shed()
	}
	return nil, status.Errorf(codes.Unavailable, "no cell could take the transaction: %v", last)
}

// redirect returns ranked with owner as the attempt after the first next
// ones, and owner's place further down dropped. It copies: ranked may be a
// stack buffer of the caller's.
func redirect(ranked []routing.Choice, next int, owner *routing.Cell) []routing.Choice {
	out := make([]routing.Choice, 0, len(ranked)+1)
	out = append(out, ranked[:next]...)
	out = append(out, routing.Choice{Cell: owner})
	for _, c := range ranked[next:] {
		if c.Cell.ID != owner.ID {
			out = append(out, c)
		}
	}
	return out
}

// newCallID names one SubmitTransaction call, uniquely: 128 random bits.
func newCallID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// slot is a call's place in the GTR-wide adaptive limit, given back once,
// when the call ends, with the call's whole latency: the limit bounds the
// transactions in flight in the platform, past their points of no return
// too. Given back at the PNR (as a cell's slot is), it let the work after
// the PNR (the issuer, the final write, the answer) pile up under overload
// without bound: in bench-overload the same flags timed out 18.7% of the
// requests with the slot given back at the PNR, 0.4% with it held
// (docs/benchmarks/log/overload.md, evening of 2026-12-03).
type slot struct {
	lim      *admission.CellLimit
	start    time.Time
	acquired bool
	released bool
}

func (s *Server) gtrSlot(partnerID string) *slot {
	sl := &slot{start: time.Now()}
	if s.cfg.Limits != nil {
		sl.lim = s.cfg.Limits.Cell(admission.WholeGTR)
	}
	mine, active := s.cfg.Partners.Share(partnerID)
	sl.acquired = sl.lim.AcquireShare(mine, active)
	return sl
}

func (sl *slot) release(o admission.Outcome) {
	if sl.released || !sl.acquired {
		return
	}
	sl.released = true
	sl.lim.Release(time.Since(sl.start), o)
}

// partnerOf is the partner a GetTransaction call reads for: the one
// namespace its transaction_id is looked up in. On the partners' listener
// the authentication interceptor (cmd/gtr/internal/auth) has already set
// partner_id to the authenticated partner, or refused a call naming another
// (DESIGN.md: a call acts only for its own partner); here it must be set.
func partnerOf(ctx context.Context, req *cellpayv1.GetTransactionRequest) (string, error) {
	if err := idempotency.ValidateKey(req.GetPartnerId()); err != nil {
		return "", &validate.FieldError{Field: "partner_id", Reason: err.Error()}
	}
	return req.GetPartnerId(), nil
}

// GetTransaction asks every cell of the table (cells never call each
// other; only the GTR crosses cell boundaries) for the caller's partner's
// transaction, and returns the first record a cell has: only the cell that
// took a transaction past its point of no return holds a record partners
// see (a cell answers NOT_FOUND for one it gave up before), so the first
// found is the answer and the rest of the fan-out is cancelled. Another
// partner's transaction with the same ID is NOT_FOUND, like an ID never
// used: every cell answers for the asked partner only.
//
// A cell whose connection is down (restarting, reconnecting after a cut)
// is waited for within the fan-out's bound instead of counted unanswered
// at once: NOT_FOUND is said only when every cell answered it, and a cell
// that did not answer within the bound makes the read UNAVAILABLE, which a
// partner retries.
func (s *Server) GetTransaction(ctx context.Context, req *cellpayv1.GetTransactionRequest) (*cellpayv1.Transaction, error) {
	partner, err := partnerOf(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := idempotency.ValidateKey(req.GetTransactionId()); err != nil {
		return nil, (&validate.FieldError{Field: "transaction_id", Reason: err.Error()})
	}
	// A read fans out to every cell: never without a bound, whatever the
	// caller set (or did not).
	ctx, cancel := context.WithTimeout(ctx, s.cfg.GetTimeout)
	defer cancel()
	get := &cellproto.GetRequest{PartnerId: partner, TransactionId: req.GetTransactionId()}
	tbl := s.cfg.Table()
	cells := tbl.Spec().Cells
	type answer struct {
		txn *cellpayv1.Transaction
		err error
	}
	// Buffered for every cell: a fan-out answered early leaves no sender
	// blocked, and each ends when cancel does.
	answers := make(chan answer, len(cells))
	for i := range cells {
		c := &cells[i]
		go func() {
			client, err := s.cfg.Cells.Client(c, tbl.Balancer(c.Pool))
			if err != nil {
				answers <- answer{err: err}
				return
			}
			txn, err := client.Get(ctx, get, grpc.WaitForReady(true))
			answers <- answer{txn, err}
		}()
	}
	var unreachable int
	for range cells {
		a := <-answers
		switch {
		case a.err == nil:
			return a.txn, nil
		case status.Code(a.err) != codes.NotFound:
			unreachable++
		}
	}
	if unreachable > 0 {
		return nil, status.Errorf(codes.Unavailable, "transaction not found, and %d of %d cells did not answer", unreachable, len(cells))
	}
	return nil, status.Error(codes.NotFound, "transaction not found")
}
