package issuersim

import (
	"context"
	"log/slog"
	"math"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/pkg/issuerproto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Server implements issuerproto.IssuerServer. It is safe for concurrent use.
type Server struct {
	issuerproto.UnimplementedIssuerServer

	cfg    Config
	lim    limits
	log    *slog.Logger
	ledger *ledger
	cards  *cards
	auths  *authorizations
	faults *faults
	// journal lists every outcome applied, in order, for ListEffects.
	journal journal
}

var _ issuerproto.IssuerServer = (*Server)(nil)

// New returns a Server configured by cfg, with no faults injected. It panics
// if cfg is invalid (a negative limit): configuration is a programming
// decision here, never user input.
func New(cfg Config) *Server {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		panic(err)
	}
	return &Server{
		cfg:    cfg,
		lim:    limits{perTxn: cfg.PerTxnLimit, perCard: cfg.PerCardLimit},
		log:    cfg.Logger,
		ledger: newLedger(),
		cards:  newCards(),
		auths:  newAuthorizations(),
		faults: newFaults(cfg.Seed),
	}
}

// Authorize decides a card authorization, or repeats the first decision
// for its transaction (partner and transaction ID), or refuses it with
// FAILED_PRECONDITION when an inquiry closed the transaction. See the
// package documentation for the rules and faults.
func (s *Server) Authorize(ctx context.Context, req *issuerproto.AuthorizeRequest) (*issuerproto.AuthorizeResponse, error) {
	k := txnKey{partner: req.GetPartnerId(), id: req.GetTransactionId()}
	return s.call(ctx, "authorize", k,
		func() error { return validateAuthorize(req) },
		func() outcome { return s.authorize(k, req) },
		func() []slog.Attr { return []slog.Attr{slog.String("pan", card.Mask(req.GetPan()))} })
}

// Adjust applies a capture, void or refund of an approved card
// authorization to the issuer's ledger of it, or repeats the first outcome
// for its own transaction, or refuses it with FAILED_PRECONDITION when an
// inquiry closed the transaction: the same dedupe, closing and faults as
// Authorize. See the package documentation.
func (s *Server) Adjust(ctx context.Context, req *issuerproto.AdjustRequest) (*issuerproto.AuthorizeResponse, error) {
	k := txnKey{partner: req.GetPartnerId(), id: req.GetTransactionId()}
	return s.call(ctx, "adjust", k,
		func() error { return validateAdjust(req) },
		func() outcome { return s.adjust(k, req) },
		func() []slog.Attr {
			return []slog.Attr{
				slog.String("kind", req.GetKind().String()),
				slog.String("original_transaction_id", req.GetOriginalTransactionId()),
				slog.Int64("amount_minor_units", req.GetAmountMinorUnits()),
				slog.String("currency", req.GetCurrency()),
			}
		})
}

// call is the path Authorize and Adjust share: the faults (latency, hang,
// error_rate before or after the effect), validation, the request count,
// the apply under the record's lock and the debug line. validate checks the
// request; decide, run only for a transaction with no outcome and not
// closed, under its record's lock, decides and applies the outcome to
// record; logAttrs, called only when debug lines are on, names the
// operation's own values (never a full PAN).
func (s *Server) call(ctx context.Context, op string, k txnKey, validate func() error,
	decide func() outcome, logAttrs func() []slog.Attr,
) (*issuerproto.AuthorizeResponse, error) {
	p := s.faults.callPlan()
	if err := sleep(ctx, p.latency); err != nil {
		return nil, err
	}
	if err := validate(); err != nil {
		return nil, err
	}
	rec := s.ledger.getOrCreate(k)
	rec.mu.Lock()
	rec.requests++
	rec.mu.Unlock()

	if p.hang {
		<-ctx.Done()
		return nil, ctxStatus(ctx)
	}
	if p.failBefore {
		return nil, errInjected
	}
	out, dup, closed := apply(rec, decide)
	if !dup && !closed {
		s.journal.add(k, out)
	}
	if s.log.Enabled(ctx, slog.LevelDebug) {
		attrs := []slog.Attr{
			slog.String("partner_id", k.partner),
			slog.String("transaction_id", k.id),
		}
		attrs = append(attrs, logAttrs()...)
		attrs = append(attrs,
			slog.Bool("approved", out.approved),
			slog.String("decline_reason", out.reason),
			slog.Bool("duplicate", dup),
			slog.Bool("closed", closed),
			slog.Bool("fail_after_effect", p.failAfter))
		s.log.LogAttrs(ctx, slog.LevelDebug, op, attrs...)
	}
	switch {
	case p.failAfter:
		// The caller learns nothing, a refusal included.
		return nil, errInjected
	case closed:
		return nil, errClosed
	}
	return out.response(k, dup), nil
}

// errClosed is Authorize's and Adjust's answer on a transaction an inquiry
// closed. Like every error here it carries no request value.
var errClosed = status.Error(codes.FailedPrecondition,
	"issuersim: the transaction was closed by an inquiry and is never applied")

