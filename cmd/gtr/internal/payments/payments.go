// Package payments is the GTR's public face: it implements cellpay.v1.Payments.
// Each request is validated, routed by pkg/routing to a ranking of cells,
// and forwarded to the first; it is restarted on the next cell of the
// ranking only while no cell has announced the point of no return for it.
//
// The rule this package keeps: once a PointOfNoReturn event has been seen
// for an attempt, that attempt's cell owns the transaction, and the GTR never
// sends it anywhere else. If the stream breaks after that, the partner is
// told PENDING by that cell and reads the outcome later with GetTransaction.
package payments

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/internal/validate"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/routing"
)

// Cells gives the client for a cell. *cellconn.Pool implements it.
type Cells interface {
	// Client returns a client for cell id at addr; it must not block on
	// the network.
	Client(id, addr string) (cellproto.CellClient, error)
}

// Config configures a Server.
type Config struct {
	// Table returns the routing table in force; it must not block.
	Table func() *routing.Table
	Cells Cells
	// MaxAttempts bounds the cells one transaction is tried on; default 3.
	MaxAttempts int
	// AttemptTimeout bounds one attempt up to its point of no return;
	// default 2s. Past the PNR the attempt gets the caller's whole deadline.
	AttemptTimeout time.Duration
	// DefaultDeadline applies when the caller sets none; default 10s.
	DefaultDeadline time.Duration
	Now             func() time.Time
	Log             *slog.Logger
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
	if c.DefaultDeadline <= 0 {
		c.DefaultDeadline = 10 * time.Second
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
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Server{cfg: cfg}, nil
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
	attrs := routing.Attrs{
		TransactionID: req.GetTransactionId(),
		PartnerID:     req.GetPartnerId(),
		Market:        req.GetMarket(),
		PaymentType:   req.GetPaymentType().String(),
		MerchantID:    req.GetMerchant().GetId(),
	}
	var buf [maxRanked]routing.Choice
	res, err := s.cfg.Table().Route(&attrs, buf[:0])
	switch {
	case errors.Is(err, routing.ErrNoRule):
		return nil, status.Errorf(codes.Unavailable, "no routing rule for partner %q, market %s, payment type %s",
			attrs.PartnerID, attrs.Market, attrs.PaymentType)
	case errors.Is(err, routing.ErrNoCell):
		return nil, status.Errorf(codes.Unavailable, "no cell can take transactions for rule %q", res.Rule.Name)
	case err != nil:
		return nil, status.Error(codes.Internal, err.Error())
	}
	var last error
	for i, choice := range res.Ranked {
		if i == s.cfg.MaxAttempts {
			break
		}
		out := s.attempt(ctx, choice.Cell, req, int32(i+1), res.Rule.Name)
		if out.txn != nil || out.final != nil {
			return out.txn, out.final
		}
		last = out.reroute
		s.cfg.Log.Warn("re-routing before the point of no return",
			"transaction_id", req.GetTransactionId(), "cell", choice.Cell.ID, "attempt", i+1, "reason", out.reroute)
		if ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		return nil, status.Error(codes.DeadlineExceeded, "transaction not started on any cell before the deadline")
	}
	return nil, status.Errorf(codes.Unavailable, "no cell could take the transaction: %v", last)
}

// outcome of one attempt: a transaction or a final error for the caller, or
// a reason to try the next cell.
type outcome struct {
	txn     *cellpayv1.Transaction
	final   error
	reroute error
}

func (s *Server) attempt(ctx context.Context, cell *routing.Cell, req *cellpayv1.SubmitTransactionRequest, n int32, rule string) outcome {
	client, err := s.cfg.Cells.Client(cell.ID, cell.Addr)
	if err != nil {
		return outcome{reroute: err}
	}
	// The attempt's own context: cancelled when the attempt is given up, so
	// that a slow cell stops before its point of no return. After the PNR
	// the attempt keeps the caller's context: it must not be cut short.
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := time.AfterFunc(s.cfg.AttemptTimeout, cancel)
	stream, err := client.Process(actx, &cellproto.ProcessRequest{Request: req, Attempt: n, RouteRule: rule})
	if err != nil {
		timer.Stop()
		return outcome{reroute: err}
	}
	pnr := false
	for {
		ev, err := stream.Recv()
		if err != nil {
			timer.Stop()
			if errors.Is(err, io.EOF) {
				err = errors.New("cell closed the stream without an outcome")
			}
			return s.broken(cell, req, pnr, err)
		}
		switch e := ev.GetEvent().(type) {
		case *cellproto.ProcessEvent_PointOfNoReturn:
			if !pnr && !timer.Stop() {
				// The attempt timer fired as the PNR arrived: the context
				// is cancelled and the outcome will not reach us over this
				// stream. The cell owns it: answer PENDING.
				return s.pending(cell, req)
			}
			pnr = true
		case *cellproto.ProcessEvent_Result:
			timer.Stop()
			return outcome{txn: e.Result}
		case *cellproto.ProcessEvent_Reroutable:
			timer.Stop()
			if pnr {
				// A cell must never say this after its PNR; if it does,
				// trust the PNR and do not re-route.
				return s.pending(cell, req)
			}
			return outcome{reroute: fmt.Errorf("cell %s: %s", cell.ID, e.Reroutable.GetReason())}
		}
	}
}

// broken handles a stream that ended without a terminal event.
func (s *Server) broken(cell *routing.Cell, req *cellpayv1.SubmitTransactionRequest, pnr bool, err error) outcome {
	if pnr {
		return s.pending(cell, req)
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.AlreadyExists, codes.Aborted:
		// The cell's answer about the request itself: the same anywhere.
		return outcome{final: err}
	}
	return outcome{reroute: fmt.Errorf("cell %s: %w", cell.ID, err)}
}

// pending answers for a transaction past its PNR whose outcome this GTR
// did not receive: the owning cell has it, and GetTransaction reads it.
func (s *Server) pending(cell *routing.Cell, req *cellpayv1.SubmitTransactionRequest) outcome {
	now := timestamppb.New(s.cfg.Now())
	return outcome{txn: &cellpayv1.Transaction{
		TransactionId: req.GetTransactionId(),
		Status:        cellpayv1.TransactionStatus_PENDING,
		CellId:        cell.ID,
		Amount:        req.GetAmount(),
		PaymentType:   req.GetPaymentType(),
		PartnerId:     req.GetPartnerId(),
		Market:        req.GetMarket(),
		CreatedAt:     now,
		UpdatedAt:     now,
	}}
}

// GetTransaction asks every cell of the table (cells never call each
// other; only the GTR crosses cell boundaries) and returns the record of the
// cell that owns the transaction.
func (s *Server) GetTransaction(ctx context.Context, req *cellpayv1.GetTransactionRequest) (*cellpayv1.Transaction, error) {
	if err := idempotency.ValidateKey(req.GetTransactionId()); err != nil {
		return nil, (&validate.FieldError{Field: "transaction_id", Reason: err.Error()})
	}
	cells := s.cfg.Table().Spec().Cells
	type answer struct {
		txn *cellpayv1.Transaction
		err error
	}
	answers := make([]answer, len(cells))
	var wg sync.WaitGroup
	for i, c := range cells {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client, err := s.cfg.Cells.Client(c.ID, c.Addr)
			if err != nil {
				answers[i].err = err
				return
			}
			answers[i].txn, answers[i].err = client.Get(ctx, &cellproto.GetRequest{TransactionId: req.GetTransactionId()})
		}()
	}
	wg.Wait()
	var best *cellpayv1.Transaction
	var unreachable int
	for _, a := range answers {
		switch {
		case a.err == nil:
			if best == nil || best.GetStatus() == cellpayv1.TransactionStatus_PENDING {
				best = a.txn
			}
		case status.Code(a.err) != codes.NotFound:
			unreachable++
		}
	}
	switch {
	case best != nil:
		return best, nil
	case unreachable > 0:
		return nil, status.Errorf(codes.Unavailable, "transaction not found, and %d of %d cells did not answer", unreachable, len(cells))
	}
	return nil, status.Error(codes.NotFound, "transaction not found")
}
