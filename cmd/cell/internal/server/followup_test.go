package server

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/apierr"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// HoldFollowUp holds as the real store does (cellside.HoldFollowUp on the
// original's ledger), under the fake's one lock.
func (m *memStore) HoldFollowUp(_ context.Context, k, original idempotency.Key, build func(*cellside.Record) *cellside.Record) (*cellside.Record, *cellside.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	orig, ok := m.recs[original]
	if !ok {
		return nil, nil, cellside.ErrOriginalNotFound
	}
	if prev, ok := m.recs[k]; ok {
		return nil, &prev, nil
	}
	f := build(&orig)
	if err := cellside.HoldFollowUp(&orig, f); err != nil {
		return nil, nil, err
	}
	m.recs[original], m.recs[k] = orig, *f
	m.own(k, true)
	return f, nil, nil
}

// settle is Persist's part for a follow-up leaving sending.
func (m *memStore) settle(r *cellside.Record) {
	k := idempotency.Key{PartnerID: r.PartnerID, TransactionID: r.Original}
	orig := m.recs[k]
	orig.Ledger.Settle(r.PaymentType, r.Amount, r.State == cellside.StateApproved)
	m.recs[k] = orig
}

func (c *countingIssuer) Adjust(_ context.Context, in *issuerproto.AdjustRequest, _ ...grpc.CallOption) (*issuerproto.AuthorizeResponse, error) {
	c.calls.Add(1)
	c.mu.Lock()
	if c.byKey == nil {
		c.byKey = map[idempotency.Key]int{}
	}
	c.byKey[idempotency.Key{PartnerID: in.GetPartnerId(), TransactionID: in.GetTransactionId()}]++
	c.mu.Unlock()
	return &issuerproto.AuthorizeResponse{TransactionId: in.GetTransactionId(), PartnerId: in.GetPartnerId(), Approved: true, AuthCode: "F1"}, nil
}

func followUp(kind cellpayv1.PaymentType, id string, minor int64) *cellproto.FollowUpRequest {
	r := &cellproto.FollowUpRequest{Kind: kind, PartnerId: "p-001", TransactionId: id, OriginalTransactionId: "auth-1", Market: "GB"}
	if kind != cellpayv1.PaymentType_VOID {
		r.Amount = &cellpayv1.Money{MinorUnits: minor, Currency: "GBP"}
	}
	return r
}

// TestFollowUps drives the follow-up rules through the server: captures
// and refunds up to their limits, each refusal naming its rule, replays
// answered from the record, and the original's sums in its answer.
func TestFollowUps(t *testing.T) {
	c, _, iss := start(t)
	ctx := ctxT(t)
	if got := proceed(t, open(t, ctx, c, "auth-1")); got.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
		t.Fatalf("authorization: %v", got.GetStatus())
	}
	const (
		capture = cellpayv1.PaymentType_CAPTURE
		refund  = cellpayv1.PaymentType_REFUND
		void    = cellpayv1.PaymentType_VOID
	)
	refusals := []struct {
		req    *cellproto.FollowUpRequest
		code   codes.Code
		reason apierr.Reason
	}{
		{followUp(refund, "r-0", 1), codes.FailedPrecondition, apierr.RefundBeforeCapture},
		{followUp(capture, "c-0", 1251), codes.FailedPrecondition, apierr.CaptureExceedsAuthorization},
	}
	steps := []*cellproto.FollowUpRequest{followUp(capture, "c-1", 1000), followUp(capture, "c-2", 250)}
	for _, r := range refusals {
		checkRefused(t, ctx, c, r.req, r.code, r.reason)
	}
	for _, r := range steps {
		got := answer(t, ctx, c, r)
		if got.GetStatus() != cellpayv1.TransactionStatus_APPROVED || got.GetOriginalTransactionId() != "auth-1" || got.GetPaymentType() != capture {
			t.Fatalf("%s: %v", r.GetTransactionId(), got)
		}
	}
	checkRefused(t, ctx, c, followUp(capture, "c-3", 1), codes.FailedPrecondition, apierr.CaptureExceedsAuthorization)
	checkRefused(t, ctx, c, followUp(void, "v-1", 0), codes.FailedPrecondition, apierr.VoidAfterCapture)
	if got := answer(t, ctx, c, followUp(refund, "r-1", 1250)); got.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
		t.Fatalf("refund: %v", got)
	}
	checkRefused(t, ctx, c, followUp(refund, "r-2", 1), codes.FailedPrecondition, apierr.RefundExceedsCaptured)
	// A replay is answered from its record, without a second issuer call,
	// even though the rules would refuse it now; another payload is
	// ALREADY_EXISTS.
	before := iss.calls.Load()
	if got := answer(t, ctx, c, followUp(capture, "c-1", 1000)); got.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
		t.Fatalf("replay: %v", got)
	}
	if iss.calls.Load() != before {
		t.Fatal("a replay reached the issuer")
	}
	checkRefused(t, ctx, c, followUp(capture, "c-1", 999), codes.AlreadyExists, apierr.TransactionIDReused)
	orig, err := c.Get(ctx, &cellproto.GetRequest{PartnerId: "p-001", TransactionId: "auth-1"})
	if err != nil {
		t.Fatal(err)
	}
	if orig.GetCapturedAmount().GetMinorUnits() != 1250 || orig.GetRefundedAmount().GetMinorUnits() != 1250 || orig.GetVoided() {
		t.Fatalf("original's sums: captured %v, refunded %v, voided %v", orig.GetCapturedAmount(), orig.GetRefundedAmount(), orig.GetVoided())
	}
	other := followUp(capture, "c-9", 1)
	other.OriginalTransactionId = "auth-unknown"
	checkRefused(t, ctx, c, other, codes.NotFound, apierr.OriginalNotFound)
	other.Market = "XX"
	if _, err := c.FollowUp(ctx, other); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("invalid market: %v", err)
	}
}

