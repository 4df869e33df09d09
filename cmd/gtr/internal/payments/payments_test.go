package payments

import (
	"context"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	hs "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/cmd/gtr/internal/admission"
	"github.com/cellpay/cellpay/cmd/gtr/internal/cellconn"
	"github.com/cellpay/cellpay/cmd/gtr/internal/health"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/dev/testutil/grpctest"
	"github.com/cellpay/cellpay/internal/retrybudget"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/routing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeCell is a Cell server over real gRPC on loopback whose behaviour per
// call is scripted by do.
type fakeCell struct {
	cellproto.UnimplementedCellServer
	id    string
	calls atomic.Int32
	mu    sync.Mutex
	seen  []*cellproto.ProcessRequest
	do    func(req *cellproto.ProcessRequest, s srv) error
	get   func(k idempotency.Key) (*cellpayv1.Transaction, error)
	// owner, if set, is the cell Find names for a transaction this cell
	// does not have (the directory's owner); gets counts Get and Find.
	owner string
	gets  atomic.Int32
	// fu, if set, answers FollowUp; fus counts FollowUp calls.
	fu  func(req *cellproto.FollowUpRequest) (*cellproto.FollowUpResponse, error)
	fus atomic.Int32
}

func (f *fakeCell) FollowUp(_ context.Context, req *cellproto.FollowUpRequest) (*cellproto.FollowUpResponse, error) {
	f.fus.Add(1)
	if f.fu == nil {
		return nil, status.Error(codes.Unimplemented, "no follow-ups here")
	}
	return f.fu(req)
}

type srv = grpc.BidiStreamingServer[cellproto.ProcessInput, cellproto.ProcessEvent]

func (f *fakeCell) Process(s srv) error {
	in, err := s.Recv()
	if err != nil {
		return err
	}
	req := in.GetStart()
	f.calls.Add(1)
	f.mu.Lock()
	f.seen = append(f.seen, req)
	f.mu.Unlock()
	return f.do(req, s)
}

// Find answers as a cell does: the record it has, else the owner.
func (f *fakeCell) Find(ctx context.Context, req *cellproto.GetRequest) (*cellproto.FindResponse, error) {
	txn, err := f.Get(ctx, req)
	switch {
	case err == nil:
		return &cellproto.FindResponse{Outcome: &cellproto.FindResponse_Result{Result: txn}}, nil
	case status.Code(err) == codes.NotFound && f.owner != "":
		return &cellproto.FindResponse{Outcome: &cellproto.FindResponse_OwnerCell{OwnerCell: f.owner}}, nil
	}
	return nil, err
}

func (f *fakeCell) Get(_ context.Context, req *cellproto.GetRequest) (*cellpayv1.Transaction, error) {
	f.gets.Add(1)
	if f.get == nil {
		return nil, status.Error(codes.NotFound, "no")
	}
	return f.get(idempotency.Key{PartnerID: req.GetPartnerId(), TransactionID: req.GetTransactionId()})
}

// serve serves f as a cell, with opts, until the test ends and returns
// its address.
func serve(t testing.TB, f *fakeCell, opts ...grpc.ServerOption) string {
	t.Helper()
	return grpctest.Serve(t, func(s *grpc.Server) {
		cellproto.RegisterCellServer(s, f)
		// A health service answering SERVING, as a cell's does: without
		// one the GTR's client logs an error for every connection, which
		// broke the benchmarks' result lines in two (make bench-hops).
		healthpb.RegisterHealthServer(s, hs.NewServer())
	}, opts...)
}

// pnr runs the cell's side of the point-of-no-return handshake.
// pnr is a cell's point of no return as the real cell does it: the PNR,
// the GTR's Proceed, then Proceeding before it would call the issuer.
func pnr(s srv) error {
	if err := pnrUnsaid(s); err != nil {
		return err
	}
	return s.Send(&cellproto.ProcessEvent{Event: &cellproto.ProcessEvent_Proceeding{Proceeding: &cellproto.Proceeding{}}})
}

// pnrUnsaid is pnr without the Proceeding: a cell whose Proceed came
// after it stopped waiting, or whose stream breaks before it says it.
func pnrUnsaid(s srv) error {
	if err := s.Send(&cellproto.ProcessEvent{Event: &cellproto.ProcessEvent_PointOfNoReturn{PointOfNoReturn: &cellproto.PointOfNoReturn{}}}); err != nil {
		return err
	}
	in, err := s.Recv()
	if err != nil {
		return err
	}
	if in.GetProceed() == nil {
		return status.Error(codes.FailedPrecondition, "expected Proceed")
	}
	return nil
}

func approve(req *cellproto.ProcessRequest, s srv, cell string) error {
	if err := pnr(s); err != nil {
		return err
	}
	return s.Send(&cellproto.ProcessEvent{Event: &cellproto.ProcessEvent_Result{Result: &cellpayv1.Transaction{
		TransactionId: req.Request.TransactionId, Status: cellpayv1.TransactionStatus_APPROVED, CellId: cell, Attempts: req.Attempt,
	}}})
}

func reroutable(s srv) error {
	return s.Send(&cellproto.ProcessEvent{Event: &cellproto.ProcessEvent_Reroutable{Reroutable: &cellproto.Reroutable{Reason: "db down"}}})
}

// setup serves the fakes and a table ranking them in the given order for
// partner p-001 (weights and hashing put aside: one cell per pool would not
// rank, so the order is found by routing and the fakes assigned to it).
func setup(t testing.TB, fakes ...*fakeCell) (*Server, []*fakeCell) {
	t.Helper()
	spec := routing.Spec{Version: 1, Rules: []routing.Rule{{Name: "all", Pool: "p"}}}
	ids := []string{"c1", "c2", "c3"}[:len(fakes)]
	for _, id := range ids {
		spec.Cells = append(spec.Cells, routing.Cell{ID: id, Addr: "127.0.0.1:1", Pool: "p", Weight: 100})
	}
	table, err := routing.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	res, err := table.Route(&routing.Attrs{PartnerID: "p-001", Market: "GB", PaymentType: "CARD_AUTHORIZATION"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The i-th fake takes the i-th place of the ranking.
	for i, ch := range res.Ranked {
		fakes[i].id = ch.Cell.ID
		for j := range spec.Cells {
			if spec.Cells[j].ID == ch.Cell.ID {
				spec.Cells[j].Addr = serve(t, fakes[i])
			}
		}
	}
	if table, err = routing.Compile(spec); err != nil {
		t.Fatal(err)
	}
	pool := cellconn.New()
	t.Cleanup(pool.Close)
	s, err := New(Config{Table: func() *routing.Table { return table }, Cells: pool, AttemptTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s, fakes
}

func req(id string) *cellpayv1.SubmitTransactionRequest {
	return &cellpayv1.SubmitTransactionRequest{
		TransactionId: id, PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION, PartnerId: "p-001", Market: "GB",
		Amount:   &cellpayv1.Money{MinorUnits: 100, Currency: "GBP"},
		Merchant: &cellpayv1.Merchant{Id: "m", Mcc: "5411", Country: "GB"},
		Card:     &cellpayv1.Card{Pan: "4242424242424242", ExpiryMonth: 12, ExpiryYear: 2030},
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestForwardsToFirstCell(t *testing.T) {
	a := &fakeCell{}
	a.do = func(r *cellproto.ProcessRequest, s srv) error {
		return approve(r, s, a.id)
	}
	b := &fakeCell{do: func(*cellproto.ProcessRequest, srv) error { return nil }}
	s, _ := setup(t, a, b)
	got, err := s.SubmitTransaction(ctx(t), req("t-1"))
	if err != nil || got.GetStatus() != cellpayv1.TransactionStatus_APPROVED || got.GetCellId() != a.id {
		t.Fatalf("got %v, %v", got, err)
	}
	if a.seen[0].GetAttempt() != 1 || a.seen[0].GetRouteRule() != "all" || b.calls.Load() != 0 {
		t.Fatalf("attempt %d rule %q; second cell called %d times", a.seen[0].GetAttempt(), a.seen[0].GetRouteRule(), b.calls.Load())
	}
}

func TestReroutesBeforePNR(t *testing.T) {
	cases := map[string]func(srv) error{
		"reroutable": reroutable,
		"unavailable": func(srv) error {
			return status.Error(codes.Unavailable, "down")
		},
		"hang": func(s srv) error {
			<-s.Context().Done() // the GTR's attempt timeout must cancel this
			return s.Context().Err()
		},
		"closed without outcome": func(srv) error { return nil },
	}
	for name, first := range cases {
		t.Run(name, func(t *testing.T) {
			a := &fakeCell{do: func(_ *cellproto.ProcessRequest, s srv) error {
				return first(s)
			}}
			b := &fakeCell{}
			b.do = func(r *cellproto.ProcessRequest, s srv) error {
				return approve(r, s, b.id)
			}
			s, _ := setup(t, a, b)
			got, err := s.SubmitTransaction(ctx(t), req("t-"+name[:4]))
			if err != nil || got.GetCellId() != b.id || got.GetAttempts() != 2 {
				t.Fatalf("got %v, %v; want approved by the second cell on attempt 2", got, err)
			}
			if b.seen[0].GetRequest().GetTransactionId() != "t-"+name[:4] {
				t.Fatal("the restart did not keep the transaction ID")
			}
		})
	}
}

func TestUnreachableCellIsSkipped(t *testing.T) {
	a := &fakeCell{do: func(*cellproto.ProcessRequest, srv) error { return nil }}
	b := &fakeCell{}
	b.do = func(r *cellproto.ProcessRequest, s srv) error {
		return approve(r, s, b.id)
	}
	s, _ := setup(t, a, b)
	// Point the first cell at a port nobody listens on.
	spec := s.cfg.Table().Spec()
	for i := range spec.Cells {
		if spec.Cells[i].ID == a.id {
			l, _ := net.Listen("tcp", "127.0.0.1:0")
			spec.Cells[i].Addr = l.Addr().String()
			l.Close()
		}
	}
	table, _ := routing.Compile(spec)
	s.cfg.Table = func() *routing.Table { return table }
	got, err := s.SubmitTransaction(ctx(t), req("t-unreach"))
	if err != nil || got.GetCellId() != b.id {
		t.Fatalf("got %v, %v", got, err)
	}
}

// TestNoRerouteAfterPNR: a cell that announced its point of no return and
// then went away owns the transaction: PENDING, and no other cell is asked.
func TestNoRerouteAfterPNR(t *testing.T) {
	cases := map[string]func(*cellproto.ProcessRequest, srv) error{
		"stream breaks": func(r *cellproto.ProcessRequest, s srv) error {
			if err := pnr(s); err != nil {
				return err
			}
			return status.Error(codes.Unavailable, "crashed")
		},
		"reroutable after pnr": func(r *cellproto.ProcessRequest, s srv) error {
			if err := pnr(s); err != nil {
				return err
			}
			return reroutable(s)
		},
		"slow after pnr": func(r *cellproto.ProcessRequest, s srv) error {
			if err := pnr(s); err != nil {
				return err
			}
			time.Sleep(600 * time.Millisecond) // longer than the attempt timeout: past the PNR it must not apply
			return s.Send(&cellproto.ProcessEvent{Event: &cellproto.ProcessEvent_Result{Result: &cellpayv1.Transaction{
				TransactionId: r.Request.TransactionId, Status: cellpayv1.TransactionStatus_APPROVED, CellId: "slow"}}})
		},
	}
	for name, first := range cases {
		t.Run(name, func(t *testing.T) {
			a := &fakeCell{do: first}
			b := &fakeCell{}
			b.do = func(r *cellproto.ProcessRequest, s srv) error {
				return approve(r, s, b.id)
			}
			s, _ := setup(t, a, b)
			got, err := s.SubmitTransaction(ctx(t), req("t-pnr"))
			if err != nil {
				t.Fatal(err)
			}
			if b.calls.Load() != 0 {
				t.Fatalf("re-routed after the point of no return")
			}
			if name == "slow after pnr" {
				if got.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
					t.Fatalf("slow cell's answer lost: %v", got)
				}
				return
			}
			if got.GetStatus() != cellpayv1.TransactionStatus_PENDING || got.GetCellId() != a.id {
				t.Fatalf("got %v, want PENDING from %s", got, a.id)
			}
		})
	}
}

// TestProceedNotTaken: Proceed was sent but the cell never said
// Proceeding. A cell that then says re-routable stepped back without
// calling the issuer (the Proceed came after its wait ended): the
// transaction goes on to the next cell. A stream that just ends leaves the
// outcome unknown: UNAVAILABLE, retry with the same ID; never a PENDING
// that no one may resolve, and never a re-route.
func TestProceedNotTaken(t *testing.T) {
	t.Run("re-routable", func(t *testing.T) {
		a := &fakeCell{do: func(r *cellproto.ProcessRequest, s srv) error {
			if err := pnrUnsaid(s); err != nil {
				return err
			}
			return reroutable(s)
		}}
		b := &fakeCell{}
		b.do = func(r *cellproto.ProcessRequest, s srv) error { return approve(r, s, b.id) }
		s, _ := setup(t, a, b)
		got, err := s.SubmitTransaction(ctx(t), req("t-late-proceed"))
		if err != nil || got.GetStatus() != cellpayv1.TransactionStatus_APPROVED || got.GetCellId() != b.id {
			t.Fatalf("got %v, %v; want APPROVED from %s", got, err, b.id)
		}
	})
	t.Run("stream ends", func(t *testing.T) {
		a := &fakeCell{do: func(r *cellproto.ProcessRequest, s srv) error {
			if err := pnrUnsaid(s); err != nil {
				return err
			}
			return status.Error(codes.Unavailable, "crashed")
		}}
		b := &fakeCell{}
		b.do = func(r *cellproto.ProcessRequest, s srv) error { return approve(r, s, b.id) }
		s, _ := setup(t, a, b)
		got, err := s.SubmitTransaction(ctx(t), req("t-unsaid"))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("got %v, %v; want UNAVAILABLE", got, err)
		}
		if b.calls.Load() != 0 {
			t.Fatal("re-routed a transaction its cell may be sending")
		}
	})
}

func TestCellAnswersAboutTheRequestArePassedOn(t *testing.T) {
	for _, code := range []codes.Code{codes.AlreadyExists, codes.InvalidArgument, codes.Aborted} {
		a := &fakeCell{do: func(*cellproto.ProcessRequest, srv) error {
			return status.Error(code, "no")
		}}
		b := &fakeCell{do: func(*cellproto.ProcessRequest, srv) error { return nil }}
		s, _ := setup(t, a, b)
		if _, err := s.SubmitTransaction(ctx(t), req("t-code")); status.Code(err) != code {
			t.Fatalf("err = %v, want %v", err, code)
		}
		if b.calls.Load() != 0 {
			t.Fatalf("%v: tried another cell", code)
		}
	}
}

func TestAllCellsFail(t *testing.T) {
	fail := func(*cellproto.ProcessRequest, srv) error {
		return status.Error(codes.Unavailable, "down")
	}
	s, fakes := setup(t, &fakeCell{do: fail}, &fakeCell{do: fail}, &fakeCell{do: fail})
	s.cfg.MaxAttempts = 2
	if _, err := s.SubmitTransaction(ctx(t), req("t-all")); status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v, want Unavailable", err)
	}
	if fakes[2].calls.Load() != 0 {
		t.Fatal("tried more cells than MaxAttempts")
	}
}

func TestValidatesBeforeRouting(t *testing.T) {
	a := &fakeCell{do: func(*cellproto.ProcessRequest, srv) error { return nil }}
	s, _ := setup(t, a)
	r := req("t-bad")
	r.Amount.MinorUnits = 0
	if _, err := s.SubmitTransaction(ctx(t), r); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("err = %v", err)
	}
	if a.calls.Load() != 0 {
		t.Fatal("an invalid request reached a cell")
	}
}

func TestGetTransaction(t *testing.T) {
	b := &fakeCell{get: func(k idempotency.Key) (*cellpayv1.Transaction, error) {
		return &cellpayv1.Transaction{TransactionId: k.TransactionID, PartnerId: k.PartnerID, Status: cellpayv1.TransactionStatus_APPROVED}, nil
	}}
	s, _ := setup(t, &fakeCell{}, b, &fakeCell{})
	got, err := s.GetTransaction(ctx(t), &cellpayv1.GetTransactionRequest{PartnerId: "p-001", TransactionId: "t-1"})
	if err != nil || got.GetStatus() != cellpayv1.TransactionStatus_APPROVED || got.GetPartnerId() != "p-001" {
		t.Fatalf("got %v, %v; want p-001's record from the cell that has it", got, err)
	}
	s2, _ := setup(t, &fakeCell{}, &fakeCell{})
	if _, err := s2.GetTransaction(ctx(t), &cellpayv1.GetTransactionRequest{PartnerId: "p-001", TransactionId: "t-2"}); status.Code(err) != codes.NotFound {
		t.Fatalf("err = %v, want NotFound", err)
	}
	for _, bad := range []struct {
		req   *cellpayv1.GetTransactionRequest
		field string
	}{
		{&cellpayv1.GetTransactionRequest{PartnerId: "p-001", TransactionId: "bad id"}, "transaction_id"},
		{&cellpayv1.GetTransactionRequest{TransactionId: "t-1"}, "partner_id"},
		{&cellpayv1.GetTransactionRequest{PartnerId: "p 1", TransactionId: "t-1"}, "partner_id"},
	} {
		_, err := s2.GetTransaction(ctx(t), bad.req)
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), bad.field+":") {
			t.Fatalf("GetTransaction(%v) = %v, want InvalidArgument naming %s", bad.req, err, bad.field)
		}
	}
}

// TestReadGoesWhereTheTransactionIs: a read asks the transaction's home
// first; a home that does not hold it names the owner, asked next; no
// other cell is asked. Only a transaction the directory does not place is
// read by a fan-out. Each way is counted.
func TestReadGoesWhereTheTransactionIs(t *testing.T) {
	record := func(k idempotency.Key) (*cellpayv1.Transaction, error) {
		return &cellpayv1.Transaction{TransactionId: k.TransactionID, PartnerId: k.PartnerID, Status: cellpayv1.TransactionStatus_APPROVED}, nil
	}
	var mu sync.Mutex
	asked := map[string]int{} // of the owner and the other cell, by ID
	counting := func(answer func(idempotency.Key) (*cellpayv1.Transaction, error)) func(idempotency.Key) (*cellpayv1.Transaction, error) {
		return func(k idempotency.Key) (*cellpayv1.Transaction, error) {
			mu.Lock()
			asked[k.TransactionID]++
			mu.Unlock()
			return answer(k)
		}
	}
	notFound := func(idempotency.Key) (*cellpayv1.Transaction, error) { return nil, status.Error(codes.NotFound, "no") }
	home, owner, other := &fakeCell{}, &fakeCell{get: counting(record)}, &fakeCell{get: counting(notFound)}
	s, _ := setup(t, home, owner, other)
	obs := &locations{located: map[string]int{}}
	s.cfg.Metrics = obs
	read := func(id string) {
		t.Helper()
		if _, err := s.GetTransaction(ctx(t), &cellpayv1.GetTransactionRequest{PartnerId: "p-001", TransactionId: id}); err != nil {
			t.Fatal(err)
		}
	}
	// Unknown to the directory: every cell is asked.
	read("t-1")
	home.owner = owner.id // the directory places t-2 and t-3 at the owner
	read("t-2")
	home.get = record // the home holds t-3
	read("t-3")
	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{"read/fanout": 1, "read/owner": 1, "read/first": 1}
	if !maps.Equal(obs.located, want) || asked["t-2"] != 1 || asked["t-3"] != 0 {
		t.Fatalf("located %v, want %v; t-2 asked of the owner and the other cell %d times (want 1: the owner), t-3 %d (want 0: the home has it)",
			obs.located, want, asked["t-2"], asked["t-3"])
	}
}

// locations is a Metrics that counts Located by "op/how".
type locations struct {
	mu      sync.Mutex
	located map[string]int
}

func (l *locations) Rerouted(string, error, bool)            {}
func (l *locations) Shed(string)                             {}
func (l *locations) Done(*cellpayv1.Transaction, error, int) {}
func (l *locations) Across(string, string)                   {}
func (l *locations) Located(op, how string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.located[op+"/"+how]++
}

// TestGetTransactionAnswersWithoutWaitingForAHungCell: the record of the
// cell that has it is the answer at once; a cell that does not answer
// (hung here for a minute, the fan-out's bound) is not waited out.
func TestGetTransactionAnswersWithoutWaitingForAHungCell(t *testing.T) {
	release := make(chan struct{})
	hung := &fakeCell{get: func(idempotency.Key) (*cellpayv1.Transaction, error) {
		<-release
		return nil, status.Error(codes.NotFound, "no")
	}}
	owner := &fakeCell{get: func(k idempotency.Key) (*cellpayv1.Transaction, error) {
		return &cellpayv1.Transaction{TransactionId: k.TransactionID, PartnerId: k.PartnerID, Status: cellpayv1.TransactionStatus_PENDING}, nil
	}}
	s, _ := setup(t, hung, owner)
	t.Cleanup(func() { close(release) }) // before the servers stop (cleanups run last first)
	s.cfg.GetTimeout = time.Minute
	type result struct {
		txn *cellpayv1.Transaction
		err error
	}
	done := make(chan result, 1)
	go func() {
		txn, err := s.GetTransaction(context.Background(), &cellpayv1.GetTransactionRequest{PartnerId: "p-001", TransactionId: "t-1"})
		done <- result{txn, err}
	}()
	select {
	case r := <-done:
		if r.err != nil || r.txn.GetStatus() != cellpayv1.TransactionStatus_PENDING {
			t.Fatalf("got %v, %v; want the owner's PENDING record", r.txn, r.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("GetTransaction waited for a cell that does not answer although another had the record")
	}
}

// TestGetTransactionWaitsForARestartingCell: a cell whose server is down
// when the read starts (restarting; its connection refused and backing
// off) and back within the fan-out's bound is waited for, so its record
// is found instead of the read failing UNAVAILABLE at once; one that stays
// down makes the read UNAVAILABLE, never NOT_FOUND.
func TestGetTransactionWaitsForARestartingCell(t *testing.T) {
	owner := &fakeCell{get: func(k idempotency.Key) (*cellpayv1.Transaction, error) {
		return &cellpayv1.Transaction{TransactionId: k.TransactionID, PartnerId: k.PartnerID, Status: cellpayv1.TransactionStatus_APPROVED}, nil
	}}
	s, _ := setup(t, &fakeCell{}, &fakeCell{})
	// The second cell's address has nothing listening until the owner is
	// served there.
	ports, err := testutil.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	spec := s.cfg.Table().Spec()
	spec.Cells[1].Addr = addr
	table, err := routing.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	s.cfg.Table = func() *routing.Table { return table }
	s.cfg.GetTimeout = 500 * time.Millisecond
	read := func() (*cellpayv1.Transaction, error) {
		return s.GetTransaction(ctx(t), &cellpayv1.GetTransactionRequest{PartnerId: "p-001", TransactionId: "t-1"})
	}
	if _, err := read(); status.Code(err) != codes.Unavailable {
		t.Fatalf("with a cell down throughout: %v, want UNAVAILABLE", err)
	}
	s.cfg.GetTimeout = 20 * time.Second
	go func() {
		time.Sleep(300 * time.Millisecond)
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("the restarted cell's listener: %v", err)
			return
		}
		srv := grpc.NewServer()
		cellproto.RegisterCellServer(srv, owner)
		t.Cleanup(srv.Stop)
		go srv.Serve(lis)
	}()
	got, err := read()
	if err != nil || got.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
		t.Fatalf("with the cell back within the bound: %v, %v; want its record", got, err)
	}
}

// TestGetTransactionIsPerPartner: the cells are asked for the caller's
// partner and ID, and another partner's transaction with the same ID is
// NOT_FOUND, answered exactly as an ID that was never used.
func TestGetTransactionIsPerPartner(t *testing.T) {
	owned := idempotency.Key{PartnerID: "p-001", TransactionID: "t-1"}
	var mu sync.Mutex
	var asked []idempotency.Key
	get := func(k idempotency.Key) (*cellpayv1.Transaction, error) {
		mu.Lock()
		asked = append(asked, k)
		mu.Unlock()
		if k != owned {
			return nil, status.Error(codes.NotFound, "transaction not found")
		}
		return &cellpayv1.Transaction{TransactionId: k.TransactionID, PartnerId: k.PartnerID, Status: cellpayv1.TransactionStatus_APPROVED}, nil
	}
	s, _ := setup(t, &fakeCell{get: get}, &fakeCell{get: get}, &fakeCell{get: get})
	if got, err := s.GetTransaction(ctx(t), &cellpayv1.GetTransactionRequest{PartnerId: "p-001", TransactionId: "t-1"}); err != nil || got.GetPartnerId() != "p-001" {
		t.Fatalf("the owner's read: %v, %v", got, err)
	}
	_, other := s.GetTransaction(ctx(t), &cellpayv1.GetTransactionRequest{PartnerId: "p-002", TransactionId: "t-1"})
	_, never := s.GetTransaction(ctx(t), &cellpayv1.GetTransactionRequest{PartnerId: "p-002", TransactionId: "t-never"})
	if status.Code(other) != codes.NotFound || status.Convert(other).Message() != status.Convert(never).Message() ||
		len(status.Convert(other).Details()) != len(status.Convert(never).Details()) {
		t.Fatalf("another partner's ID: %v; an ID never used: %v; want the same NOT_FOUND", other, never)
	}
	mu.Lock()
	defer mu.Unlock()
	count := map[idempotency.Key]int{}
	for _, k := range asked {
		count[k]++
	}
	// The owner's read ends at the first record found, so the cells its
	// fan-out reached before that answer were asked it (one to three).
	if n := count[owned]; n < 1 || n > 3 {
		t.Fatalf("the owner's read was asked of %d cells, want 1 to 3", n)
	}
	delete(count, owned)
	// A NOT_FOUND read asks the first cell (which finds no record, and no
	// directory entry), then every cell.
	want := map[idempotency.Key]int{{PartnerID: "p-002", TransactionID: "t-1"}: 4, {PartnerID: "p-002", TransactionID: "t-never"}: 4}
	if !maps.Equal(count, want) {
		t.Fatalf("cells were asked for %v, want each NOT_FOUND read's partner and ID from the first cell, then every cell: %v", count, want)
	}
}

// TestCoalescesConcurrentDuplicates: concurrent copies of one ID and
// payload share a single processing; another payload is not coalesced.
func TestCoalescesConcurrentDuplicates(t *testing.T) {
	release := make(chan struct{})
	a := &fakeCell{}
	a.do = func(r *cellproto.ProcessRequest, s srv) error {
		<-release
		return approve(r, s, a.id)
	}
	s, _ := setup(t, a)
	s.cfg.AttemptTimeout = 5 * time.Second
	var wg sync.WaitGroup
	answers := make([]*cellpayv1.Transaction, 20)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], _ = s.SubmitTransaction(ctx(t), req("t-dup"))
		}()
	}
	other := req("t-dup")
	other.Amount.MinorUnits = 999
	wg.Add(1)
	go func() { defer wg.Done(); _, _ = s.SubmitTransaction(ctx(t), other) }()
	time.Sleep(200 * time.Millisecond)
	close(release)
	wg.Wait()
	if got := a.calls.Load(); got != 2 {
		t.Fatalf("cell saw %d attempts, want 2 (one per distinct payload)", got)
	}
	for _, ans := range answers {
		if ans.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
			t.Fatalf("a coalesced caller got %v", ans)
		}
	}
}

