package admin

import (
	"context"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/cmd/gtr/internal/statement"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// GetStatement asks every cell for a partner's statement of one UTC day
// and sums the cells that answered; see the Admin service's contract.
// The total is summed as the partners' GetStatement sums it
// (cmd/gtr/internal/payments), so that the two agree when every cell
// answers.
func (s *Server) GetStatement(ctx context.Context, req *adminproto.GetStatementRequest) (*adminproto.GetStatementResponse, error) {
	in, err := statementRequest(req)
	if err != nil {
		return nil, err
	}
	out := &adminproto.GetStatementResponse{PartnerId: req.GetPartnerId(), Date: req.GetDate()}
	errs, err := s.forCells(ctx, func(ids []string) {
		out.Cells = make([]*adminproto.CellStatement, len(ids))
		for i, id := range ids {
			out.Cells[i] = &adminproto.CellStatement{CellId: id}
		}
	}, func(ctx context.Context, i int, c cellproto.CellClient) error {
		resp, err := c.Statement(ctx, in)
		if err != nil {
			return err
		}
		out.Cells[i].Lines = statement.Sum(resp.GetLines())
		return nil
	})
	if err != nil {
		return nil, err
	}
	out.Complete = true
	var answered []*cellpayv1.StatementLine
	for i, e := range errs {
		if e != nil {
			out.Cells[i].Error, out.Cells[i].Lines = status.Convert(e).Message(), nil
			out.Complete = false
			continue
		}
		answered = append(answered, out.Cells[i].Lines...)
	}
	out.Total = statement.Sum(answered)
	return out, nil
}

// statementRequest checks req and makes the cells' request for its day:
// [midnight UTC, the next midnight).
func statementRequest(req *adminproto.GetStatementRequest) (*cellproto.StatementRequest, error) {
	if err := idempotency.ValidateKey(req.GetPartnerId()); err != nil {
		return nil, fieldError("partner_id", err.Error())
	}
	start, end, err := statement.Day(req.GetDate())
	if err != nil {
		return nil, fieldError("date", err.Error())
	}
	return &cellproto.StatementRequest{PartnerId: req.GetPartnerId(), StartTime: timestamppb.New(start), EndTime: timestamppb.New(end)}, nil
}
