package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/internal/cardkeys"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// These tests drive the real server over real gRPC on loopback, with an
// in-memory store and a counting issuer: the handshake's driver side.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memStore keys records by (partner, transaction ID), as the real store.
type memStore struct {
	mu   sync.Mutex
	recs map[idempotency.Key]cellside.Record
	// owned: an attempt works on the record (one instance: no leases).
	owned map[idempotency.Key]bool
	// releaseFails is how many Release calls fail before one succeeds;
	// abandonFails, AbandonOwn calls. sendingAckLost: the next write to
	// sending commits and then fails, as a commit whose connection is lost.
	releaseFails, abandonFails int
	sendingAckLost             bool
	// settleAckLost: the next follow-up's outcome commits and then fails.
	settleAckLost bool
}

func (m *memStore) own(k idempotency.Key, ok bool) {
	if m.owned == nil {
		m.owned = map[idempotency.Key]bool{}
	}
	m.owned[k] = ok
}

func (m *memStore) GetActive(_ context.Context, k idempotency.Key) (*cellside.Record, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[k]
	if !ok {
		return nil, false, store.ErrNotFound
	}
	return &r, m.owned[k], nil
}

func (m *memStore) MarkUnfiled(context.Context, idempotency.Key) error { return nil }

func (m *memStore) Release(_ context.Context, k idempotency.Key) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.releaseFails > 0 {
		m.releaseFails--
		return errors.New("store: release: connection refused")
	}
	if m.recs[k].State == cellside.StateSending {
		m.own(k, false)
	}
	return nil
}

func (m *memStore) Insert(_ context.Context, r *cellside.Record) (bool, *cellside.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if prev, ok := m.recs[r.Key()]; ok {
		return false, &prev, nil
	}
	m.recs[r.Key()] = *r
	m.own(r.Key(), true)
	return true, nil, nil
}

func (m *memStore) Reclaim(_ context.Context, r *cellside.Record) (bool, *cellside.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev := m.recs[r.Key()]
	if prev.State != cellside.StateAbandoned {
		return false, &prev, nil
	}
	m.recs[r.Key()] = *r
	m.own(r.Key(), true)
	return true, nil, nil
}

func (m *memStore) Get(_ context.Context, k idempotency.Key) (*cellside.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[k]
	if !ok {
		return nil, store.ErrNotFound
	}
	return &r, nil
}

func (m *memStore) Persist(_ context.Context, r *cellside.Record, from cellside.State) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.recs[r.Key()].State != from {
		return store.ErrStateChanged
	}
	if r.Original != "" && from == cellside.StateSending {
		m.settle(r)
		if m.settleAckLost {
			m.settleAckLost = false
			m.recs[r.Key()] = *r
			return errors.New("store: persist: unexpected EOF")
		}
	}
	m.recs[r.Key()] = *r
	if r.State != cellside.StateSending {
		m.own(r.Key(), false)
	} else if m.sendingAckLost {
		m.sendingAckLost = false
		return errors.New("store: persist: unexpected EOF")
	}
	return nil
}

func (m *memStore) AbandonOwn(_ context.Context, r *cellside.Record, states ...cellside.State) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.abandonFails > 0 {
		m.abandonFails--
		return errors.New("store: abandon: connection refused")
	}
	prev, ok := m.recs[r.Key()]
	if !ok || !slices.Contains(states, prev.State) || !m.owned[r.Key()] || prev.Attempt != r.Attempt || !prev.CreatedAt.Equal(r.CreatedAt) {
		return store.ErrStateChanged
	}
	prev.State, prev.UpdatedAt = cellside.StateAbandoned, r.UpdatedAt
	m.recs[r.Key()] = prev
	m.own(r.Key(), false)
	return nil
}

// testKeys is the servers' card data key ring in tests.
var testKeys = func() *cardkeys.Ring {
	r, err := cardkeys.New(make([]byte, 32))
	if err != nil {
		panic(err)
	}
	return r
}()

func (m *memStore) Velocity(context.Context, []card.KeyedHash, time.Time, idempotency.Key) (int64, int64, error) {
	return 0, 0, nil
}

// state is the state of p-001's transaction id.
func (m *memStore) state(id string) cellside.State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recs[idempotency.Key{PartnerID: "p-001", TransactionID: id}].State
}