// TestReplayAfterRerouteGoesToCompletingCell: the first cell failed, the
// second completed; a replay goes to the second first.
func TestReplayAfterRerouteGoesToCompletingCell(t *testing.T) {
	failing := true
	a := &fakeCell{}
	a.do = func(r *cellproto.ProcessRequest, s srv) error {
		if failing {
			return reroutable(s)
		}
		return approve(r, s, a.id)
	}
	b := &fakeCell{}
	b.do = func(r *cellproto.ProcessRequest, s srv) error {
		return approve(r, s, b.id)
	}
	s, _ := setup(t, a, b)
	if got, err := s.SubmitTransaction(ctx(t), req("t-moved")); err != nil || got.GetCellId() != b.id {
		t.Fatalf("first: %v, %v", got, err)
	}
	failing = false
	got, err := s.SubmitTransaction(ctx(t), req("t-moved"))
	if err != nil || got.GetCellId() != b.id || a.calls.Load() != 1 || b.calls.Load() != 2 {
		t.Fatalf("replay: %v, %v; calls a=%d b=%d", got, err, a.calls.Load(), b.calls.Load())
	}
	// Another payload under the remembered ID is a conflict, even though
	// the first cell never saw the ID.
	other := req("t-moved")
	other.Amount.MinorUnits++
	if _, err := s.SubmitTransaction(ctx(t), other); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("other payload: %v, want AlreadyExists", err)
	}
	// Other transactions still start on their first choice.
	if got, _ := s.SubmitTransaction(ctx(t), req("t-fresh")); got.GetCellId() != a.id {
		t.Fatalf("fresh transaction went to %s", got.GetCellId())
	}
	// Another partner's transaction with the remembered ID is another
	// transaction: neither a conflict nor sent after p-001's.
	theirs := req("t-moved")
	theirs.PartnerId, theirs.Amount.MinorUnits = "p-002", 4242
	if got, err := s.SubmitTransaction(ctx(t), theirs); err != nil || got.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
		t.Fatalf("p-002's t-moved: %v, %v; want its own approval", got, err)
	}
	if s.moved.n.Load() != 1 {
		t.Fatalf("moved cache holds %d entries, want p-001's alone", s.moved.n.Load())
	}
	if got, err := s.SubmitTransaction(ctx(t), req("t-moved")); err != nil || got.GetCellId() != b.id {
		t.Fatalf("p-001's replay after p-002's: %v, %v", got, err)
	}
}

