package payments

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	hs "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/cmd/gtr/internal/cellconn"
	"github.com/cellpay/cellpay/internal/dev/testutil/grpctest"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

// listCell is a cell's List and Statement as the store answers them
// (cmd/cell/internal/store/list.go): the asked partner's records created
// in [start, end), filtered, after the position asked, in (created_at,
// transaction_id) order, at most limit.
type listCell struct {
	cellproto.UnimplementedCellServer
	txns  []*cellpayv1.Transaction // every partner's
	lines []*cellpayv1.StatementLine
	fail  bool
	lists atomic.Int32
}

func (c *listCell) List(_ context.Context, r *cellproto.ListRequest) (*cellproto.ListResponse, error) {
	c.lists.Add(1)
	if c.fail {
		return nil, status.Error(codes.Unavailable, "database down")
	}
	var out []*cellpayv1.Transaction
	for _, t := range c.txns {
		at := t.GetCreatedAt().AsTime()
		switch {
		case t.GetPartnerId() != r.GetPartnerId(),
			at.Before(r.GetStartTime().AsTime()), !at.Before(r.GetEndTime().AsTime()),
			len(r.GetStatuses()) > 0 && !slices.Contains(r.GetStatuses(), t.GetStatus()),
			len(r.GetPaymentTypes()) > 0 && !slices.Contains(r.GetPaymentTypes(), t.GetPaymentType()):
			continue
		case r.GetAfterCreatedAt() != nil && byPosition(t, r.GetAfterCreatedAt().AsTime(), r.GetAfterTransactionId()) <= 0:
			continue
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *cellpayv1.Transaction) int {
		return byPosition(a, b.GetCreatedAt().AsTime(), b.GetTransactionId())
	})
	return &cellproto.ListResponse{Transactions: out[:min(len(out), int(r.GetLimit()))]}, nil
}

func (c *listCell) Statement(_ context.Context, r *cellproto.StatementRequest) (*cellproto.StatementResponse, error) {
	if c.fail {
		return nil, status.Error(codes.Unavailable, "database down")
	}
	return &cellproto.StatementResponse{Lines: c.lines}, nil
}

// byPosition orders t against the position (at, id) of the listing.
func byPosition(t *cellpayv1.Transaction, at time.Time, id string) int {
	return cmp.Or(t.GetCreatedAt().AsTime().Compare(at), cmp.Compare(t.GetTransactionId(), id))
}

