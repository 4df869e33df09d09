package server

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cellpay/cellpay/cmd/cell/internal/orchestrator"
	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// These tests drive the real server over real gRPC on loopback, with an
// in-memory store and a counting issuer: the handshake's driver side.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type memStore struct {
	mu   sync.Mutex
	recs map[string]orchestrator.Record
}

func (m *memStore) Insert(_ context.Context, r *orchestrator.Record) (bool, *orchestrator.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if prev, ok := m.recs[r.TransactionID]; ok {
		return false, &prev, nil
	}
	m.recs[r.TransactionID] = *r
	return true, nil, nil
}

func (m *memStore) Reclaim(_ context.Context, r *orchestrator.Record) (bool, *orchestrator.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev := m.recs[r.TransactionID]
	if prev.State != orchestrator.StateAbandoned {
		return false, &prev, nil
	}
	m.recs[r.TransactionID] = *r
	return true, nil, nil
}

func (m *memStore) Get(_ context.Context, id string) (*orchestrator.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[id]
	if !ok {
		return nil, store.ErrNotFound
	}
	return &r, nil
}

func (m *memStore) Persist(_ context.Context, r *orchestrator.Record, from orchestrator.State) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.recs[r.TransactionID].State != from {
		return store.ErrStateChanged
	}
	m.recs[r.TransactionID] = *r
	return nil
}

func (m *memStore) Velocity(context.Context, []byte, time.Time, string) (int64, int64, error) {
	return 0, 0, nil
}

func (m *memStore) state(id string) orchestrator.State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recs[id].State
}

type countingIssuer struct{ calls atomic.Int32 }

func (c *countingIssuer) Authorize(_ context.Context, in *issuerproto.AuthorizeRequest, _ ...grpc.CallOption) (*issuerproto.AuthorizeResponse, error) {
	c.calls.Add(1)
	return &issuerproto.AuthorizeResponse{TransactionId: in.GetTransactionId(), Approved: true, AuthCode: "A1B2C3"}, nil
}

func start(t *testing.T) (cellproto.CellClient, *memStore, *countingIssuer) {
	t.Helper()
	ref, err := refdata.Load("../../../../config/refdata.json")
	if err != nil {
		t.Fatal(err)
	}
	st := &memStore{recs: map[string]orchestrator.Record{}}
	iss := &countingIssuer{}
	srv, err := New(Config{
		CellID: "cell-t", Store: st, Issuer: iss,
		RefData: func() orchestrator.RefData { return ref },
		Policy:  orchestrator.Policy{LimitCurrency: "EUR", VelocityWindow: time.Minute},
		Secret:  make([]byte, 32), WaitTimeout: 5 * time.Second,
		Log: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	cellproto.RegisterCellServer(gs, srv)
	go gs.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop() })
	return cellproto.NewCellClient(conn), st, iss
}

func request(id string) *cellpayv1.SubmitTransactionRequest {
	return &cellpayv1.SubmitTransactionRequest{
		TransactionId: id, PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION, PartnerId: "p-001", Market: "GB",
		Amount:   &cellpayv1.Money{MinorUnits: 1250, Currency: "GBP"},
		Merchant: &cellpayv1.Merchant{Id: "m-1", Mcc: "5411", Country: "GB"},
		Card:     &cellpayv1.Card{Pan: "4242424242424242", ExpiryMonth: 12, ExpiryYear: 2030},
	}
}

// open starts an attempt and reads up to the PNR event.
func open(t *testing.T, ctx context.Context, c cellproto.CellClient, id string) grpc.BidiStreamingClient[cellproto.ProcessInput, cellproto.ProcessEvent] {
	t.Helper()
	s, err := c.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&cellproto.ProcessInput{Input: &cellproto.ProcessInput_Start{Start: &cellproto.ProcessRequest{Request: request(id), Attempt: 1}}}); err != nil {
		t.Fatal(err)
	}
	ev, err := s.Recv()
	if err != nil || ev.GetPointOfNoReturn() == nil {
		t.Fatalf("want a PNR event, got %v, %v", ev, err)
	}
	return s
}

func proceed(t *testing.T, s grpc.BidiStreamingClient[cellproto.ProcessInput, cellproto.ProcessEvent]) *cellpayv1.Transaction {
	t.Helper()
	if err := s.Send(&cellproto.ProcessInput{Input: &cellproto.ProcessInput_Proceed{Proceed: &cellproto.Proceed{}}}); err != nil {
		t.Fatal(err)
	}
	ev, err := s.Recv()
	if err != nil || ev.GetResult() == nil {
		t.Fatalf("want a result, got %v, %v", ev, err)
	}
	return ev.GetResult()
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestConfirmedPNRCallsTheIssuerOnce(t *testing.T) {
	c, st, iss := start(t)
	s := open(t, ctxT(t), c, "t-ok")
	if st.state("t-ok") != orchestrator.StateSending || iss.calls.Load() != 0 {
		t.Fatal("the sending state must be durable, and the issuer untouched, before Proceed")
	}
	got := proceed(t, s)
	if got.GetStatus() != cellpayv1.TransactionStatus_APPROVED || iss.calls.Load() != 1 || st.state("t-ok") != orchestrator.StateApproved {
		t.Fatalf("got %v; issuer calls %d; state %s", got, iss.calls.Load(), st.state("t-ok"))
	}
}

// TestRefusedPNRNeverReachesTheIssuer: the GTR gives up (cancels) instead of
// answering Proceed: the issuer is never called and the record steps back.
func TestRefusedPNRNeverReachesTheIssuer(t *testing.T) {
	c, st, iss := start(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	open(t, ctx, c, "t-refused")
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for st.state("t-refused") != orchestrator.StateAbandoned {
		if time.Now().After(deadline) {
			t.Fatalf("state %s, want abandoned", st.state("t-refused"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if iss.calls.Load() != 0 {
		t.Fatal("the issuer was called without Proceed")
	}
}

// TestDuplicateWaitsForAnOpenHandshake: a duplicate arriving while the
// first attempt waits for Proceed does not answer PENDING; it waits and
// answers what the first attempt recorded.
func TestDuplicateWaitsForAnOpenHandshake(t *testing.T) {
	c, _, iss := start(t)
	ctx := ctxT(t)
	first := open(t, ctx, c, "t-dup")
	dup, err := c.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := dup.Send(&cellproto.ProcessInput{Input: &cellproto.ProcessInput_Start{Start: &cellproto.ProcessRequest{Request: request("t-dup"), Attempt: 1}}}); err != nil {
		t.Fatal(err)
	}
	answered := make(chan *cellproto.ProcessEvent, 1)
	go func() {
		ev, err := dup.Recv()
		if err != nil {
			ev = nil
		}
		answered <- ev
	}()
	select {
	case ev := <-answered:
		t.Fatalf("the duplicate answered while the handshake was open: %v", ev)
	case <-time.After(300 * time.Millisecond):
	}
	want := proceed(t, first)
	select {
	case ev := <-answered:
		if ev.GetResult().GetStatus() != want.GetStatus() || ev.GetResult().GetAuthCode() != want.GetAuthCode() {
			t.Fatalf("duplicate got %v, first %v", ev, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the duplicate never answered")
	}
	if iss.calls.Load() != 1 {
		t.Fatalf("issuer called %d times", iss.calls.Load())
	}
}