// countingIssuer approves everything and counts the calls per
// (partner, transaction ID) it was sent.
type countingIssuer struct {
	calls atomic.Int32
	mu    sync.Mutex
	byKey map[idempotency.Key]int
}

func (c *countingIssuer) Authorize(_ context.Context, in *issuerproto.AuthorizeRequest, _ ...grpc.CallOption) (*issuerproto.AuthorizeResponse, error) {
	c.calls.Add(1)
	c.mu.Lock()
	if c.byKey == nil {
		c.byKey = map[idempotency.Key]int{}
	}
	c.byKey[idempotency.Key{PartnerID: in.GetPartnerId(), TransactionID: in.GetTransactionId()}]++
	c.mu.Unlock()
	return &issuerproto.AuthorizeResponse{TransactionId: in.GetTransactionId(), PartnerId: in.GetPartnerId(), Approved: true, AuthCode: "A1B2C3"}, nil
}

func (c *countingIssuer) callsFor(k idempotency.Key) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byKey[k]
}

func start(t *testing.T) (cellproto.CellClient, *memStore, *countingIssuer) {
	t.Helper()
	return startWith(t, testKeys, &memStore{recs: map[idempotency.Key]cellside.Record{}})
}

// startWith starts a server with card data keys and store st, its
// configuration changed by opts.
func startWith(t *testing.T, keys *cardkeys.Ring, st *memStore, opts ...func(*Config)) (cellproto.CellClient, *memStore, *countingIssuer) {
	t.Helper()
	ref, err := refdata.Load("../../../../config/refdata.json")
	if err != nil {
		t.Fatal(err)
	}
	iss := &countingIssuer{}
	cfg := Config{
		CellID: "cell-t", Store: st, Issuer: iss,
		RefData: func() cellside.RefData { return ref },
		Policy:  cellside.Policy{LimitCurrency: "EUR", VelocityWindow: time.Minute},
		Keys:    keys, WaitTimeout: 5 * time.Second,
		Log: slog.New(slog.DiscardHandler),
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := New(cfg)
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
	return openRequest(t, ctx, c, request(id))
}

// openRequest starts an attempt at r and reads up to the PNR event, which
// must name r's partner and transaction ID.
func openRequest(t *testing.T, ctx context.Context, c cellproto.CellClient, r *cellpayv1.SubmitTransactionRequest) grpc.BidiStreamingClient[cellproto.ProcessInput, cellproto.ProcessEvent] {
	t.Helper()
	s, err := c.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&cellproto.ProcessInput{Input: &cellproto.ProcessInput_Start{Start: &cellproto.ProcessRequest{Request: r, Attempt: 1}}}); err != nil {
		t.Fatal(err)
	}
	ev, err := s.Recv()
	if err != nil || ev.GetPointOfNoReturn() == nil {
		t.Fatalf("want a PNR event, got %v, %v", ev, err)
	}
	if p := ev.GetPointOfNoReturn(); p.GetPartnerId() != r.GetPartnerId() || p.GetTransactionId() != r.GetTransactionId() {
		t.Fatalf("PNR event names %s/%s, want %s/%s", p.GetPartnerId(), p.GetTransactionId(), r.GetPartnerId(), r.GetTransactionId())
	}
	return s
}