// TestMovedCacheIsPerPartner: the cache keys by (partner, ID), so another
// partner's transaction with a remembered ID is neither promoted nor a
// conflict.
func TestMovedCacheIsPerPartner(t *testing.T) {
	m := newMovedCache(2)
	fp := idempotency.NewFingerprinter([]byte("k"))
	mine, theirs := req("t-1"), req("t-1")
	theirs.PartnerId, theirs.Amount.MinorUnits = "p-002", 999
	m.remember(idempotency.KeyOf(mine), "c2", fp.Of(mine))
	ranked := func() []routing.Choice {
		return []routing.Choice{{Cell: &routing.Cell{ID: "c1"}}, {Cell: &routing.Cell{ID: "c2"}}}
	}
	got, err := m.promote(idempotency.KeyOf(theirs), fp.Of(theirs), ranked())
	if err != nil || got[0].Cell.ID != "c1" {
		t.Fatalf("another partner's t-1: %v, %v; want its own ranking, no conflict", got, err)
	}
	got, err = m.promote(idempotency.KeyOf(mine), fp.Of(mine), ranked())
	if err != nil || got[0].Cell.ID != "c2" {
		t.Fatalf("p-001's t-1: %v, %v; want the remembered cell first", got, err)
	}
	other := req("t-1")
	other.Amount.MinorUnits++
	if _, err := m.promote(idempotency.KeyOf(other), fp.Of(other), ranked()); err == nil {
		t.Fatal("p-001's t-1 with another payload: no conflict")
	}
	// The ring evicts by key: two more entries push p-001's t-1 out.
	m.remember(idempotency.Key{PartnerID: "p-002", TransactionID: "t-1"}, "c1", fp.Of(theirs))
	m.remember(idempotency.Key{PartnerID: "p-003", TransactionID: "t-1"}, "c1", fp.Of(theirs))
	if got, err := m.promote(idempotency.KeyOf(mine), fp.Of(mine), ranked()); err != nil || got[0].Cell.ID != "c1" || m.n.Load() != 2 {
		t.Fatalf("after eviction: %v, %v, %d entries", got, err, m.n.Load())
	}
}