// apply records the outcome decide returns for rec if it has none and no
// inquiry closed it, and returns the recorded outcome and whether it was
// already there, or closed=true and no outcome. Holding rec.mu across the
// checks, decide and the write is what makes one effect per transaction,
// and none once closed.
func apply(rec *record, decide func() outcome) (o outcome, dup, closed bool) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.outcome != nil {
		return *rec.outcome, true, false
	}
	if rec.closed {
		return outcome{}, false, true
	}
	out := decide()
	rec.outcome = &out
	rec.effects++
	return out, false, false
}

// authorize decides and applies authorization k: the card's total, and
// for an approved card authorization (not a refund, not a bank transfer)
// the ledger its adjustments are held to. Called under k's record lock.
func (s *Server) authorize(k txnKey, req *issuerproto.AuthorizeRequest) outcome {
	approved, reason := s.cards.decide(request{
		pan:          req.GetPan(),
		expiryMonth:  req.GetExpiryMonth(),
		expiryYear:   req.GetExpiryYear(),
		amount:       req.GetAmountMinorUnits(),
		refund:       req.GetRefund(),
		bankTransfer: req.GetBankTransfer(),
	}, s.lim, s.cfg.Now())
	o := outcome{refund: req.GetRefund(), bankTransfer: req.GetBankTransfer(), at: s.cfg.Now(), terminal: req.GetTerminalId(),
		requested: req.GetAmountMinorUnits(), requestedCurrency: req.GetCurrency()}
	if !approved {
		o.reason = reason
		return o
	}
	if !req.GetRefund() && !req.GetBankTransfer() {
		s.auths.add(k, req.GetAmountMinorUnits(), req.GetCurrency())
	}
	o.approved, o.authCode, o.amount, o.currency = true, AuthCode(k.partner, k.id), req.GetAmountMinorUnits(), req.GetCurrency()
	return o
}

// adjust decides and applies adjustment k of its original, the partner's
// approved card authorization original_transaction_id: held and settled
// at once in the original's ledger, or declined, the ledger unchanged.
// Called under k's record lock; it takes the original's ledger lock, never
// its record lock.
func (s *Server) adjust(k txnKey, req *issuerproto.AdjustRequest) outcome {
	o := outcome{kind: req.GetKind(), original: req.GetOriginalTransactionId(), at: s.cfg.Now(), terminal: req.GetTerminalId(),
		requested: req.GetAmountMinorUnits(), requestedCurrency: req.GetCurrency()}
	a := s.auths.get(txnKey{partner: k.partner, id: o.original})
	switch {
	case a == nil:
		o.reason = ReasonUnknownOriginal
		return o
	case req.GetCurrency() != a.currency:
		o.reason = ReasonCurrencyMismatch
		return o
	}
	a.mu.Lock()
	amount, reason := adjust(&a.ledger, o.kind, req.GetAmountMinorUnits())
	a.mu.Unlock()
	if reason != "" {
		o.reason = reason
		return o
	}
	o.approved, o.authCode, o.amount, o.currency = true, AuthCode(k.partner, k.id), amount, a.currency
	return o
}

func (o outcome) response(k txnKey, dup bool) *issuerproto.AuthorizeResponse {
	return &issuerproto.AuthorizeResponse{
		PartnerId:     k.partner,
		TransactionId: k.id,
		Approved:      o.approved,
		AuthCode:      o.authCode,
		DeclineReason: o.reason,
		Duplicate:     dup,
	}
}

// validateAuthorize checks the fields the rules cannot do without. Its
// messages name fields and never echo values, so no PAN can leak into one.
func validateAuthorize(req *issuerproto.AuthorizeRequest) error {
	switch {
	case req.GetPartnerId() == "":
		return invalidArg("partner_id is required")
	case req.GetTransactionId() == "":
		return invalidArg("transaction_id is required")
	case req.GetPan() == "" && !req.GetBankTransfer():
		return invalidArg("pan is required")
	case req.GetAmountMinorUnits() < 0:
		return invalidArg("amount_minor_units must not be negative")
	}
	return nil
}

// validateAdjust checks an AdjustRequest: the IDs, a kind, and an amount
// more than zero for a capture or refund (a void's is not read, but may not
// be negative). Its messages name fields and never echo values.
func validateAdjust(req *issuerproto.AdjustRequest) error {
	_, known := followupKinds[req.GetKind()]
	switch {
	case req.GetPartnerId() == "":
		return invalidArg("partner_id is required")
	case req.GetTransactionId() == "":
		return invalidArg("transaction_id is required")
	case req.GetOriginalTransactionId() == "":
		return invalidArg("original_transaction_id is required")
	case !known:
		return invalidArg("kind must be CAPTURE, VOID or REFUND")
	case req.GetAmountMinorUnits() < 0:
		return invalidArg("amount_minor_units must not be negative")
	case req.GetAmountMinorUnits() == 0 && req.GetKind() != issuerproto.AdjustKind_ADJUST_KIND_VOID:
		return invalidArg("amount_minor_units must be more than zero for a capture or refund")
	}
	return nil
}

func invalidArg(msg string) error {
	return status.Error(codes.InvalidArgument, "issuersim: "+msg)
}

