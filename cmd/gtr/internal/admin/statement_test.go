package admin

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/cmd/gtr/internal/audit"
	"github.com/cellpay/cellpay/internal/dev/testutil/grpctest"
	"github.com/cellpay/cellpay/internal/operators"
	"github.com/cellpay/cellpay/internal/partnerstate"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

// statementCell is a Cell server that answers Statement with its lines,
// or with err when set, and keeps the last request.
type statementCell struct {
	cellproto.UnimplementedCellServer
	mu    sync.Mutex
	lines []*cellpayv1.StatementLine
	err   error
	req   *cellproto.StatementRequest
}

func (f *statementCell) Statement(_ context.Context, req *cellproto.StatementRequest) (*cellproto.StatementResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.req = req
	if f.err != nil {
		return nil, f.err
	}
	return &cellproto.StatementResponse{Lines: f.lines}, nil
}

// fail makes the cell answer err from now on.
func (f *statementCell) fail(err error) { f.mu.Lock(); f.err = err; f.mu.Unlock() }

// lastRequest is the last Statement request the cell had.
func (f *statementCell) lastRequest() *cellproto.StatementRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.req
}

// fakeCells reaches each cell of the table, by ID, at a fake cell served
// over real gRPC on loopback.
type fakeCells map[string]cellproto.CellClient

func (f fakeCells) Client(c *routing.Cell, _ routing.Balancer) (cellproto.CellClient, error) {
	client, ok := f[c.ID]
	if !ok {
		return nil, status.Errorf(codes.Unavailable, "no fake cell %s", c.ID)
	}
	return client, nil
}

// serveCells serves each fake as the cell of its ID and returns the
// clients that reach them.
func serveCells(t *testing.T, fakes map[string]*statementCell) fakeCells {
	t.Helper()
	out := fakeCells{}
	for id, f := range fakes {
		addr := grpctest.Serve(t, func(gs *grpc.Server) { cellproto.RegisterCellServer(gs, f) })
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		out[id] = cellproto.NewCellClient(conn)
	}
	return out
}