// TestCoalescesPerPartner: concurrent requests of two partners with one
// transaction ID are two transactions, never one shared processing.
func TestCoalescesPerPartner(t *testing.T) {
	release := make(chan struct{})
	a := &fakeCell{}
	a.do = func(r *cellproto.ProcessRequest, s srv) error {
		<-release
		return approve(r, s, a.id)
	}
	b := &fakeCell{}
	b.do = func(r *cellproto.ProcessRequest, s srv) error {
		<-release
		return approve(r, s, b.id)
	}
	s, _ := setup(t, a, b)
	s.cfg.AttemptTimeout = 5 * time.Second
	var wg sync.WaitGroup
	answers := make([]*cellpayv1.Transaction, 10)
	errs := make([]error, len(answers))
	for i := range answers {
		r := req("t-same")
		r.PartnerId = fmt.Sprintf("p-%03d", 1+i%2)
		wg.Go(func() { answers[i], errs[i] = s.SubmitTransaction(ctx(t), r) })
	}
	time.Sleep(200 * time.Millisecond)
	close(release)
	wg.Wait()
	if got := a.calls.Load() + b.calls.Load(); got != 2 {
		t.Fatalf("cells saw %d attempts, want 2 (one per partner)", got)
	}
	for i, ans := range answers {
		if errs[i] != nil || ans.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
			t.Fatalf("caller %d got %v, %v", i, ans, errs[i])
		}
	}
}