func answer(t *testing.T, ctx context.Context, c cellproto.CellClient, r *cellproto.FollowUpRequest) *cellpayv1.Transaction {
	t.Helper()
	resp, err := c.FollowUp(ctx, r)
	if err != nil {
		t.Fatalf("%s: %v", r.GetTransactionId(), err)
	}
	return resp.GetResult()
}

func checkRefused(t *testing.T, ctx context.Context, c cellproto.CellClient, r *cellproto.FollowUpRequest, code codes.Code, reason apierr.Reason) {
	t.Helper()
	_, err := c.FollowUp(ctx, r)
	if status.Code(err) != code || apierr.Info(err).GetReason() != string(reason) {
		t.Fatalf("%s: %v (reason %q), want %v %s", r.GetTransactionId(), err, apierr.Info(err).GetReason(), code, reason)
	}
}

// TestFollowUpSettleAnswerLost: the outcome's commit lands but its answer
// is lost; the retry finds the record final and answers with it (not
// PENDING), once, with the ledger settled once.
func TestFollowUpSettleAnswerLost(t *testing.T) {
	c, st, iss := start(t)
	ctx := ctxT(t)
	if got := proceed(t, open(t, ctx, c, "auth-1")); got.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
		t.Fatalf("authorization: %v", got.GetStatus())
	}
	st.mu.Lock()
	st.settleAckLost = true
	st.mu.Unlock()
	got := answer(t, ctx, c, followUp(cellpayv1.PaymentType_CAPTURE, "c-1", 1000))
	if got.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
		t.Fatalf("capture whose commit's answer was lost: %v, want APPROVED read back", got.GetStatus())
	}
	orig, err := c.Get(ctx, &cellproto.GetRequest{PartnerId: "p-001", TransactionId: "auth-1"})
	if err != nil {
		t.Fatal(err)
	}
	if orig.GetCapturedAmount().GetMinorUnits() != 1000 || iss.callsFor(idempotency.Key{PartnerID: "p-001", TransactionID: "c-1"}) != 1 {
		t.Fatalf("captured %v, issuer calls %d; want 1000 and 1", orig.GetCapturedAmount(), iss.callsFor(idempotency.Key{PartnerID: "p-001", TransactionID: "c-1"}))
	}
}

// entries is a transaction directory that holds fixed entries and grants
// a claim of a key it has none of, without keeping it; a claim of a key it
// holds gets the entry back, "ours" when its owner is the claimer's, as
// Directory.Claim answers (the methods it leaves to the embedded nil
// interface are not called on the paths tested with it).
type entries struct {
	Directory
	of map[idempotency.Key]cellside.Entry
}

func (d entries) Get(_ context.Context, k idempotency.Key) (cellside.Entry, bool, error) {
	e, ok := d.of[k]
	return e, ok, nil
}

