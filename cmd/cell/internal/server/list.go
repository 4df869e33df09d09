package server

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// Records is the cell's records as partners list and reconcile them
// through the GTR; *store.Store implements it.
type Records interface {
	List(ctx context.Context, f store.ListFilter) ([]*cellside.Record, error)
	Statement(ctx context.Context, partnerID string, start, end time.Time) ([]store.StatementLine, error)
}

// maxList bounds a List's page.
const maxList = 1000

// List lists a partner's transactions; see the Cell service's contract.
func (s *Server) List(ctx context.Context, req *cellproto.ListRequest) (*cellproto.ListResponse, error) {
	if s.cfg.Records == nil {
		return nil, status.Error(codes.Unimplemented, "this cell does not list its records")
	}
	start, end, err := span(req.GetPartnerId(), req)
	if err != nil {
		return nil, err
	}
	if req.GetLimit() < 1 || req.GetLimit() > maxList {
		return nil, status.Errorf(codes.InvalidArgument, "limit: must be 1 to %d", maxList)
	}
	f := store.ListFilter{PartnerID: req.GetPartnerId(), Start: start, End: end, Types: req.GetPaymentTypes(), Limit: int(req.GetLimit())}
	for _, st := range req.GetStatuses() {
		state := cellside.StateOf(st)
		if state == "" {
			return nil, status.Errorf(codes.InvalidArgument, "statuses: %v is not a status", st)
		}
		f.States = append(f.States, state)
	}
	if req.GetAfterTransactionId() != "" {
		if err := idempotency.ValidateKey(req.GetAfterTransactionId()); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "after_transaction_id: %v", err)
		}
		f.AfterID, f.AfterCreated = req.GetAfterTransactionId(), req.GetAfterCreatedAt().AsTime()
	}
	recs, err := s.cfg.Records.List(ctx, f)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	out := &cellproto.ListResponse{Transactions: make([]*cellpayv1.Transaction, len(recs))}
	for i, r := range recs {
		out.Transactions[i] = r.Transaction()
	}
	return out, nil
}

// Statement sums a partner's transactions; see the Cell service's
// contract.
func (s *Server) Statement(ctx context.Context, req *cellproto.StatementRequest) (*cellproto.StatementResponse, error) {
	if s.cfg.Records == nil {
		return nil, status.Error(codes.Unimplemented, "this cell does not list its records")
	}
	start, end, err := span(req.GetPartnerId(), req)
	if err != nil {
		return nil, err
	}
	lines, err := s.cfg.Records.Statement(ctx, req.GetPartnerId(), start, end)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	out := &cellproto.StatementResponse{Lines: make([]*cellpayv1.StatementLine, len(lines))}
	for i, l := range lines {
		out.Lines[i] = &cellpayv1.StatementLine{PaymentType: l.Type, Status: l.State.Status(), Currency: l.Currency, Count: l.Count, AmountMinorUnits: l.Amount}
	}
	return out, nil
}

// span checks a request's partner and time range.
func span(partnerID string, req interface {
	GetStartTime() *timestamppb.Timestamp
	GetEndTime() *timestamppb.Timestamp
}) (start, end time.Time, err error) {
	if err := idempotency.ValidateKey(partnerID); err != nil {
		return start, end, status.Errorf(codes.InvalidArgument, "partner_id: %v", err)
	}
	if req.GetStartTime() == nil || req.GetEndTime() == nil {
		return start, end, status.Error(codes.InvalidArgument, "start_time, end_time: both are required")
	}
	start, end = req.GetStartTime().AsTime(), req.GetEndTime().AsTime()
	if !start.Before(end) {
		return start, end, status.Error(codes.InvalidArgument, "end_time: must be after start_time")
	}
	return start, end, nil
}
