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
	"hash/fnv"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/cmd/gtr/internal/admission"
	"github.com/cellpay/cellpay/cmd/gtr/internal/health"
	"github.com/cellpay/cellpay/internal/pnr/gtrside"
	"github.com/cellpay/cellpay/internal/retrybudget"
	"github.com/cellpay/cellpay/internal/validate"
	"github.com/cellpay/cellpay/pkg/api/apierr"
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
	// Located records how a read or a follow-up (op: read, follow_up)
	// found the cell that holds its transaction: first (the first cell
	// asked), owner (the directory named it) or fanout.
	Located(op, how string)
	// Across records a transaction routed outside its partner's home site
	// (routing.Result.Across): the home site has too little healthy
	// capacity in the pool, or none; site is where its first cell is.
	Across(homeSite, site string)
}

// Config configures a Server.
type Config struct {
	// Table returns the routing table in force; it must not block.
	Table func() *routing.Table
	// HomeSite, if set, is the home site of a partner (the partner
	// registry's home_site, "" for none), which routing prefers; it must
	// not block or allocate.
	HomeSite func(partnerID string) string
	Cells    Cells
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
	// GetTimeout bounds a GetTransaction, its fan-out to the cells
	// included; default 3s. FindTimeout bounds its ask of the first cell,
	// after which (that cell slow or away) it fans out; default 1s.
	GetTimeout, FindTimeout time.Duration
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
	if c.FindTimeout <= 0 {
		c.FindTimeout = time.Second
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
	return s.coalesce(ctx, req.GetPartnerId(), req.GetTransactionId(), fp, func(ctx context.Context) (*cellpayv1.Transaction, error) {
		return s.submit(ctx, req, fp)
	})
}

// coalesce runs do once for concurrent calls of one partner's transaction
// ID with one payload (fingerprint fp), and gives each caller its answer.
// The shared run outlives a first caller who gives up, but not the first
// caller's deadline.
func (s *Server) coalesce(ctx context.Context, partner, id string, fp idempotency.Fingerprint, do func(context.Context) (*cellpayv1.Transaction, error)) (*cellpayv1.Transaction, error) {
	// Partner and transaction ID are validated ([A-Za-z0-9._-]): the NULs
	// cannot occur in them, so no two keys run together.
	key := partner + "\x00" + id + "\x00" + string(fp[:])
	deadline, _ := ctx.Deadline()
	ch := s.flights.DoChan(key, func() (any, error) {
		fctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		defer cancel()
		return do(fctx)
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
// of no return. What to do is the call machine's decision
// (gtrside.Call); this is its driver, performing its actions on the
// limits, the routing table, the retry budget and the cells. The call's
// clock is the wall clock, as the caller's deadline is.
func (s *Server) submit(ctx context.Context, req *cellpayv1.SubmitTransactionRequest, fp idempotency.Fingerprint) (*cellpayv1.Transaction, error) {
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	deadline, _ := ctx.Deadline()
	call := gtrside.NewCall(gtrside.CallConfig{MaxAttempts: s.cfg.MaxAttempts, MinAttemptTime: s.cfg.MinAttemptTime, Deadline: deadline})
	var (
		gtrSlot *slot
		table   *routing.Table
		res     routing.Result
		ranked  []routing.Choice
		buf     [maxRanked]routing.Choice
		ids     [maxRanked]string
		info    = callInfo{id: newCallID()}
	)
	txnKey := idempotency.KeyOf(req)
	a := call.Start()
	for {
		switch act := a.(type) {
		case gtrside.Admit:
			// The GTR's own adaptive limit, over all cells: when the whole
			// platform (the GTR included) queues, shed here, before routing.
			gtrSlot = s.gtrSlot(req.GetPartnerId())
			ev := gtrside.Admitted{OK: gtrSlot.acquired}
			if !ev.OK {
				ev.RetryAfter = gtrSlot.lim.RetryAfter()
			}
			a = call.Step(ev)
		case gtrside.Route:
			var err error
			table = s.cfg.Table()
			res, ranked, err = s.route(table, req, txnKey, fp, buf[:0])
			cells := ids[:0]
			for _, c := range ranked {
				cells = append(cells, c.Cell.ID)
			}
			if err == nil {
				s.retries.Request()
			}
			a = call.Step(gtrside.Routed{Now: time.Now(), Cells: cells, Err: err})
		case gtrside.AskRetry:
			a = call.Step(gtrside.RetryAnswer{Now: time.Now(), OK: s.retries.Retry()})
		case gtrside.Try:
			cell := cellOf(table, ranked, act.Cell)
			var lim *admission.CellLimit
			if s.cfg.Limits != nil {
				lim = s.cfg.Limits.Cell(cell.ID)
			}
			if !lim.Acquire() {
				a = call.Step(gtrside.Busy{Now: time.Now(), RetryAfter: lim.RetryAfter()})
				continue
			}
			began := time.Now()
			info.home = res.Home != nil && cell.ID == res.Home.ID
			info.balancer = table.Balancer(cell.Pool)
			ans := s.attempt(ctx, cell, req, act.Attempt, res.Rule.Name, act.LastResort, info, func(toPNR time.Duration) {
				lim.Release(toPNR, admission.Served)
			})
			if !ans.Released {
				lim.Release(time.Since(began), limitOutcome(ans.Sample()))
			}
			if !ans.Gone {
				s.report(req, cell, act.Attempt, ans)
			}
			owner, known := table.Cell(ans.Owner)
			known = ans.Owner != "" && known
			a = call.Step(gtrside.Attempted{Now: time.Now(), Answer: ans, OwnerKnown: known, OwnerUp: known && owner.State == routing.CellUp})
		case gtrside.Finish:
			return s.finish(ctx, req, act, gtrSlot, txnKey, fp)
		}
	}
}

// route ranks the cells for req in table (into buf), with a cell that
// completed the transaction before promoted first; err is the caller's.
func (s *Server) route(table *routing.Table, req *cellpayv1.SubmitTransactionRequest, key idempotency.Key, fp idempotency.Fingerprint, buf []routing.Choice) (routing.Result, []routing.Choice, error) {
	attrs := routing.Attrs{
		TransactionID: req.GetTransactionId(),
		PartnerID:     req.GetPartnerId(),
		Market:        req.GetMarket(),
		PaymentType:   req.GetPaymentType().String(),
		MerchantID:    req.GetMerchant().GetId(),
		HomeSite:      s.homeSite(req.GetPartnerId()),
	}
	res, err := table.Route(&attrs, buf)
	if res.Across && s.cfg.Metrics != nil {
		s.cfg.Metrics.Across(attrs.HomeSite, res.Ranked[0].Cell.Site)
	}
	switch {
	case errors.Is(err, routing.ErrNoRule):
		return res, nil, apierr.Error(codes.Unavailable, apierr.NoRoute, fmt.Sprintf("no routing rule for partner %q, market %s, payment type %s",
			attrs.PartnerID, attrs.Market, attrs.PaymentType))
	case errors.Is(err, routing.ErrNoCell):
		return res, nil, apierr.Error(codes.Unavailable, apierr.NoRoute, fmt.Sprintf("no cell can take transactions for rule %q", res.Rule.Name))
	case err != nil:
		return res, nil, status.Error(codes.Internal, err.Error())
	}
	ranked, err := s.moved.promote(key, fp, res.Ranked)
	if err != nil {
		return res, nil, apierr.Error(codes.AlreadyExists, apierr.TransactionIDReused, "transaction_id: already used with a different payload")
	}
	return res, ranked, nil
}

// cellOf is the cell with ID id: one of the ranking's, or the owner a
// redirect added, from the table the call was routed by.
func cellOf(table *routing.Table, ranked []routing.Choice, id string) *routing.Cell {
	for _, c := range ranked {
		if c.Cell.ID == id {
			return c.Cell
		}
	}
	c, _ := table.Cell(id) // the call redirects only to a known cell
	return &c
}

// report tells health and the metrics what an attempt on cell found, and
// logs a re-route.
func (s *Server) report(req *cellpayv1.SubmitTransactionRequest, cell *routing.Cell, n int32, a gtrside.Answer) {
	if s.cfg.Health != nil {
		s.cfg.Health.Record(cell.ID, healthOutcome(a.Health()))
	}
	if a.Reroute == nil {
		return
	}
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.Rerouted(cell.ID, a.Reroute, a.CellHealthy)
	}
	s.cfg.Log.Warn("re-routing before the point of no return",
		"partner_id", req.GetPartnerId(), "transaction_id", req.GetTransactionId(), "cell", cell.ID, "attempt", n, "reason", a.Reroute)
}

// finish performs the call's end: the answer the caller gets, the GTR-wide
// slot given back, the cell remembered, the metrics.
func (s *Server) finish(ctx context.Context, req *cellpayv1.SubmitTransactionRequest, f gtrside.Finish, gtrSlot *slot, key idempotency.Key, fp idempotency.Fingerprint) (txn *cellpayv1.Transaction, err error) {
	switch {
	case f.Shed == gtrside.ShedRouter:
		err = admission.Shed(ctx, apierr.Overloaded, admission.RouterBusy, f.RetryAfter)
	case f.Shed == gtrside.ShedCells:
		what := "every cell that could take the transaction is at its concurrency limit"
		if f.Sent {
			what += " (a cell refused it before its point of no return, so nothing was charged)"
		}
		err = admission.Shed(ctx, apierr.Overloaded, what, f.RetryAfter)
	case f.Pending:
		txn = s.pending(f.Cell, req)
	default:
		txn, err = f.Txn, f.Err
	}
	if f.GTRSample != gtrside.SampleNone {
		gtrSlot.release(limitOutcome(f.GTRSample))
	}
	if f.Remember {
		s.moved.remember(key, f.Cell, fp)
	}
	if m := s.cfg.Metrics; m != nil {
		switch f.Shed {
		case gtrside.ShedRouter:
			m.Shed("gtr_busy")
		case gtrside.ShedCells:
			m.Shed("cell_busy")
		}
		m.Done(txn, err, f.Tried)
	}
	return txn, err
}

// limitOutcome is a Sample as the adaptive limits take it.
func limitOutcome(s gtrside.Sample) admission.Outcome {
	switch s {
	case gtrside.SampleDropped:
		return admission.Dropped
	case gtrside.SampleIgnored:
		return admission.Ignored
	}
	return admission.Served
}

// healthOutcome is a Health as the monitor takes it.
func healthOutcome(h gtrside.Health) health.Outcome {
	switch h {
	case gtrside.Failed:
		return health.Failed
	case gtrside.TimedOut:
		return health.TimedOut
	}
	return health.Answered
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
// (docs/design/README.md: a call acts only for its own partner); here it must be set.
func partnerOf(ctx context.Context, req *cellpayv1.GetTransactionRequest) (string, error) {
	if err := idempotency.ValidateKey(req.GetPartnerId()); err != nil {
		return "", &validate.FieldError{Field: "partner_id", Reason: err.Error()}
	}
	return req.GetPartnerId(), nil
}

// GetTransaction reads the caller's partner's transaction at the cell that
// holds it, by the rule of follow-ups (docs/design/follow-ups.md): the
// first cell asked is the transaction's natural home when the request's
// routing hints (market, payment type) or the table's rule for the partner
// name one, else a cell picked by the ID's hash; a cell that does not hold
// the transaction names its owner from the transaction directory, asked
// next. Only a transaction whose place is unknown there (no entry: decided
// in a directory outage and not filed yet, or older than the directory's
// MaxAge) or a first cell that does not answer costs a fan-out to every
// cell, counted (cellpay_gtr_locates_total). Another partner's
// transaction with the same ID is NOT_FOUND, like an ID never used: every
// cell answers for the asked partner only.
//
// A fan-out waits for a cell whose connection is down (restarting,
// reconnecting after a cut) within the read's bound instead of counting it
// unanswered at once: NOT_FOUND is said only when every cell answered it,
// and a cell that did not answer within the bound makes the read
// UNAVAILABLE, which a partner retries.
func (s *Server) GetTransaction(ctx context.Context, req *cellpayv1.GetTransactionRequest) (*cellpayv1.Transaction, error) {
	partner, err := partnerOf(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := idempotency.ValidateKey(req.GetTransactionId()); err != nil {
		return nil, (&validate.FieldError{Field: "transaction_id", Reason: err.Error()})
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.GetTimeout)
	defer cancel()
	table := s.cfg.Table()
	get := &cellproto.GetRequest{PartnerId: partner, TransactionId: req.GetTransactionId()}
	if txn, done, err := s.readAt(ctx, table, s.reader(table, partner, req), get); done {
		return txn, err
	}
	s.located(opRead, "fanout")
	txn, _, unreachable, cells := s.fanOut(ctx, partner, req.GetTransactionId())
	if txn != nil {
		return txn, nil
	}
	if unreachable > 0 {
		return nil, status.Errorf(codes.Unavailable, "transaction not found, and %d of %d cells did not answer", unreachable, cells)
	}
	return nil, status.Error(codes.NotFound, "transaction not found")
}

// homeSite is the partner's home site, "" for none or no lookup.
func (s *Server) homeSite(partner string) string {
	if s.cfg.HomeSite == nil {
		return ""
	}
	return s.cfg.HomeSite(partner)
}

// reader is the first cell a read of req asks: the natural home of the
// transaction's key as far as the request tells it (a rule matching the
// partner alone still names it), else a cell picked by the ID's hash
// (any cell can tell where a transaction is).
func (s *Server) reader(table *routing.Table, partner string, req *cellpayv1.GetTransactionRequest) *routing.Cell {
	attrs := routing.Attrs{TransactionID: req.GetTransactionId(), PartnerID: partner, Market: req.GetMarket(), HomeSite: s.homeSite(partner)}
	if pt := req.GetPaymentType(); pt != cellpayv1.PaymentType_PAYMENT_TYPE_UNSPECIFIED {
		attrs.PaymentType = pt.String()
	}
	var buf [maxRanked]routing.Choice
	if res, _ := table.Route(&attrs, buf[:0]); res.Home != nil {
		return res.Home
	}
	cells := table.Spec().Cells
	if len(cells) == 0 {
		return nil
	}
	h := fnv.New32a()
	h.Write([]byte(partner))
	h.Write([]byte{0})
	h.Write([]byte(req.GetTransactionId()))
	return &cells[h.Sum32()%uint32(len(cells))]
}

// readAt reads get at cell, then at the owner it names; done is false
// when the transaction's place is still unknown (a fan-out's turn).
func (s *Server) readAt(ctx context.Context, table *routing.Table, cell *routing.Cell, get *cellproto.GetRequest) (txn *cellpayv1.Transaction, done bool, err error) {
	if cell == nil {
		return nil, false, nil
	}
	client, err := s.cfg.Cells.Client(cell, table.Balancer(cell.Pool))
	if err != nil {
		return nil, false, nil
	}
	fctx, cancel := context.WithTimeout(ctx, s.cfg.FindTimeout)
	defer cancel()
	resp, err := client.Find(fctx, get, grpc.WaitForReady(true))
	switch {
	case err != nil:
		return nil, false, nil // NOT_FOUND (place unknown), or no answer
	case resp.GetOwnerCell() == "":
		s.located(opRead, "first")
		return resp.GetResult(), true, nil
	}
	owner, known := table.Cell(resp.GetOwnerCell())
	if !known {
		return nil, false, nil
	}
	if client, err = s.cfg.Cells.Client(&owner, table.Balancer(owner.Pool)); err != nil {
		return nil, false, nil
	}
	txn, err = client.Get(ctx, get, grpc.WaitForReady(true))
	switch status.Code(err) {
	case codes.OK:
		s.located(opRead, "owner")
		return txn, true, nil
	case codes.NotFound:
		return nil, false, nil
	}
	return nil, true, status.Errorf(codes.Unavailable, "cell %s, which holds the transaction, did not answer: %v", owner.ID, status.Convert(err).Message())
}

// fanOut asks every cell of the table for partner's transaction id, and
// returns the first record found with its cell; or, when none has it, how
// many of the cells did not answer within GetTimeout.
func (s *Server) fanOut(ctx context.Context, partner, id string) (txn *cellpayv1.Transaction, at *routing.Cell, unreachable, cells int) {
	// A fan-out asks every cell: never without a bound, whatever the
	// caller set (or did not).
	ctx, cancel := context.WithTimeout(ctx, s.cfg.GetTimeout)
	defer cancel()
	get := &cellproto.GetRequest{PartnerId: partner, TransactionId: id}
	tbl := s.cfg.Table()
	all := tbl.Spec().Cells
	type answer struct {
		txn  *cellpayv1.Transaction
		cell *routing.Cell
		err  error
	}
	// Buffered for every cell: a fan-out answered early leaves no sender
	// blocked, and each ends when cancel does.
	answers := make(chan answer, len(all))
	for i := range all {
		c := &all[i]
		go func() {
			client, err := s.cfg.Cells.Client(c, tbl.Balancer(c.Pool))
			if err != nil {
				answers <- answer{err: err}
				return
			}
			txn, err := client.Get(ctx, get, grpc.WaitForReady(true))
			answers <- answer{txn, c, err}
		}()
	}
	for range all {
		a := <-answers
		switch {
		case a.err == nil:
			return a.txn, a.cell, 0, len(all)
		case status.Code(a.err) != codes.NotFound:
			unreachable++
		}
	}
	return nil, nil, unreachable, len(all)
}