func (d entries) Claim(_ context.Context, k idempotency.Key, e cellside.Entry) (cellside.Entry, bool, error) {
	if cur, ok := d.of[k]; ok {
		return cur, cur.Owner == e.Owner, nil
	}
	return e, true, nil
}

func (d entries) Later(func(ctx context.Context) error, string) {}

// TestFollowUpOfALeftover: this cell holds the authorization as sending
// (an attempt that crashed before Proceed), while the directory says
// another cell decided it: a capture is sent to that cell, not refused as
// "still pending". With the directory naming this cell, the authorization
// is pending here, and the capture is refused so.
func TestFollowUpOfALeftover(t *testing.T) {
	auth := idempotency.Key{PartnerID: "p-001", TransactionID: "auth-1"}
	dir := entries{of: map[idempotency.Key]cellside.Entry{auth: {Owner: "cell-other", State: cellside.EntryFinal}}}
	st := &memStore{recs: map[idempotency.Key]cellside.Record{auth: {
		TransactionID: "auth-1", PartnerID: "p-001", PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION,
		State: cellside.StateSending, Amount: 1250, Currency: "GBP", Market: "GB", CellID: "cell-t",
	}}}
	c, _, iss := startWith(t, testKeys, st, func(cfg *Config) { cfg.Directory = dir })
	ctx := ctxT(t)
	resp, err := c.FollowUp(ctx, followUp(cellpayv1.PaymentType_CAPTURE, "c-1", 500))
	if err != nil || resp.GetOwnerCell() != "cell-other" {
		t.Fatalf("capture of another cell's authorization: %v, %v; want its owner", resp, err)
	}
	if iss.calls.Load() != 0 {
		t.Fatal("the issuer was called")
	}
	dir.of[auth] = cellside.Entry{Owner: "cell-t", State: cellside.EntryOwned}
	checkRefused(t, ctx, c, followUp(cellpayv1.PaymentType_CAPTURE, "c-2", 500), codes.FailedPrecondition, apierr.OriginalNotApproved)
}

// TestFollowUpMeetsAPaymentsClaim: the follow-up's ID is held in the
// directory by this cell's claim of a payment whose record is not written
// yet (the simulator's seed in testdata/sim/claim-any-own-entry.txt):
// Directory.Claim answers it as this cell's, but it is not this
// follow-up's, which is refused ALREADY_EXISTS without reaching the
// issuer; a claim of this follow-up's own (a retry's) goes on.
func TestFollowUpMeetsAPaymentsClaim(t *testing.T) {
	auth := idempotency.Key{PartnerID: "p-001", TransactionID: "auth-1"}
	reused := idempotency.Key{PartnerID: "p-001", TransactionID: "pay-7"}
	dir := entries{of: map[idempotency.Key]cellside.Entry{
		reused: {Owner: "cell-t", Call: "call-7", Attempt: 0, FingerprintKeyID: testKeys.FingerprintKeyID(), State: cellside.EntryOwned},
	}}
	st := &memStore{recs: map[idempotency.Key]cellside.Record{auth: {
		TransactionID: "auth-1", PartnerID: "p-001", PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION,
		State: cellside.StateApproved, Amount: 1250, Currency: "GBP", Market: "GB", CellID: "cell-t",
	}}}
	c, _, iss := startWith(t, testKeys, st, func(cfg *Config) { cfg.Directory = dir })
	ctx := ctxT(t)
	checkRefused(t, ctx, c, followUp(cellpayv1.PaymentType_CAPTURE, "pay-7", 500), codes.AlreadyExists, apierr.TransactionIDReused)
	if iss.calls.Load() != 0 {
		t.Fatal("the issuer was called")
	}
	// This follow-up's own claim, left by an attempt that recorded nothing.
	req := followUp(cellpayv1.PaymentType_CAPTURE, "c-1", 500)
	dir.of[idempotency.Key{PartnerID: "p-001", TransactionID: "c-1"}] = cellside.Entry{Owner: "cell-t", Call: followUpCall, Attempt: 1,
		Fingerprint: testKeys.Fingerprint(cellside.AsRequest(req)), FingerprintKeyID: testKeys.FingerprintKeyID(), State: cellside.EntryOwned}
	if got := answer(t, ctx, c, req); got.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
		t.Fatalf("a retry of the follow-up's own claim: %v", got)
	}
}