func proceed(t *testing.T, s grpc.BidiStreamingClient[cellproto.ProcessInput, cellproto.ProcessEvent]) *cellpayv1.Transaction {
	t.Helper()
	if err := s.Send(&cellproto.ProcessInput{Input: &cellproto.ProcessInput_Proceed{Proceed: &cellproto.Proceed{}}}); err != nil {
		t.Fatal(err)
	}
	// The cell says it took the Proceed before anything else: the GTR's
	// PENDING for a stream that ends later rests on it.
	ev, err := s.Recv()
	if err != nil || ev.GetProceeding() == nil {
		t.Fatalf("want Proceeding, got %v, %v", ev, err)
	}
	ev, err = s.Recv()
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
	if st.state("t-ok") != cellside.StateSending || iss.calls.Load() != 0 {
		t.Fatal("the sending state must be durable, and the issuer untouched, before Proceed")
	}
	got := proceed(t, s)
	if got.GetStatus() != cellpayv1.TransactionStatus_APPROVED || iss.calls.Load() != 1 || st.state("t-ok") != cellside.StateApproved {
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
	for st.state("t-refused") != cellside.StateAbandoned {
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

// TestDuplicateWithinItsBudget: a duplicate whose GTR said how long it
// waits for the attempt is answered ABORTED (retry) within that budget
// while the first attempt's handshake stays open, rather than holding on
// until the GTR's timer cuts it (which the GTR takes for a slow cell);
// the first attempt goes on unharmed.
func TestDuplicateWithinItsBudget(t *testing.T) {
	// A wait bounded by WaitTimeout alone would outlast the test's bound.
	c, _, iss := startWith(t, testKeys, &memStore{recs: map[idempotency.Key]cellside.Record{}}, func(c *Config) { c.WaitTimeout = time.Minute })
	ctx := ctxT(t)
	first := open(t, ctx, c, "t-budget")
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second) // the test's bound, far past the budget
	defer cancel()
	dup, err := c.Process(dctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := dup.Send(&cellproto.ProcessInput{Input: &cellproto.ProcessInput_Start{Start: &cellproto.ProcessRequest{
		Request: request("t-budget"), Attempt: 1, AttemptBudgetMs: 500,
	}}}); err != nil {
		t.Fatal(err)
	}
	if ev, err := dup.Recv(); status.Code(err) != codes.Aborted {
		t.Fatalf("the duplicate got %v, %v; want ABORTED within its budget", ev, err)
	}
	if got := proceed(t, first); got.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
		t.Fatalf("the first attempt got %v after the duplicate's ABORTED", got)
	}
	if iss.calls.Load() != 1 {
		t.Fatalf("issuer called %d times", iss.calls.Load())
	}
}

// TestWaitDeadline: a fifth of the budget, at least 100 ms, is left for
// the answer's way back.
func TestWaitDeadline(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for budget, want := range map[time.Duration]time.Duration{
		2 * time.Second:        1600 * time.Millisecond,
		500 * time.Millisecond: 400 * time.Millisecond,
		300 * time.Millisecond: 200 * time.Millisecond,
		50 * time.Millisecond:  -50 * time.Millisecond,
	} {
		if got := waitDeadline(now, budget).Sub(now); got != want {
			t.Errorf("budget %v: waits %v, want %v", budget, got, want)
		}
	}
}

// TestTransactionsBelongToPartners: two partners send one transaction ID,
// each with its own amount and merchant. They are two transactions: each
// reaches the issuer once under its own partner, each is read back only by
// its own partner, and another partner's read of the ID is NOT_FOUND with
// the same message as an ID never used.
func TestTransactionsBelongToPartners(t *testing.T) {
	c, _, iss := start(t)
	ctx := ctxT(t)
	a, b := request("t-shared"), request("t-shared")
	b.PartnerId, b.Amount.MinorUnits, b.Merchant.Id = "p-002", 9900, "m-2"
	gotA := proceed(t, openRequest(t, ctx, c, a))
	gotB := proceed(t, openRequest(t, ctx, c, b))
	for _, tc := range []struct {
		req *cellpayv1.SubmitTransactionRequest
		got *cellpayv1.Transaction
	}{{a, gotA}, {b, gotB}} {
		k := idempotency.KeyOf(tc.req)
		if tc.got.GetStatus() != cellpayv1.TransactionStatus_APPROVED || tc.got.GetPartnerId() != k.PartnerID ||
			tc.got.GetAmount().GetMinorUnits() != tc.req.GetAmount().GetMinorUnits() || tc.got.GetMerchantId() != tc.req.GetMerchant().GetId() {
			t.Fatalf("%s: answered %v", k, tc.got)
		}
		if n := iss.callsFor(k); n != 1 {
			t.Fatalf("%s: %d issuer calls, want 1", k, n)
		}
		read, err := c.Get(ctx, &cellproto.GetRequest{PartnerId: k.PartnerID, TransactionId: k.TransactionID})
		if err != nil || !proto.Equal(read, tc.got) {
			t.Fatalf("%s: Get = %v, %v; want %v", k, read, err, tc.got)
		}
	}
	_, other := c.Get(ctx, &cellproto.GetRequest{PartnerId: "p-003", TransactionId: "t-shared"})
	_, never := c.Get(ctx, &cellproto.GetRequest{PartnerId: "p-003", TransactionId: "t-never"})
	if status.Code(other) != codes.NotFound || status.Convert(other).Message() != status.Convert(never).Message() {
		t.Fatalf("another partner's ID: %v; an ID never used: %v; want the same NOT_FOUND", other, never)
	}
	if _, err := c.Get(ctx, &cellproto.GetRequest{TransactionId: "t-shared"}); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "partner_id") {
		t.Fatalf("Get without a partner: %v, want INVALID_ARGUMENT naming partner_id", err)
	}
}

// TestKeyRotationKeepsReplays: a transaction recorded before the cell's
// master changed is replayed by the rotated cell (its record names the old
// fingerprint key, which the driver recomputes the request under): the
// same payload gets the recorded answer without a second issuer call,
// another payload ALREADY_EXISTS. New records use the new key IDs.
func TestKeyRotationKeepsReplays(t *testing.T) {
	oldMaster, newMaster := bytes.Repeat([]byte{7}, 32), bytes.Repeat([]byte{9}, 32)
	before, err := cardkeys.New(oldMaster)
	if err != nil {
		t.Fatal(err)
	}
	after, err := cardkeys.New(newMaster, oldMaster)
	if err != nil {
		t.Fatal(err)
	}
	c1, st, iss := startWith(t, before, &memStore{recs: map[idempotency.Key]cellside.Record{}})
	first := proceed(t, open(t, ctxT(t), c1, "t-rot"))
	k := idempotency.Key{PartnerID: "p-001", TransactionID: "t-rot"}
	if rec, _ := st.Get(ctxT(t), k); rec.FingerprintKeyID != before.FingerprintKeyID() || rec.PANHashKeyID != before.PANHashKeyID() {
		t.Fatalf("record names keys %q, %q", rec.FingerprintKeyID, rec.PANHashKeyID)
	}
	c2, _, iss2 := startWith(t, after, st)
	replay := func(r *cellpayv1.SubmitTransactionRequest) (*cellproto.ProcessEvent, error) {
		s, err := c2.Process(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&cellproto.ProcessInput{Input: &cellproto.ProcessInput_Start{Start: &cellproto.ProcessRequest{Request: r, Attempt: 1}}}); err != nil {
			t.Fatal(err)
		}
		return s.Recv()
	}
	ev, err := replay(request("t-rot"))
	if err != nil || !proto.Equal(ev.GetResult(), first) {
		t.Fatalf("replay after rotation: %v, %v; want %v", ev, err, first)
	}
	other := request("t-rot")
	other.Amount.MinorUnits++
	if _, err := replay(other); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("other payload after rotation: %v, want ALREADY_EXISTS", err)
	}
	if iss.calls.Load()+iss2.calls.Load() != 1 {
		t.Fatalf("issuer calls %d, want 1", iss.calls.Load()+iss2.calls.Load())
	}
	proceed(t, open(t, ctxT(t), c2, "t-new"))
	if rec, _ := st.Get(ctxT(t), idempotency.Key{PartnerID: "p-001", TransactionID: "t-new"}); rec.FingerprintKeyID != after.FingerprintKeyID() {
		t.Fatalf("new record names key %q, want %q", rec.FingerprintKeyID, after.FingerprintKeyID())
	}
}

