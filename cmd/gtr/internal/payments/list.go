package payments

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/cmd/gtr/internal/statement"
	"github.com/cellpay/cellpay/internal/validate"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// A partner's transactions are spread over the cells (by its keys, and by
// failovers), so a listing and a statement ask every cell: the one place
// where a fan-out is the rule. Each cell reads its (partner_id,
// created_at) index; the GTR merges.

const (
	defaultPageSize = 100
	maxPageSize     = 1000
	// maxListSpan bounds a listing's time range.
	maxListSpan = 31 * 24 * time.Hour
)

// ListTransactions implements the Payments service.
func (s *Server) ListTransactions(ctx context.Context, req *cellpayv1.ListTransactionsRequest) (*cellpayv1.ListTransactionsResponse, error) {
	if err := idempotency.ValidateKey(req.GetPartnerId()); err != nil {
		return nil, &validate.FieldError{Field: "partner_id", Reason: err.Error()}
	}
	switch {
	case req.GetStartTime() == nil:
		return nil, &validate.FieldError{Field: "start_time", Reason: "is required"}
	case req.GetEndTime() == nil:
		return nil, &validate.FieldError{Field: "end_time", Reason: "is required"}
	}
	start, end := req.GetStartTime().AsTime(), req.GetEndTime().AsTime()
	switch {
	case !start.Before(end):
		return nil, &validate.FieldError{Field: "end_time", Reason: "must be after start_time"}
	case end.Sub(start) > maxListSpan:
		return nil, &validate.FieldError{Field: "end_time", Reason: "must be at most 31 days after start_time"}
	}
	size := req.GetPageSize()
	switch {
	case size == 0:
		size = defaultPageSize
	case size < 0 || size > maxPageSize:
		return nil, &validate.FieldError{Field: "page_size", Reason: fmt.Sprintf("must be 1 to %d", maxPageSize)}
	}
	for _, st := range req.GetStatuses() {
		if _, ok := cellpayv1.TransactionStatus_name[int32(st)]; !ok || st == cellpayv1.TransactionStatus_TRANSACTION_STATUS_UNSPECIFIED {
			return nil, &validate.FieldError{Field: "statuses", Reason: fmt.Sprintf("unknown value %d", int32(st))}
		}
	}
	for _, pt := range req.GetPaymentTypes() {
		if _, ok := cellpayv1.PaymentType_name[int32(pt)]; !ok || pt == cellpayv1.PaymentType_PAYMENT_TYPE_UNSPECIFIED {
			return nil, &validate.FieldError{Field: "payment_types", Reason: fmt.Sprintf("unknown value %d", int32(pt))}
		}
	}
	in := &cellproto.ListRequest{PartnerId: req.GetPartnerId(), StartTime: req.GetStartTime(), EndTime: req.GetEndTime(),
		Statuses: req.GetStatuses(), PaymentTypes: req.GetPaymentTypes(), Limit: size}
	if tok := req.GetPageToken(); tok != "" {
		after, id, err := decodePageToken(tok)
		if err != nil {
			return nil, &validate.FieldError{Field: "page_token", Reason: err.Error()}
		}
		in.AfterCreatedAt, in.AfterTransactionId = timestamppb.New(after), id
	}
	var (
		mu   sync.Mutex
		all  []*cellpayv1.Transaction
		full bool // a cell filled its page: it may have more
	)
	err := s.allCells(ctx, "list", func(ctx context.Context, c cellproto.CellClient) error {
		resp, err := c.List(ctx, in, grpc.WaitForReady(true))
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		all = append(all, resp.GetTransactions()...)
		full = full || len(resp.GetTransactions()) == int(size)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(all, func(a, b *cellpayv1.Transaction) int {
		return cmp.Or(a.GetCreatedAt().AsTime().Compare(b.GetCreatedAt().AsTime()), cmp.Compare(a.GetTransactionId(), b.GetTransactionId()))
	})
	out := &cellpayv1.ListTransactionsResponse{Transactions: all}
	if len(all) > int(size) || full {
		out.Transactions = all[:min(len(all), int(size))]
		last := out.Transactions[len(out.Transactions)-1]
		out.NextPageToken = encodePageToken(last.GetCreatedAt().AsTime(), last.GetTransactionId())
	}
	return out, nil
}

// GetStatement implements the Payments service.
func (s *Server) GetStatement(ctx context.Context, req *cellpayv1.GetStatementRequest) (*cellpayv1.Statement, error) {
	if err := idempotency.ValidateKey(req.GetPartnerId()); err != nil {
		return nil, &validate.FieldError{Field: "partner_id", Reason: err.Error()}
	}
	start, end, err := statement.Day(req.GetDate())
	if err != nil {
		return nil, &validate.FieldError{Field: "date", Reason: err.Error()}
	}
	in := &cellproto.StatementRequest{PartnerId: req.GetPartnerId(), StartTime: timestamppb.New(start), EndTime: timestamppb.New(end)}
	var (
		mu    sync.Mutex
		lines []*cellpayv1.StatementLine
	)
	err = s.allCells(ctx, "statement", func(ctx context.Context, c cellproto.CellClient) error {
		resp, err := c.Statement(ctx, in, grpc.WaitForReady(true))
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, resp.GetLines()...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &cellpayv1.Statement{PartnerId: req.GetPartnerId(), Date: req.GetDate(), Lines: statement.Sum(lines)}, nil
}

// allCells runs fn on every cell of the table, within GetTimeout: UNAVAILABLE naming how many did not answer
// if any did not, so that what is merged is never silently partial.
func (s *Server) allCells(ctx context.Context, what string, fn func(context.Context, cellproto.CellClient) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.GetTimeout)
	defer cancel()
	table := s.cfg.Table()
	cells := table.Spec().Cells
	errs := make([]error, len(cells))
	var wg sync.WaitGroup
	for i := range cells {
		c := &cells[i]
		wg.Go(func() {
			client, err := s.cfg.Cells.Client(c, table.Balancer(c.Pool))
			if err == nil {
				err = fn(ctx, client)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	failed := 0
	var first error
	for _, err := range errs {
		if err != nil {
			failed++
			first = cmp.Or(first, err)
		}
	}
	switch {
	case failed == 0:
		return nil
	case status.Code(first) == codes.InvalidArgument:
		return first
	}
	return status.Errorf(codes.Unavailable, "%s: %d of %d cells did not answer (%v); retry", what, failed, len(cells), status.Convert(first).Message())
}

// A page token is "1" and the last listed transaction's creation time
// (Unix nanoseconds, 8 bytes big-endian) and ID, base64url: a position in
// the order, which the partner hands back. It carries nothing of anyone
// else's: the listing is the authenticated partner's whatever it says.
const pageTokenVersion = '1'

func encodePageToken(created time.Time, id string) string {
	b := make([]byte, 1+8+len(id))
	b[0] = pageTokenVersion
	binary.BigEndian.PutUint64(b[1:], uint64(created.UnixNano()))
	copy(b[9:], id)
	return base64.RawURLEncoding.EncodeToString(b)
}

var errPageToken = errors.New("not a page token of this listing (pass next_page_token as it came)")

func decodePageToken(tok string) (time.Time, string, error) {
	if len(tok) > 200 {
		return time.Time{}, "", errPageToken
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) < 10 || b[0] != pageTokenVersion {
		return time.Time{}, "", errPageToken
	}
	id := string(b[9:])
	at := time.Unix(0, int64(binary.BigEndian.Uint64(b[1:9]))).UTC()
	// Only the token as it was made: the decoder skips newlines, which
	// would make other strings name the same position.
	if idempotency.ValidateKey(id) != nil || encodePageToken(at, id) != tok {
		return time.Time{}, "", errPageToken
	}
	return at, id, nil
}