// setupList serves cells under a table holding them all and returns the
// GTR's payments server over them.
func setupList(t *testing.T, cells ...*listCell) *Server {
	t.Helper()
	spec := routing.Spec{Version: 1, Rules: []routing.Rule{{Name: "all", Pool: "p"}}}
	for i, c := range cells {
		addr := grpctest.Serve(t, func(s *grpc.Server) {
			cellproto.RegisterCellServer(s, c)
			healthpb.RegisterHealthServer(s, hs.NewServer())
		})
		spec.Cells = append(spec.Cells, routing.Cell{ID: fmt.Sprintf("c%d", i+1), Addr: addr, Pool: "p", Weight: 100})
	}
	table, err := routing.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	pool := cellconn.New()
	t.Cleanup(pool.Close)
	s, err := New(Config{Table: func() *routing.Table { return table }, Cells: pool, AttemptTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestListMergesCellsPageByPage: a partner's transactions spread over
// three cells (interleaved in time, two created at the same instant in
// different cells) are listed by pages of every size, each exactly once,
// in (created_at, transaction_id) order, with no other partner's and none
// outside the range, the last page without a next token; filters reach
// every cell; a cell that does not answer makes the page UNAVAILABLE, never
// silently short.
func TestListMergesCellsPageByPage(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	txn := func(partner, id string, sec int, st cellpayv1.TransactionStatus) *cellpayv1.Transaction {
		return &cellpayv1.Transaction{PartnerId: partner, TransactionId: id, Status: st, PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION,
			CreatedAt: timestamppb.New(t0.Add(time.Duration(sec) * time.Second))}
	}
	approved, declined := cellpayv1.TransactionStatus_APPROVED, cellpayv1.TransactionStatus_DECLINED
	cells := []*listCell{{}, {}, {}}
	var want []string // p-001's in the range, in order
	for i := range 12 {
		st := approved
		if i%4 == 3 {
			st = declined
		}
		id := fmt.Sprintf("t-%02d", i)
		cells[i%3].txns = append(cells[i%3].txns, txn("p-001", id, i, st), txn("p-002", id, i, approved))
		want = append(want, id)
	}
	// The same instant in two cells: ordered by ID.
	cells[2].txns = append(cells[2].txns, txn("p-001", "t-05a", 5, approved))
	want = slices.Insert(want, 6, "t-05a")
	// Outside the range [t0, t0+1h): before it, and at its end.
	cells[0].txns = append(cells[0].txns, txn("p-001", "early", -1, approved), txn("p-001", "late", 3600, approved))
	s := setupList(t, cells...)

	list := func(req *cellpayv1.ListTransactionsRequest) ([]string, []*cellpayv1.Transaction) {
		t.Helper()
		var ids []string
		var txns []*cellpayv1.Transaction
		for page := 0; ; page++ {
			if page > 20 {
				t.Fatalf("paging does not end: %v", ids)
			}
			resp, err := s.ListTransactions(ctx(t), req)
			if err != nil {
				t.Fatalf("page %d: %v", page, err)
			}
			if len(resp.GetTransactions()) > int(req.GetPageSize()) {
				t.Fatalf("page %d of %d, size %d", page, len(resp.GetTransactions()), req.GetPageSize())
			}
			for _, tx := range resp.GetTransactions() {
				ids = append(ids, tx.GetTransactionId())
				txns = append(txns, tx)
			}
			if resp.GetNextPageToken() == "" {
				return ids, txns
			}
			req = proto.CloneOf(req)
			req.PageToken = resp.GetNextPageToken()
		}
	}
	base := &cellpayv1.ListTransactionsRequest{PartnerId: "p-001", StartTime: timestamppb.New(t0), EndTime: timestamppb.New(t0.Add(time.Hour))}
	for _, size := range []int32{1, 2, 3, 5, 13, 100} {
		req := proto.CloneOf(base)
		req.PageSize = size
		ids, txns := list(req)
		if !slices.Equal(ids, want) {
			t.Errorf("page size %d: listed %v, want %v", size, ids, want)
		}
		for _, tx := range txns {
			if tx.GetPartnerId() != "p-001" {
				t.Errorf("page size %d: listed %s of %s", size, tx.GetTransactionId(), tx.GetPartnerId())
			}
		}
	}
	// A filter reaches every cell.
	req := proto.CloneOf(base)
	req.PageSize, req.Statuses = 2, []cellpayv1.TransactionStatus{declined}
	if ids, _ := list(req); !slices.Equal(ids, []string{"t-03", "t-07", "t-11"}) {
		t.Errorf("declined only: %v", ids)
	}
	// One cell down: no page, not a part of one.
	cells[1].fail = true
	before := cells[0].lists.Load()
	req = proto.CloneOf(base)
	req.PageSize = 3
	if resp, err := s.ListTransactions(ctx(t), req); status.Code(err) != codes.Unavailable {
		t.Fatalf("a cell down: %d transactions, %v; want UNAVAILABLE", len(resp.GetTransactions()), err)
	}
	if cells[0].lists.Load() == before {
		t.Error("the cells that answer were not asked")
	}
}

// TestStatementSumsEveryCell: a statement is every cell's lines summed by
// payment type, status and currency, to the minor unit; a cell that does
// not answer makes it UNAVAILABLE.
func TestStatementSumsEveryCell(t *testing.T) {
	line := func(pt cellpayv1.PaymentType, st cellpayv1.TransactionStatus, currency string, n, minor int64) *cellpayv1.StatementLine {
		return &cellpayv1.StatementLine{PaymentType: pt, Status: st, Currency: currency, Count: n, AmountMinorUnits: minor}
	}
	auth, capture := cellpayv1.PaymentType_CARD_AUTHORIZATION, cellpayv1.PaymentType_CAPTURE
	approved, declined := cellpayv1.TransactionStatus_APPROVED, cellpayv1.TransactionStatus_DECLINED
	cells := []*listCell{
		{lines: []*cellpayv1.StatementLine{line(auth, approved, "GBP", 2, 1250), line(capture, approved, "GBP", 1, 1000)}},
		{lines: []*cellpayv1.StatementLine{line(auth, approved, "GBP", 1, 1), line(auth, approved, "EUR", 1, 700)}},
		{lines: []*cellpayv1.StatementLine{line(auth, declined, "GBP", 3, 30), line(capture, approved, "GBP", 2, 249)}},
	}
	s := setupList(t, cells...)
	got, err := s.GetStatement(ctx(t), &cellpayv1.GetStatementRequest{PartnerId: "p-001", Date: "2026-12-07"})
	if err != nil {
		t.Fatal(err)
	}
	want := []*cellpayv1.StatementLine{
		line(auth, approved, "EUR", 1, 700), line(auth, approved, "GBP", 3, 1251), line(auth, declined, "GBP", 3, 30),
		line(capture, approved, "GBP", 3, 1249),
	}
	if got.GetPartnerId() != "p-001" || got.GetDate() != "2026-12-07" || !slices.EqualFunc(got.GetLines(), want, func(a, b *cellpayv1.StatementLine) bool { return proto.Equal(a, b) }) {
		t.Fatalf("statement %v, want lines %v", got, want)
	}
	cells[2].fail = true
	if _, err := s.GetStatement(ctx(t), &cellpayv1.GetStatementRequest{PartnerId: "p-001", Date: "2026-12-07"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("a cell down: %v, want UNAVAILABLE", err)
	}
}