// Inquire returns the outcome recorded for (partner_id, transaction_id),
// with duplicate=false, whatever close says. With none recorded (never
// seen, or seen but failed before the effect; another partner's
// transaction with the ID does not count), it answers closed=true on a
// transaction an earlier inquiry closed; otherwise, with close, it closes
// the transaction and answers closed=true, and without, NOT_FOUND. It is
// not counted as a request.
func (s *Server) Inquire(ctx context.Context, req *issuerproto.InquireRequest) (*issuerproto.AuthorizeResponse, error) {
	if err := sleep(ctx, s.faults.latency()); err != nil {
		return nil, err
	}
	k := txnKey{partner: req.GetPartnerId(), id: req.GetTransactionId()}
	switch {
	case k.partner == "":
		return nil, invalidArg("partner_id is required")
	case k.id == "":
		return nil, invalidArg("transaction_id is required")
	}
	var rec *record
	if req.GetClose() {
		rec = s.ledger.getOrCreate(k)
	} else if rec = s.ledger.get(k); rec == nil {
		return nil, notFound()
	}
	// Under rec.mu, as apply checks closed: an Authorize applies before
	// this (its outcome is returned) or finds the record closed.
	rec.mu.Lock()
	o := rec.outcome
	closing := o == nil && req.GetClose() && !rec.closed
	if closing {
		rec.closed = true
	}
	closed := rec.closed
	rec.mu.Unlock()
	if closing {
		s.log.LogAttrs(ctx, slog.LevelDebug, "closed by inquiry",
			slog.String("partner_id", k.partner),
			slog.String("transaction_id", k.id))
	}
	switch {
	case o != nil:
		return o.response(k, false), nil
	case closed:
		return &issuerproto.AuthorizeResponse{PartnerId: k.partner, TransactionId: k.id, Closed: true}, nil
	}
	return nil, notFound()
}

// MaxAllEffects bounds the transactions Effects reports when none are
// asked.
const MaxAllEffects = 5000

func notFound() error {
	return status.Error(codes.NotFound, "issuersim: no outcome recorded for partner_id and transaction_id")
}

// Effects reports effect and request counts for the asked transactions,
// each a (partner_id, transaction_id) pair (each once, in the order asked;
// unknown ones report zeros), or for every known transaction sorted by
// partner, then ID, when none are asked, with what the recorded outcome
// applied: its kind (UNSPECIFIED for an authorization) and original,
// whether it was approved, and its amount and currency (zero and empty for
// a decline, and for a transaction without an outcome). The totals sum the
// reported entries. Every transaction is reported only while there are
// at most MaxAllEffects of them: past that the answer would outgrow a
// message, and the caller is told to ask for its own.
func (s *Server) Effects(_ context.Context, req *issuerproto.EffectsRequest) (*issuerproto.EffectsResponse, error) {
	keys := make([]txnKey, 0, len(req.GetTransactions()))
	for _, t := range req.GetTransactions() {
		keys = append(keys, txnKey{partner: t.GetPartnerId(), id: t.GetTransactionId()})
	}
	keys = dedupe(keys)
	if len(keys) == 0 {
		if n := s.ledger.len(); n > MaxAllEffects {
			return nil, status.Errorf(codes.FailedPrecondition,
				"issuersim: transactions: none asked means every one, and this issuer holds %d (at most %d): ask for yours", n, MaxAllEffects)
		}
		keys = s.ledger.keys()
	}
	resp := &issuerproto.EffectsResponse{Effects: make([]*issuerproto.Effect, 0, len(keys))}
	for _, k := range keys {
		effects, requests, o := s.ledger.get(k).snapshot()
		resp.Effects = append(resp.Effects, &issuerproto.Effect{
			PartnerId:             k.partner,
			TransactionId:         k.id,
			Effects:               clamp32(effects),
			Requests:              clamp32(requests),
			Kind:                  o.kind,
			OriginalTransactionId: o.original,
			Approved:              o.approved,
			AmountMinorUnits:      o.amount,
			Currency:              o.currency,
		})
		resp.TotalEffects += effects
		resp.TotalRequests += requests
	}
	return resp, nil
}

// SetFaults replaces the injected faults and returns them. An error_rate
// outside [0, 1] or a latency_ms out of range is INVALID_ARGUMENT and
// leaves the faults unchanged.
func (s *Server) SetFaults(ctx context.Context, req *issuerproto.Faults) (*issuerproto.Faults, error) {
	f, err := s.faults.set(req)
	if err != nil {
		return nil, err
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "faults set",
		slog.Int64("latency_ms", f.GetLatencyMs()),
		slog.Float64("error_rate", f.GetErrorRate()),
		slog.Bool("after_effect", f.GetAfterEffect()),
		slog.Bool("hang", f.GetHang()))
	return f, nil
}

func dedupe(keys []txnKey) []txnKey {
	if len(keys) < 2 {
		return keys
	}
	seen := make(map[txnKey]bool, len(keys))
	out := make([]txnKey, 0, len(keys))
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// clamp32 fits a count into the proto's int32; a count that large is
// already a failed invariant, and saturating keeps it visible.
func clamp32(n int64) int32 {
	return int32(min(n, math.MaxInt32))
}