// TestFailedReleaseIsRetried: a PENDING answer's release that fails (the
// database away) is tried again in the background until it succeeds, so
// that the reconciler may resolve the record soon after the database is
// back rather than after store.ActiveFor.
func TestFailedReleaseIsRetried(t *testing.T) {
	st := &memStore{recs: map[idempotency.Key]cellside.Record{}, releaseFails: 3}
	k := idempotency.Key{PartnerID: "p-001", TransactionID: "t-release"}
	st.recs[k] = cellside.Record{TransactionID: k.TransactionID, PartnerID: k.PartnerID, State: cellside.StateSending}
	st.own(k, true)
	srv, err := New(Config{CellID: "cell-t", Store: st, Issuer: &countingIssuer{},
		RefData: func() cellside.RefData { return nil }, Policy: cellside.Policy{LimitCurrency: "EUR"},
		Keys: testKeys, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv.release(context.Background(), k)
	released := func() bool { st.mu.Lock(); defer st.mu.Unlock(); return !st.owned[k] }
	if released() {
		t.Fatal("released at once although the store refused")
	}
	testutil.Eventually(t, 10*time.Second, "the release retried until it succeeds", released)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.releaseFails != 0 {
		t.Fatalf("%d failures left: the retries stopped early", st.releaseFails)
	}
}

// TestLostSendingCommitStepsBack: the write to sending commits but its
// answer is lost (the primary died with the commit on its way, and the
// promoted standby has it). The attempt must not leave the record in
// sending while the GTR re-routes it: it steps back to abandoned, and a
// step back the database refuses at first is tried again until it is
// written. The issuer is never called.
func TestLostSendingCommitStepsBack(t *testing.T) {
	st := &memStore{recs: map[idempotency.Key]cellside.Record{}, sendingAckLost: true, abandonFails: 2}
	c, _, iss := startWith(t, testKeys, st)
	s, err := c.Process(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&cellproto.ProcessInput{Input: &cellproto.ProcessInput_Start{Start: &cellproto.ProcessRequest{Request: request("t-lost"), Attempt: 1}}}); err != nil {
		t.Fatal(err)
	}
	ev, err := s.Recv()
	if err != nil || ev.GetReroutable() == nil {
		t.Fatalf("want the attempt re-routable, got %v, %v", ev, err)
	}
	testutil.Eventually(t, 10*time.Second, "the record stepped back to abandoned", func() bool {
		return st.state("t-lost") == cellside.StateAbandoned
	})
	if iss.calls.Load() != 0 {
		t.Fatal("the issuer was called for an attempt that never had Proceed")
	}
}

// refusingStore refuses every final write, noting each try's deadline.
type refusingStore struct {
	*memStore
	deadlines []time.Time
}

func (r *refusingStore) Persist(ctx context.Context, _ *cellside.Record, _ cellside.State) error {
	d, _ := ctx.Deadline()
	r.deadlines = append(r.deadlines, d)
	return errors.New("store: persist: the database is shutting down")
}

// TestFinalWriteTriesShareOneBudget: the final write after the issuer's
// answer is tried StoreTries times within one StoreTimeout, not one each,
// so that an answer is never held for several timeouts past a partner's
// deadline (it is PENDING then, the reconciler's to resolve).
func TestFinalWriteTriesShareOneBudget(t *testing.T) {
	st := &refusingStore{memStore: &memStore{recs: map[idempotency.Key]cellside.Record{}}}
	srv, err := New(Config{CellID: "cell-t", Store: st, Issuer: &countingIssuer{}, StoreTimeout: time.Hour, StoreTries: 3,
		RefData: func() cellside.RefData { return nil }, Policy: cellside.Policy{LimitCurrency: "EUR"},
		Keys: testKeys, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	rec := &cellside.Record{TransactionID: "t-final", PartnerID: "p-001", State: cellside.StateApproved}
	if err := srv.persistAfterIssuer(context.Background(), rec, cellside.StateSending); err == nil {
		t.Fatal("a refused final write reported written")
	}
	if len(st.deadlines) != 3 {
		t.Fatalf("%d tries, want 3", len(st.deadlines))
	}
	for i, d := range st.deadlines {
		if d.IsZero() || !d.Equal(st.deadlines[0]) {
			t.Fatalf("try %d's deadline %v, want the first's %v: one budget for all", i, d, st.deadlines[0])
		}
	}
}

// TestInspect: an operator's view shows a record whatever its state, the
// ones partners never see included; an unknown transaction is not found;
// a malformed ID is refused naming the field.
func TestInspect(t *testing.T) {
	c, st, _ := start(t)
	s := open(t, ctxT(t), c, "t-inspect")
	// Sending, then cancelled before Proceed: abandoned, which Get hides.
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the attempt stepped back", func() bool { return st.state("t-inspect") == cellside.StateAbandoned })
	got, err := c.Inspect(ctxT(t), &cellproto.GetRequest{PartnerId: "p-001", TransactionId: "t-inspect"})
	if err != nil || !got.GetFound() || got.GetState() != "abandoned" || got.GetAttempt() != 1 || got.GetCellId() != "cell-t" ||
		got.GetMaskedPan() == "" || strings.Contains(got.String(), "4242424242424242") {
		t.Fatalf("Inspect: %v, %v (stored state %s)", got, err, st.state("t-inspect"))
	}
	if got, err := c.Inspect(ctxT(t), &cellproto.GetRequest{PartnerId: "p-001", TransactionId: "t-none"}); err != nil || got.GetFound() {
		t.Fatalf("Inspect of an unknown transaction: %v, %v", got, err)
	}
	if _, err := c.Inspect(ctxT(t), &cellproto.GetRequest{PartnerId: "p-001", TransactionId: ""}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "transaction_id") {
		t.Fatalf("Inspect without an ID: %v", err)
	}
}