func TestLastResortFlagAndHealthObservations(t *testing.T) {
	a := &fakeCell{do: func(_ *cellproto.ProcessRequest, s srv) error {
		return reroutable(s)
	}}
	b := &fakeCell{do: func(_ *cellproto.ProcessRequest, s srv) error {
		return s.Send(&cellproto.ProcessEvent{Event: &cellproto.ProcessEvent_Reroutable{Reroutable: &cellproto.Reroutable{Reason: "abandoned", CellHealthy: true}}})
	}}
	c := &fakeCell{}
	c.do = func(r *cellproto.ProcessRequest, s srv) error {
		return approve(r, s, c.id)
	}
	s, _ := setup(t, a, b, c)
	obs := &observer{}
	s.cfg.Health = obs
	if _, err := s.SubmitTransaction(ctx(t), req("t-last")); err != nil {
		t.Fatal(err)
	}
	if a.seen[0].GetLastResort() || b.seen[0].GetLastResort() || !c.seen[0].GetLastResort() {
		t.Fatal("last_resort must be set on the last attempt only")
	}
	// Each attempt says how long the GTR waits for it (the setup's
	// attempt timeout), so that a cell waiting on another attempt answers
	// within it.
	for _, f := range []*fakeCell{a, b, c} {
		if got := f.seen[0].GetAttemptBudgetMs(); got != uint32(s.cfg.AttemptTimeout.Milliseconds()) {
			t.Fatalf("%s was told a budget of %d ms, want %v", f.id, got, s.cfg.AttemptTimeout)
		}
	}
	want := []string{a.id + "=failed", b.id + "=answered", c.id + "=answered"}
	if strings.Join(obs.seen, ",") != strings.Join(want, ",") {
		t.Fatalf("health observations %v, want %v", obs.seen, want)
	}
}

