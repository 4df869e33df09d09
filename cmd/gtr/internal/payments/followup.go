package payments

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/cmd/gtr/internal/admission"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/internal/validate"
	"github.com/cellpay/cellpay/pkg/api/apierr"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

// A follow-up (capture, void, refund) runs in the cell that holds its
// original, and is found there by this rule (docs/design/follow-ups.md):
//
//  1. The original's natural home: routing.Route's Home for the
//     original's key (partner, market, CARD_AUTHORIZATION; its ID for a
//     rule hashing by transaction), the first cell of its rendezvous
//     ranking before weights and health. A drain, an ejection or a health
//     change does not move it, so an original taken at home (nearly all)
//     is reached with no look-up at all.
//  2. If the home does not hold the original (it was re-routed away
//     before its point of no return, or a table change moved its key),
//     the home reads the original's owner from the transaction directory
//     and says so (FollowUpResponse.owner_cell): the GTR sends it there.
//  3. If the home cannot answer (down) or neither it nor the directory
//     knows the original (an entry past the directory's MaxAge), the GTR
//     asks every cell (a fan-out, counted as such).
//
// A follow-up is never re-routed: it is recorded in the original's cell
// before it reaches the issuer, and a failure there is UNAVAILABLE, to be
// retried under the same transaction_id.

// CaptureTransaction implements the Payments service.
func (s *Server) CaptureTransaction(ctx context.Context, req *cellpayv1.CaptureTransactionRequest) (*cellpayv1.Transaction, error) {
	return s.followUp(ctx, &cellproto.FollowUpRequest{Kind: cellpayv1.PaymentType_CAPTURE, PartnerId: req.GetPartnerId(),
		TransactionId: req.GetTransactionId(), OriginalTransactionId: req.GetOriginalTransactionId(), Market: req.GetMarket(), Amount: req.GetAmount()})
}

// VoidTransaction implements the Payments service.
func (s *Server) VoidTransaction(ctx context.Context, req *cellpayv1.VoidTransactionRequest) (*cellpayv1.Transaction, error) {
	return s.followUp(ctx, &cellproto.FollowUpRequest{Kind: cellpayv1.PaymentType_VOID, PartnerId: req.GetPartnerId(),
		TransactionId: req.GetTransactionId(), OriginalTransactionId: req.GetOriginalTransactionId(), Market: req.GetMarket()})
}

// RefundTransaction implements the Payments service.
func (s *Server) RefundTransaction(ctx context.Context, req *cellpayv1.RefundTransactionRequest) (*cellpayv1.Transaction, error) {
	return s.followUp(ctx, &cellproto.FollowUpRequest{Kind: cellpayv1.PaymentType_REFUND, PartnerId: req.GetPartnerId(),
		TransactionId: req.GetTransactionId(), OriginalTransactionId: req.GetOriginalTransactionId(), Market: req.GetMarket(), Amount: req.GetAmount()})
}

// followUp validates, coalesces and admits a follow-up, then sends it to
// its original's cell.
func (s *Server) followUp(ctx context.Context, req *cellproto.FollowUpRequest) (*cellpayv1.Transaction, error) {
	if err := validate.FollowUp(req); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.DefaultDeadline)
		defer cancel()
	}
	fp := s.fp.Of(cellside.AsRequest(req))
	txn, err := s.coalesce(ctx, req.GetPartnerId(), req.GetTransactionId(), fp, func(ctx context.Context) (*cellpayv1.Transaction, error) {
		return s.sendFollowUp(ctx, req)
	})
	return txn, unknownOriginal(err)
}

// unknownOriginal turns a NOT_FOUND of the original into the partner's
// answer: FAILED_PRECONDITION, ORIGINAL_NOT_FOUND, a rule broken like the
// others (over-capture, void after capture). A cell answers an original
// it does not hold NOT_FOUND, which the router reads as "not here" while
// it looks (the home, the directory's owner, the fan-out); only the
// router's last word reaches the partner, so the translation is here.
func unknownOriginal(err error) error {
	if status.Code(err) != codes.NotFound || apierr.Info(err).GetReason() != string(apierr.OriginalNotFound) {
		return err
	}
	return apierr.Error(codes.FailedPrecondition, apierr.OriginalNotFound, status.Convert(err).Message())
}