// startAsViewer serves the admin API over cells with one operator, a
// viewer, and returns its address and the viewer's token.
func startAsViewer(t *testing.T, cells Cells) (addr, tok string) {
	t.Helper()
	tok, op, err := operators.NewToken(nil, "vera", operators.RoleViewer)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := operators.Compile(&operators.File{Operators: []operators.Operator{op}}, "")
	if err != nil {
		t.Fatal(err)
	}
	al, err := audit.Open(audit.Config{Replica: "test", File: filepath.Join(t.TempDir(), "audit.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(al.Close)
	f := startServer(t, ix, al, slog.New(slog.NewTextHandler(io.Discard, nil)), partnerstate.Config{}, cells)
	return f.addr, tok
}

// statementLine is a line of a statement.
func statementLine(pt cellpayv1.PaymentType, st cellpayv1.TransactionStatus, currency string, count, amount int64) *cellpayv1.StatementLine {
	return &cellpayv1.StatementLine{PaymentType: pt, Status: st, Currency: currency, Count: count, AmountMinorUnits: amount}
}

// TestGetStatement: a viewer gets each cell's statement of the UTC day
// asked, one line per payment type, status and currency in that order
// (a cell's lines of two states with one status summed), and their total;
// a cell that does not answer is named with its error, left out of the
// total, and the answer is not complete; bad input names its field; the
// read is not audited.
func TestGetStatement(t *testing.T) {
	const (
		auth     = cellpayv1.PaymentType_CARD_AUTHORIZATION
		refund   = cellpayv1.PaymentType_CARD_REFUND
		approved = cellpayv1.TransactionStatus_APPROVED
		pending  = cellpayv1.TransactionStatus_PENDING
	)
	line := statementLine
	fakes := map[string]*statementCell{
		"cell-a": {lines: []*cellpayv1.StatementLine{
			line(auth, approved, "GBP", 2, 1500),
			line(refund, approved, "EUR", 1, 200),
			line(auth, pending, "GBP", 1, 100), // two cell states a partner sees as PENDING
			line(auth, pending, "GBP", 1, 300),
		}},
		"cell-b": {lines: []*cellpayv1.StatementLine{
			line(auth, approved, "EUR", 1, 50),
			line(auth, approved, "GBP", 3, 3000),
		}},
		"cell-c": {},
	}
	addr, tok := startAsViewer(t, serveCells(t, fakes))
	c := client(t, addr, tok)
	ctx := ctxFor(t)

	resp, err := c.GetStatement(ctx, &adminproto.GetStatementRequest{PartnerId: "p-001", Date: "2026-03-01"})
	if err != nil {
		t.Fatal(err)
	}
	wantA := []*cellpayv1.StatementLine{line(auth, approved, "GBP", 2, 1500), line(auth, pending, "GBP", 2, 400), line(refund, approved, "EUR", 1, 200)}
	wantB := []*cellpayv1.StatementLine{line(auth, approved, "EUR", 1, 50), line(auth, approved, "GBP", 3, 3000)}
	want := &adminproto.GetStatementResponse{PartnerId: "p-001", Date: "2026-03-01", Complete: true,
		Cells: []*adminproto.CellStatement{{CellId: "cell-a", Lines: wantA}, {CellId: "cell-b", Lines: wantB}, {CellId: "cell-c"}},
		Total: []*cellpayv1.StatementLine{
			line(auth, approved, "EUR", 1, 50), line(auth, approved, "GBP", 5, 4500),
			line(auth, pending, "GBP", 2, 400), line(refund, approved, "EUR", 1, 200),
		}}
	if !proto.Equal(resp, want) {
		t.Fatalf("statement:\n got %v\nwant %v", resp, want)
	}
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for id, f := range fakes {
		req := f.lastRequest()
		if req.GetPartnerId() != "p-001" || !req.GetStartTime().AsTime().Equal(day) || !req.GetEndTime().AsTime().Equal(day.Add(24*time.Hour)) {
			t.Errorf("%s was asked %v, want p-001 over the UTC day %s", id, req, day.Format(time.DateOnly))
		}
	}

	fakes["cell-b"].fail(status.Error(codes.Unavailable, "database down"))
	resp, err = c.GetStatement(ctx, &adminproto.GetStatementRequest{PartnerId: "p-001", Date: "2026-03-01"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetComplete() || resp.GetCells()[1].GetError() != "database down" || len(resp.GetCells()[1].GetLines()) != 0 ||
		resp.GetCells()[0].GetError() != "" || resp.GetCells()[2].GetError() != "" {
		t.Fatalf("cell-b down: %v", resp)
	}
	if !proto.Equal(&adminproto.GetStatementResponse{Total: resp.GetTotal()}, &adminproto.GetStatementResponse{Total: wantA}) {
		t.Fatalf("cell-b down: total %v, want cell-a's alone %v", resp.GetTotal(), wantA)
	}

	for _, bad := range []struct {
		req   *adminproto.GetStatementRequest
		field string
	}{
		{&adminproto.GetStatementRequest{Date: "2026-03-01"}, "partner_id"},
		{&adminproto.GetStatementRequest{PartnerId: "p 001", Date: "2026-03-01"}, "partner_id"},
		{&adminproto.GetStatementRequest{PartnerId: "p-001"}, "date"},
		{&adminproto.GetStatementRequest{PartnerId: "p-001", Date: "2026-02-30"}, "date"},
		{&adminproto.GetStatementRequest{PartnerId: "p-001", Date: "01/03/2026"}, "date"},
		{&adminproto.GetStatementRequest{PartnerId: "p-001", Date: "2026-03-01T00:00:00Z"}, "date"},
	} {
		_, err := c.GetStatement(ctx, bad.req)
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || !hasField(st, bad.field) {
			t.Errorf("%v: %v, want INVALID_ARGUMENT naming %s", bad.req, err, bad.field)
		}
	}

	// A viewer's refused change is in the audit log; its reads are not.
	if _, err := c.Drain(ctx, &adminproto.DrainRequest{CellId: "cell-a", Percent: 10}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("viewer Drain: %v", err)
	}
	recs, err := c.ListAudit(ctx, &adminproto.ListAuditRequest{})
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]int{}
	for _, r := range recs.GetRecords() {
		methods[r.GetMethod()]++
	}
	if methods["Drain"] != 1 || methods["GetStatement"] != 0 {
		t.Fatalf("audit log's records by method: %v, want the refused Drain and no GetStatement", methods)
	}
}