type observer struct {
	mu   sync.Mutex
	seen []string
}

func (o *observer) Record(id string, out health.Outcome) {
	o.mu.Lock()
	o.seen = append(o.seen, id+"="+[...]string{health.Answered: "answered", health.Failed: "failed", health.TimedOut: "timed-out"}[out])
	o.mu.Unlock()
}

// TestRetryBudget: with the budget spent, a failed first attempt is not
// re-routed, and the call says so.
func TestRetryBudget(t *testing.T) {
	a := &fakeCell{do: func(_ *cellproto.ProcessRequest, s srv) error {
		return reroutable(s)
	}}
	b := &fakeCell{}
	b.do = func(r *cellproto.ProcessRequest, s srv) error {
		return approve(r, s, b.id)
	}
	s, _ := setup(t, a, b)
	s.retries = retrybudget.New(0, 0, nil) // others have spent it
	_, err := s.SubmitTransaction(ctx(t), req("t-budget"))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "retry budget") {
		t.Fatalf("err = %v, want Unavailable, retry budget exhausted", err)
	}
	if b.calls.Load() != 0 {
		t.Fatal("re-routed beyond the budget")
	}
	s.retries = retrybudget.New(0.2, 3, nil)
	if _, err := s.SubmitTransaction(ctx(t), req("t-budget2")); err != nil {
		t.Fatal(err)
	}
	if s.inflight.Load() != 0 {
		t.Fatalf("counter leaked: inflight %d", s.inflight.Load())
	}
}