// sendFollowUp finds the original's cell (the rule above) and runs the
// follow-up there.
func (s *Server) sendFollowUp(ctx context.Context, req *cellproto.FollowUpRequest) (txn *cellpayv1.Transaction, err error) {
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	sl := s.gtrSlot(req.GetPartnerId())
	if !sl.acquired {
		if m := s.cfg.Metrics; m != nil {
			m.Shed("gtr_busy")
		}
		return nil, admission.Shed(ctx, apierr.Overloaded, admission.RouterBusy, sl.lim.RetryAfter())
	}
	tried := 0
	defer func() {
		sl.release(admission.Served)
		if m := s.cfg.Metrics; m != nil {
			m.Done(txn, err, tried)
		}
	}()
	table := s.cfg.Table()
	attrs := routing.Attrs{TransactionID: req.GetOriginalTransactionId(), PartnerID: req.GetPartnerId(), Market: req.GetMarket(),
		PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION.String(), HomeSite: s.homeSite(req.GetPartnerId())}
	var buf [maxRanked]routing.Choice
	res, rerr := table.Route(&attrs, buf[:0])
	if res.Home != nil {
		req.RouteRule = res.Rule.Name
		tried++
		resp, err := s.followUpAt(ctx, table, res.Home, req)
		switch {
		case err == nil && resp.GetOwnerCell() == "":
			s.located(opFollowUp, "first")
			return resp.GetResult(), nil
		case err == nil:
			owner, known := table.Cell(resp.GetOwnerCell())
			if !known {
				return nil, apierr.Error(codes.Unavailable, apierr.Unavailable, fmt.Sprintf("the original's cell %q is not in the routing table", resp.GetOwnerCell()))
			}
			s.located(opFollowUp, "owner")
			tried++
			return s.finalAt(ctx, table, &owner, req)
		case !errors.Is(err, errUnreachable) && status.Code(err) != codes.NotFound:
			return nil, err
		case status.Code(err) == codes.NotFound && apierr.Info(err).GetReason() != string(apierr.OriginalNotFound):
			return nil, err
		}
	} else if !errors.Is(rerr, routing.ErrNoRule) && !errors.Is(rerr, routing.ErrNoCell) && rerr != nil {
		return nil, status.Error(codes.Internal, rerr.Error())
	}
	// No home, the home down, or neither it nor the directory knows the
	// original: ask every cell.
	s.located(opFollowUp, "fanout")
	_, found, unreachable, _ := s.fanOut(ctx, req.GetPartnerId(), req.GetOriginalTransactionId())
	if found == nil {
		if unreachable > 0 {
			return nil, apierr.Error(codes.Unavailable, apierr.Unavailable, fmt.Sprintf("original not found, and %d cells did not answer; retry", unreachable))
		}
		return nil, apierr.Error(codes.NotFound, apierr.OriginalNotFound, cellside.ErrOriginalNotFound.Error())
	}
	tried++
	return s.finalAt(ctx, table, found, req)
}

// errUnreachable: the cell did not answer (no connection, or it failed
// before taking the follow-up).
var errUnreachable = errors.New("cell unreachable")

// followUpAt sends req to cell; an error wraps errUnreachable when the
// cell could not be reached.
func (s *Server) followUpAt(ctx context.Context, table *routing.Table, cell *routing.Cell, req *cellproto.FollowUpRequest) (*cellproto.FollowUpResponse, error) {
	client, err := s.cfg.Cells.Client(cell, table.Balancer(cell.Pool))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUnreachable, err)
	}
	resp, err := client.FollowUp(ctx, req, grpc.WaitForReady(true))
	if status.Code(err) == codes.Unavailable && ctx.Err() == nil {
		return nil, fmt.Errorf("%w: %w", errUnreachable, err)
	}
	return resp, err
}

// finalAt sends req to cell, which holds the original: its answer is
// final, and a cell out of reach is UNAVAILABLE for the partner (retry).
func (s *Server) finalAt(ctx context.Context, table *routing.Table, cell *routing.Cell, req *cellproto.FollowUpRequest) (*cellpayv1.Transaction, error) {
	resp, err := s.followUpAt(ctx, table, cell, req)
	switch {
	case errors.Is(err, errUnreachable):
		return nil, apierr.Error(codes.Unavailable, apierr.Unavailable, fmt.Sprintf("cell %s, which holds the original, did not answer; retry the same transaction_id", cell.ID))
	case err != nil:
		return nil, err
	case resp.GetOwnerCell() != "":
		return nil, apierr.Error(codes.Unavailable, apierr.Unavailable, fmt.Sprintf("cell %s sent the follow-up on to %s; retry", cell.ID, resp.GetOwnerCell()))
	}
	return resp.GetResult(), nil
}

// The ops of Metrics.Located.
const (
	opFollowUp = "follow_up"
	opRead     = "read"
)

func (s *Server) located(op, how string) {
	if m := s.cfg.Metrics; m != nil {
		m.Located(op, how)
	}
}