// TestNoAttemptWithoutTime: an attempt that cannot finish in time does not
// start.
func TestNoAttemptWithoutTime(t *testing.T) {
	a := &fakeCell{do: func(_ *cellproto.ProcessRequest, s srv) error {
		time.Sleep(150 * time.Millisecond)
		return reroutable(s)
	}}
	b := &fakeCell{do: func(*cellproto.ProcessRequest, srv) error { return nil }}
	s, _ := setup(t, a, b)
	c, cancel := context.WithTimeout(context.Background(), 180*time.Millisecond)
	defer cancel()
	if _, err := s.SubmitTransaction(c, req("t-late")); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if b.calls.Load() != 0 {
		t.Fatal("started an attempt with no time to finish it")
	}
}

// TestStreamOutlivesCallerAfterPNR: once the GTR has said Proceed, a caller
// whose deadline passes gets an answer without the cell's stream being cut:
// a cancellation could overtake the Proceed, and the cell would step back
// from a point of no return the GTR promised.
func TestStreamOutlivesCallerAfterPNR(t *testing.T) {
	alive := make(chan bool, 1)
	a := &fakeCell{}
	a.do = func(r *cellproto.ProcessRequest, s srv) error {
		if err := pnr(s); err != nil {
			alive <- false
			return err
		}
		time.Sleep(400 * time.Millisecond) // the caller's 200ms deadline passes here
		alive <- s.Context().Err() == nil
		return approve2(r, s, a.id)
	}
	s, _ := setup(t, a)
	c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	// The caller's deadline and the PENDING answer come at the same
	// moment: either is right.
	got, err := s.SubmitTransaction(c, req("t-outlive"))
	if status.Code(err) != codes.DeadlineExceeded && got.GetStatus() != cellpayv1.TransactionStatus_PENDING {
		t.Fatalf("got %v, %v; want PENDING or DeadlineExceeded for the caller", got, err)
	}
	select {
	case ok := <-alive:
		if !ok {
			t.Fatal("the cell's stream was cancelled after Proceed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cell never answered")
	}
}

// approve2 sends the result alone (the PNR handshake already happened).
func approve2(req *cellproto.ProcessRequest, s srv, cell string) error {
	return s.Send(&cellproto.ProcessEvent{Event: &cellproto.ProcessEvent_Result{Result: &cellpayv1.Transaction{
		TransactionId: req.Request.TransactionId, Status: cellpayv1.TransactionStatus_APPROVED, CellId: cell, Attempts: req.Attempt,
	}}})
}

// TestCallerWhoLeavesBlamesNoCell: a caller whose deadline passes before
// the point of no return ends its call, and tells the cell's health
// nothing: were it a failure, a partner cancelling its calls (or timing
// out on a busy platform) would get a cell ejected for every partner
// after three of them. Nor is the transaction re-routed for a caller who
// left.
func TestCallerWhoLeavesBlamesNoCell(t *testing.T) {
	a := &fakeCell{do: func(_ *cellproto.ProcessRequest, s srv) error {
		<-s.Context().Done() // never reaches its PNR
		return s.Context().Err()
	}}
	b := &fakeCell{}
	b.do = func(r *cellproto.ProcessRequest, s srv) error { return approve(r, s, b.id) }
	s, _ := setup(t, a, b)
	obs := &observer{}
	s.cfg.Health = obs
	for i := range 5 {
		// Within the attempt timer (300ms), well past MinAttemptTime.
		c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := s.SubmitTransaction(c, req(fmt.Sprintf("t-gone-%d", i)))
		cancel()
		if code := status.Code(err); code != codes.DeadlineExceeded && code != codes.Canceled {
			t.Fatalf("call %d: err = %v, want DeadlineExceeded or Canceled", i, err)
		}
	}
	if got := a.calls.Load(); got != 5 {
		t.Fatalf("cell a saw %d attempts, want 5", got)
	}
	if got := b.calls.Load(); got != 0 {
		t.Fatalf("%d attempts re-routed to cell b for callers who had left", got)
	}
	if len(obs.seen) != 0 {
		t.Fatalf("health observations %v for callers who left, want none", obs.seen)
	}
}

// TestGTRWideSlotHeldToTheAnswer: past the point of no return, the cell's
// adaptive limit has its slot back (what follows is the issuer's), but
// the GTR-wide limit still counts the call until it is answered: it
// bounds the platform's transactions in flight, the work after the PNR
// included.
func TestGTRWideSlotHeldToTheAnswer(t *testing.T) {
	proceeded, answer := make(chan struct{}), make(chan struct{})
	a := &fakeCell{}
	a.do = func(r *cellproto.ProcessRequest, s srv) error {
		if err := pnr(s); err != nil {
			return err
		}
		close(proceeded)
		<-answer
		return approve2(r, s, a.id)
	}
	s, _ := setup(t, a)
	lims := admission.NewCells(admission.CellConfig{})
	s.cfg.Limits = lims
	done := make(chan error, 1)
	go func() {
		_, err := s.SubmitTransaction(ctx(t), req("t-slot"))
		done <- err
	}()
	select {
	case <-proceeded:
	case <-time.After(5 * time.Second):
		t.Fatal("no PNR")
	}
	// The cell's slot is given back as Proceed is sent: wait for it, bounded.
	for deadline := time.Now().Add(5 * time.Second); lims.Cell(a.id).InFlight() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("cell's limit: %d in flight past the PNR, want 0", lims.Cell(a.id).InFlight())
		}
	}
	if got := lims.Cell(admission.WholeGTR).InFlight(); got != 1 {
		t.Fatalf("GTR-wide limit: %d in flight past the PNR, want 1 until the answer", got)
	}
	close(answer)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := lims.Cell(admission.WholeGTR).InFlight(); got != 0 {
		t.Fatalf("GTR-wide limit: %d in flight after the answer, want 0", got)
	}
}
