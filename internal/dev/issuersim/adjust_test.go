package issuersim

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cellpay/cellpay/pkg/issuerproto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const (
	capture = issuerproto.AdjustKind_ADJUST_KIND_CAPTURE
	void    = issuerproto.AdjustKind_ADJUST_KIND_VOID
	refund  = issuerproto.AdjustKind_ADJUST_KIND_REFUND
)

// adjReq returns testPartner's adjustment id of original, in EUR (authReq's
// currency).
func adjReq(id, original string, kind issuerproto.AdjustKind, amount int64) *issuerproto.AdjustRequest {
	return &issuerproto.AdjustRequest{
		PartnerId:             testPartner,
		TransactionId:         id,
		OriginalTransactionId: original,
		Kind:                  kind,
		AmountMinorUnits:      amount,
		Currency:              "EUR",
	}
}

// authorizeOK authorizes testPartner's id for amount and fails the test
// unless it is approved.
func authorizeOK(ctx context.Context, t *testing.T, c issuerproto.IssuerClient, id string, amount int64) {
	t.Helper()
	resp, err := c.Authorize(ctx, authReq(id, CardApproved, amount))
	if err != nil || !resp.GetApproved() || resp.GetDuplicate() {
		t.Fatalf("Authorize(%s) = %v, %v; want approved", id, resp, err)
	}
}

// effectOf returns the Effect entry of testPartner's transaction id.
func effectOf(ctx context.Context, t *testing.T, c issuerproto.IssuerClient, id string) *issuerproto.Effect {
	t.Helper()
	resp, err := c.Effects(ctx, &issuerproto.EffectsRequest{Transactions: []*issuerproto.TransactionRef{{PartnerId: testPartner, TransactionId: id}}})
	if err != nil {
		t.Fatalf("Effects: %v", err)
	}
	if len(resp.GetEffects()) != 1 {
		t.Fatalf("Effects returned %d entries, want 1", len(resp.GetEffects()))
	}
	return resp.GetEffects()[0]
}

// TestAdjustLedger runs sequences of adjustments of one 1000-unit
// authorization and checks each outcome, what Effects reports for it, and
// the ledger left.
func TestAdjustLedger(t *testing.T) {
	type step struct {
		kind       issuerproto.AdjustKind
		amount     int64
		wantReason string // "" for approved
		wantAmount int64  // applied, when approved; 0 means amount
	}
	tests := []struct {
		name  string
		steps []step
		// The ledger left: captured, refunded, voided.
		wantCaptured, wantRefunded int64
		wantVoided                 bool
	}{
		{name: "capture in two parts, a third over the limit",
			steps: []step{
				{kind: capture, amount: 400},
				{kind: capture, amount: 600},
				{kind: capture, amount: 1, wantReason: ReasonExceedsAuthorized},
			}, wantCaptured: 1000},
		{name: "a capture over what is left, then what is left",
			steps: []step{
				{kind: capture, amount: 700},
				{kind: capture, amount: 301, wantReason: ReasonExceedsAuthorized},
				{kind: capture, amount: 300},
			}, wantCaptured: 1000},
		{name: "refunds beyond the captured",
			steps: []step{
				{kind: capture, amount: 500},
				{kind: refund, amount: 300},
				{kind: refund, amount: 201, wantReason: ReasonExceedsCaptured},
				{kind: refund, amount: 200},
				{kind: refund, amount: 1, wantReason: ReasonExceedsCaptured},
			}, wantCaptured: 500, wantRefunded: 500},
		{name: "refund before any capture",
			steps: []step{
				{kind: refund, amount: 1, wantReason: ReasonExceedsCaptured},
			}},
		{name: "void after a capture",
			steps: []step{
				{kind: capture, amount: 1},
				{kind: void, amount: 1000, wantReason: ReasonAlreadyCaptured},
				{kind: capture, amount: 999},
			}, wantCaptured: 1000},
		{name: "void, then capture",
			steps: []step{
				{kind: void, amount: 1000},
				{kind: capture, amount: 1, wantReason: ReasonVoided},
				{kind: void, amount: 1000, wantReason: ReasonVoided},
				{kind: refund, amount: 1, wantReason: ReasonExceedsCaptured},
			}, wantVoided: true},
		{name: "a void of another amount releases the authorization",
			steps: []step{
				{kind: void, amount: 5, wantAmount: 1000},
			}, wantVoided: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			c, srv := startGRPC(t, Config{})
			authorizeOK(ctx, t, c, "auth", 1000)
			for i, st := range tt.steps {
				id := fmt.Sprintf("adj-%d", i)
				resp, err := c.Adjust(ctx, adjReq(id, "auth", st.kind, st.amount))
				if err != nil {
					t.Fatalf("step %d (%v %d): %v", i, st.kind, st.amount, err)
				}
				want := &issuerproto.AuthorizeResponse{PartnerId: testPartner, TransactionId: id, DeclineReason: st.wantReason}
				wantEffect := &issuerproto.Effect{PartnerId: testPartner, TransactionId: id, Effects: 1, Requests: 1,
					Kind: st.kind, OriginalTransactionId: "auth"}
				if st.wantReason == "" {
					want.Approved, want.AuthCode = true, AuthCode(testPartner, id)
					wantEffect.Approved, wantEffect.AmountMinorUnits, wantEffect.Currency = true, st.amount, "EUR"
					if st.wantAmount != 0 {
						wantEffect.AmountMinorUnits = st.wantAmount
					}
				}
				if !proto.Equal(resp, want) {
					t.Fatalf("step %d (%v %d) = %v, want %v", i, st.kind, st.amount, resp, want)
				}
				if got := effectOf(ctx, t, c, id); !proto.Equal(got, wantEffect) {
					t.Errorf("step %d: Effects = %v, want %v", i, got, wantEffect)
				}
			}
			// The authorization's own entry is unchanged by its adjustments.
			wantAuth := &issuerproto.Effect{PartnerId: testPartner, TransactionId: "auth", Effects: 1, Requests: 1,
				Approved: true, AmountMinorUnits: 1000, Currency: "EUR"}
			if got := effectOf(ctx, t, c, "auth"); !proto.Equal(got, wantAuth) {
				t.Errorf("the authorization's Effects = %v, want %v", got, wantAuth)
			}
			a := srv.auths.get(txnKey{partner: testPartner, id: "auth"})
			a.mu.Lock()
			l := a.ledger
			a.mu.Unlock()
			if !l.Valid() || l.Captured != tt.wantCaptured || l.Refunded != tt.wantRefunded || l.Voided != tt.wantVoided ||
				l.HeldCapture != 0 || l.HeldRefund != 0 {
				t.Errorf("ledger %+v; want captured %d, refunded %d, voided %v, nothing held",
					l, tt.wantCaptured, tt.wantRefunded, tt.wantVoided)
			}
		})
	}
}

// TestAdjustOriginal: an adjustment of anything but the partner's approved
// card authorization in its currency declines.
func TestAdjustOriginal(t *testing.T) {
	ctx := testCtx(t)
	c, _ := startGRPC(t, Config{})
	authorizeOK(ctx, t, c, "auth", 1000)
	if _, err := c.Authorize(ctx, authReq("declined", CardStolen, 1000)); err != nil {
		t.Fatal(err)
	}
	cardRefund := authReq("card-refund", CardApproved, 1000)
	cardRefund.Refund = true
	transfer := authReq("transfer", "", 1000)
	transfer.BankTransfer = true
	for _, r := range []*issuerproto.AuthorizeRequest{cardRefund, transfer} {
		if resp, err := c.Authorize(ctx, r); err != nil || !resp.GetApproved() {
			t.Fatalf("Authorize(%s) = %v, %v; want approved", r.GetTransactionId(), resp, err)
		}
	}
	if _, err := c.Inquire(ctx, &issuerproto.InquireRequest{PartnerId: testPartner, TransactionId: "closed", Close: true}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name       string
		req        *issuerproto.AdjustRequest
		wantReason string
	}{
		{"unknown", adjReq("a1", "never-seen", capture, 1), ReasonUnknownOriginal},
		{"declined", adjReq("a2", "declined", capture, 1), ReasonUnknownOriginal},
		{"a card refund", adjReq("a3", "card-refund", capture, 1), ReasonUnknownOriginal},
		{"a bank transfer", adjReq("a4", "transfer", void, 1000), ReasonUnknownOriginal},
		{"closed by inquiry", adjReq("a5", "closed", capture, 1), ReasonUnknownOriginal},
		{"itself", adjReq("a6", "a6", capture, 1), ReasonUnknownOriginal},
		{"another partner's", func() *issuerproto.AdjustRequest {
			r := adjReq("a7", "auth", capture, 1)
			r.PartnerId = "p-002"
			return r
		}(), ReasonUnknownOriginal},
		{"another currency", func() *issuerproto.AdjustRequest {
			r := adjReq("a8", "auth", capture, 1)
			r.Currency = "USD"
			return r
		}(), ReasonCurrencyMismatch},
		{"another currency's void", func() *issuerproto.AdjustRequest {
			r := adjReq("a9", "auth", void, 1000)
			r.Currency = "eur"
			return r
		}(), ReasonCurrencyMismatch},
		{"another adjustment", adjReq("a10", "a1", refund, 1), ReasonUnknownOriginal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Adjust(ctx, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetApproved() || resp.GetDeclineReason() != tt.wantReason || resp.GetAuthCode() != "" || resp.GetDuplicate() {
				t.Fatalf("got %v, want declined %q", resp, tt.wantReason)
			}
			effects, requests := effectsOfPartner(ctx, t, c, tt.req.GetPartnerId(), tt.req.GetTransactionId())
			if effects != 1 || requests != 1 {
				t.Errorf("effects %d, requests %d; want 1, 1", effects, requests)
			}
		})
	}
	// None of the declines touched the authorization: all of it captures.
	if resp, err := c.Adjust(ctx, adjReq("full", "auth", capture, 1000)); err != nil || !resp.GetApproved() {
		t.Fatalf("full capture after the declines = %v, %v; want approved", resp, err)
	}
}

// TestAdjustDuplicate: a repeat of an adjustment, whatever its payload,
// returns the first outcome with duplicate=true and applies nothing; the
// two kinds share one key space; Inquire answers an adjustment.
func TestAdjustDuplicate(t *testing.T) {
	ctx := testCtx(t)
	c, _ := startGRPC(t, Config{})
	authorizeOK(ctx, t, c, "auth", 1000)

	first, err := c.Adjust(ctx, adjReq("cap", "auth", capture, 600))
	if err != nil || !first.GetApproved() || first.GetDuplicate() {
		t.Fatalf("first capture = %v, %v; want approved", first, err)
	}
	for _, again := range []*issuerproto.AdjustRequest{
		adjReq("cap", "auth", capture, 600),
		adjReq("cap", "auth", capture, 5000), // would be declined if decided
		adjReq("cap", "other", void, 1),
	} {
		resp, err := c.Adjust(ctx, again)
		if err != nil {
			t.Fatal(err)
		}
		want := proto.Clone(first).(*issuerproto.AuthorizeResponse)
		want.Duplicate = true
		if !proto.Equal(resp, want) {
			t.Fatalf("repeat %v = %v, want %v", again, resp, want)
		}
	}
	wantEffect := &issuerproto.Effect{PartnerId: testPartner, TransactionId: "cap", Effects: 1, Requests: 4,
		Kind: capture, OriginalTransactionId: "auth", Approved: true, AmountMinorUnits: 600, Currency: "EUR"}
	if got := effectOf(ctx, t, c, "cap"); !proto.Equal(got, wantEffect) {
		t.Errorf("Effects = %v, want %v", got, wantEffect)
	}
	// Captured once: 400 are left, not 1000 - 4*600.
	if resp, err := c.Adjust(ctx, adjReq("over", "auth", capture, 401)); err != nil || resp.GetDeclineReason() != ReasonExceedsAuthorized {
		t.Fatalf("capture of 401 = %v, %v; want %q", resp, err, ReasonExceedsAuthorized)
	}

	// A decline repeats too.
	if resp, err := c.Adjust(ctx, adjReq("over", "auth", capture, 1)); err != nil || !resp.GetDuplicate() ||
		resp.GetDeclineReason() != ReasonExceedsAuthorized {
		t.Fatalf("repeat of the decline = %v, %v; want its duplicate", resp, err)
	}

	got, err := c.Inquire(ctx, &issuerproto.InquireRequest{PartnerId: testPartner, TransactionId: "cap"})
	if err != nil || !proto.Equal(got, first) {
		t.Errorf("Inquire = %v, %v; want %v", got, err, first)
	}

	// One key space: an Adjust with the authorization's ID repeats the
	// authorization, an Authorize with the adjustment's the adjustment.
	resp, err := c.Adjust(ctx, adjReq("auth", "auth", void, 1000))
	if err != nil || !resp.GetDuplicate() || !resp.GetApproved() || resp.GetAuthCode() != AuthCode(testPartner, "auth") {
		t.Fatalf("Adjust with the authorization's ID = %v, %v; want its duplicate", resp, err)
	}
	resp, err = c.Authorize(ctx, authReq("cap", CardStolen, 1))
	want := proto.Clone(first).(*issuerproto.AuthorizeResponse)
	want.Duplicate = true
	if err != nil || !proto.Equal(resp, want) {
		t.Fatalf("Authorize with the capture's ID = %v, %v; want %v", resp, err, want)
	}
	// And the void above was not applied: the authorization still captures.
	if resp, err := c.Adjust(ctx, adjReq("rest", "auth", capture, 400)); err != nil || !resp.GetApproved() {
		t.Fatalf("capture of the rest = %v, %v; want approved", resp, err)
	}
	if effects, _ := effectsOf(ctx, t, c, "auth"); effects != 1 {
		t.Errorf("authorization effects %d, want 1", effects)
	}
}

// TestAdjustClosedByInquiry: an adjustment closed by an inquiry is refused
// and applies nothing.
func TestAdjustClosedByInquiry(t *testing.T) {
	ctx := testCtx(t)
	c, _ := startGRPC(t, Config{})
	authorizeOK(ctx, t, c, "auth", 1000)
	resp, err := c.Inquire(ctx, &issuerproto.InquireRequest{PartnerId: testPartner, TransactionId: "cap", Close: true})
	if err != nil || !resp.GetClosed() {
		t.Fatalf("Inquire(close) = %v, %v; want closed", resp, err)
	}
	for range 2 {
		_, err = c.Adjust(ctx, adjReq("cap", "auth", capture, 1000))
		wantCode(t, err, codes.FailedPrecondition)
	}
	if msg := status.Convert(err).Message(); msg != status.Convert(errClosed).Message() {
		t.Errorf("refusal message %q", msg)
	}
	want := &issuerproto.Effect{PartnerId: testPartner, TransactionId: "cap", Requests: 2}
	if got := effectOf(ctx, t, c, "cap"); !proto.Equal(got, want) {
		t.Errorf("Effects = %v, want %v", got, want)
	}
	if resp, err := c.Inquire(ctx, &issuerproto.InquireRequest{PartnerId: testPartner, TransactionId: "cap"}); err != nil || !resp.GetClosed() {
		t.Errorf("Inquire = %v, %v; want closed", resp, err)
	}
	// The authorization is untouched: a void (no capture) is approved.
	if resp, err := c.Adjust(ctx, adjReq("void", "auth", void, 1000)); err != nil || !resp.GetApproved() {
		t.Fatalf("void = %v, %v; want approved", resp, err)
	}
	// An inquiry without close on an unseen adjustment changes nothing.
	_, err = c.Inquire(ctx, &issuerproto.InquireRequest{PartnerId: testPartner, TransactionId: "later"})
	wantCode(t, err, codes.NotFound)
}

// TestAdjustConcurrentCaptures: 50 concurrent captures of 1 of a 20-unit
// authorization, each its own transaction: exactly 20 approved, the rest
// declined exceeds_authorized, each with one effect.
func TestAdjustConcurrentCaptures(t *testing.T) {
	const n, authorized = 50, 20
	ctx := testCtx(t)
	c, srv := startGRPC(t, Config{})
	authorizeOK(ctx, t, c, "auth", authorized)
	resps := make([]*issuerproto.AuthorizeResponse, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { resps[i], errs[i] = c.Adjust(ctx, adjReq(fmt.Sprintf("cap-%02d", i), "auth", capture, 1)) })
	}
	wg.Wait()
	approved := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("capture %d: %v", i, errs[i])
		}
		switch {
		case resps[i].GetApproved():
			approved++
		case resps[i].GetDeclineReason() != ReasonExceedsAuthorized:
			t.Errorf("capture %d = %v, want approved or %q", i, resps[i], ReasonExceedsAuthorized)
		}
	}
	if approved != authorized {
		t.Errorf("%d captures approved, want %d", approved, authorized)
	}
	resp, err := c.Effects(ctx, &issuerproto.EffectsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, e := range resp.GetEffects() {
		if e.GetKind() == capture {
			sum += e.GetAmountMinorUnits()
		}
	}
	if sum != authorized || resp.GetTotalEffects() != n+1 || resp.GetTotalRequests() != n+1 {
		t.Errorf("Effects: captured %d, totals %d/%d; want %d, %d/%d", sum,
			resp.GetTotalEffects(), resp.GetTotalRequests(), authorized, n+1, n+1)
	}
	a := srv.auths.get(txnKey{partner: testPartner, id: "auth"})
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.ledger.Valid() || a.ledger.Captured != authorized {
		t.Errorf("ledger %+v, want all %d captured", a.ledger, authorized)
	}
}

// TestAdjustDedupeConcurrent: 50 concurrent copies of one capture apply it
// once.
func TestAdjustDedupeConcurrent(t *testing.T) {
	const n = 50
	ctx := testCtx(t)
	c, _ := startGRPC(t, Config{})
	authorizeOK(ctx, t, c, "auth", 100)
	resps := make([]*issuerproto.AuthorizeResponse, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { resps[i], errs[i] = c.Adjust(ctx, adjReq("cap", "auth", capture, 10)) })
	}
	wg.Wait()
	firsts := 0
	for i := range n {
		if errs[i] != nil || !resps[i].GetApproved() {
			t.Fatalf("call %d = %v, %v; want approved", i, resps[i], errs[i])
		}
		if !resps[i].GetDuplicate() {
			firsts++
		}
	}
	if firsts != 1 {
		t.Errorf("%d answers with duplicate=false, want 1", firsts)
	}
	if effects, requests := effectsOf(ctx, t, c, "cap"); effects != 1 || requests != n {
		t.Errorf("effects %d, requests %d; want 1, %d", effects, requests, n)
	}
	// 10 captured, 90 left.
	if resp, err := c.Adjust(ctx, adjReq("rest", "auth", capture, 90)); err != nil || !resp.GetApproved() {
		t.Fatalf("capture of the rest = %v, %v; want approved", resp, err)
	}
}

// TestCloseRacesAdjust: on each of many IDs two Adjust calls race an
// inquiry that closes. Each ends applied once (the inquiry answering that
// outcome) or closed with both refused; the authorization's ledger holds
// exactly the applied captures.
func TestCloseRacesAdjust(t *testing.T) {
	const ids, adjusts = 200, 2
	ctx := testCtx(t)
	c, srv := startGRPC(t, Config{})
	authorizeOK(ctx, t, c, "auth", ids)
	type result struct {
		inq    *issuerproto.AuthorizeResponse
		inqErr error
		errs   [adjusts]error
	}
	results := make([]result, ids)
	var wg sync.WaitGroup
	for i := range ids {
		id := fmt.Sprintf("race-%03d", i)
		r := &results[i]
		wg.Go(func() {
			r.inq, r.inqErr = c.Inquire(ctx, &issuerproto.InquireRequest{PartnerId: testPartner, TransactionId: id, Close: true})
		})
		for j := range adjusts {
			wg.Go(func() { _, r.errs[j] = c.Adjust(ctx, adjReq(id, "auth", capture, 1)) })
		}
	}
	wg.Wait()
	applied := int64(0)
	for i, r := range results {
		id := fmt.Sprintf("race-%03d", i)
		if r.inqErr != nil {
			t.Fatalf("%s: Inquire: %v", id, r.inqErr)
		}
		effects, _ := effectsOf(ctx, t, c, id)
		if r.inq.GetClosed() {
			for j, err := range r.errs {
				if status.Code(err) != codes.FailedPrecondition {
					t.Errorf("%s closed: Adjust %d = %v; want FailedPrecondition", id, j, err)
				}
			}
			if effects != 0 {
				t.Errorf("%s closed with %d effects", id, effects)
			}
			continue
		}
		applied++
		for j, err := range r.errs {
			if err != nil {
				t.Errorf("%s applied: Adjust %d: %v", id, j, err)
			}
		}
		if effects != 1 || !r.inq.GetApproved() {
			t.Errorf("%s applied: %d effects, inquiry %v; want 1, approved", id, effects, r.inq)
		}
	}
	a := srv.auths.get(txnKey{partner: testPartner, id: "auth"})
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.ledger.Valid() || a.ledger.Captured != applied {
		t.Errorf("ledger %+v, want %d captured", a.ledger, applied)
	}
	t.Logf("%d of %d closed before an Adjust applied", ids-applied, ids)
}

// TestAdjustFaults: the faults act on Adjust as on Authorize.
func TestAdjustFaults(t *testing.T) {
	tests := []struct {
		name         string
		faults       *issuerproto.Faults
		deadline     time.Duration // 0: the test's own
		wantCode     codes.Code
		minElapsed   time.Duration
		wantEffects  int32
		wantRequests int32
	}{
		{name: "latency", faults: &issuerproto.Faults{LatencyMs: 150},
			minElapsed: 150 * time.Millisecond, wantEffects: 1, wantRequests: 1},
		{name: "latency cut short by deadline", faults: &issuerproto.Faults{LatencyMs: 60_000},
			deadline: 150 * time.Millisecond, wantCode: codes.DeadlineExceeded, minElapsed: 150 * time.Millisecond},
		{name: "error before effect", faults: &issuerproto.Faults{ErrorRate: 1},
			wantCode: codes.Unavailable, wantRequests: 1},
		{name: "error after effect", faults: &issuerproto.Faults{ErrorRate: 1, AfterEffect: true},
			wantCode: codes.Unavailable, wantEffects: 1, wantRequests: 1},
		{name: "hang", faults: &issuerproto.Faults{Hang: true},
			deadline: 200 * time.Millisecond, wantCode: codes.DeadlineExceeded, minElapsed: 200 * time.Millisecond, wantRequests: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			c, _ := startGRPC(t, Config{})
			authorizeOK(ctx, t, c, "auth", 10)
			if _, err := c.SetFaults(ctx, tt.faults); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			callCtx := ctx
			if tt.deadline > 0 {
				var cancel func()
				callCtx, cancel = context.WithTimeout(ctx, tt.deadline)
				defer cancel()
			}
			resp, err := c.Adjust(callCtx, adjReq("cap", "auth", capture, 10))
			elapsed := time.Since(start)
			wantCode(t, err, tt.wantCode)
			if elapsed < tt.minElapsed {
				t.Errorf("returned after %v, want at least %v", elapsed, tt.minElapsed)
			}
			if tt.deadline > 0 && elapsed > tt.deadline+2*time.Second {
				t.Errorf("returned after %v, long past the %v deadline", elapsed, tt.deadline)
			}
			if err == nil && !resp.GetApproved() {
				t.Errorf("got %v, want approved", resp)
			}

			if _, err := c.SetFaults(ctx, &issuerproto.Faults{}); err != nil {
				t.Fatal(err)
			}
			if effects, requests := effectsOf(ctx, t, c, "cap"); effects != tt.wantEffects || requests != tt.wantRequests {
				t.Errorf("effects %d, requests %d; want %d, %d", effects, requests, tt.wantEffects, tt.wantRequests)
			}
			// A retry after healing applies the capture at most once overall.
			resp, err = c.Adjust(ctx, adjReq("cap", "auth", capture, 10))
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			if resp.GetDuplicate() != (tt.wantEffects == 1) || !resp.GetApproved() {
				t.Errorf("retry got %v, want approved, duplicate=%v", resp, tt.wantEffects == 1)
			}
			if resp, err := c.Adjust(ctx, adjReq("more", "auth", capture, 1)); err != nil || resp.GetDeclineReason() != ReasonExceedsAuthorized {
				t.Errorf("another capture = %v, %v; want %q", resp, err, ReasonExceedsAuthorized)
			}
		})
	}
}

// TestAdjustErrorRateShared: Authorize and Adjust draw from one seeded
// sequence, so a mix of calls fails the same ones for the same seed.
func TestAdjustErrorRateShared(t *testing.T) {
	const n = 200
	run := func() []bool {
		ctx := testCtx(t)
		s := New(Config{Seed: 11, Now: func() time.Time { return fixedNow }})
		if _, err := s.Authorize(ctx, authReq("auth", CardApproved, n)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetFaults(ctx, &issuerproto.Faults{ErrorRate: 0.5}); err != nil {
			t.Fatal(err)
		}
		failed := make([]bool, n)
		for i := range n {
			var err error
			if i%2 == 0 {
				_, err = s.Adjust(ctx, adjReq(fmt.Sprint(i), "auth", capture, 1))
			} else {
				_, err = s.Authorize(ctx, authReq(fmt.Sprint(i), CardApproved, 1))
			}
			if err != nil {
				wantCode(t, err, codes.Unavailable)
				failed[i] = true
			}
		}
		return failed
	}
	a, b := run(), run()
	fails := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, call %d failed in one run only", i)
		}
		if a[i] {
			fails++
		}
	}
	if fails < n*35/100 || fails > n*65/100 {
		t.Errorf("%d of %d failed at error_rate 0.5", fails, n)
	}
}

// TestAdjustValidation: an invalid Adjust is INVALID_ARGUMENT and records
// nothing.
func TestAdjustValidation(t *testing.T) {
	ctx := testCtx(t)
	c, _ := startGRPC(t, Config{})
	authorizeOK(ctx, t, c, "auth", 1000)
	with := func(f func(r *issuerproto.AdjustRequest)) *issuerproto.AdjustRequest {
		r := adjReq("bad", "auth", capture, 1)
		f(r)
		return r
	}
	tests := []struct {
		name string
		req  *issuerproto.AdjustRequest
	}{
		{"no partner", with(func(r *issuerproto.AdjustRequest) { r.PartnerId = "" })},
		{"no transaction id", with(func(r *issuerproto.AdjustRequest) { r.TransactionId = "" })},
		{"no original", with(func(r *issuerproto.AdjustRequest) { r.OriginalTransactionId = "" })},
		{"no kind", with(func(r *issuerproto.AdjustRequest) { r.Kind = issuerproto.AdjustKind_ADJUST_KIND_UNSPECIFIED })},
		{"unknown kind", with(func(r *issuerproto.AdjustRequest) { r.Kind = 42 })},
		{"negative amount", with(func(r *issuerproto.AdjustRequest) { r.AmountMinorUnits = -1 })},
		{"zero capture", with(func(r *issuerproto.AdjustRequest) { r.AmountMinorUnits = 0 })},
		{"zero refund", with(func(r *issuerproto.AdjustRequest) { r.Kind, r.AmountMinorUnits = refund, 0 })},
		{"negative void", with(func(r *issuerproto.AdjustRequest) { r.Kind, r.AmountMinorUnits = void, -1 })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Adjust(ctx, tt.req)
			wantCode(t, err, codes.InvalidArgument)
		})
	}
	resp, err := c.Effects(ctx, &issuerproto.EffectsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetEffects()) != 1 || resp.GetTotalRequests() != 1 {
		t.Errorf("Effects after invalid adjustments: %v; want the authorization alone", resp)
	}
	// A void's amount is not read: zero is valid.
	if resp, err := c.Adjust(ctx, adjReq("void", "auth", void, 0)); err != nil || !resp.GetApproved() {
		t.Errorf("void of amount 0 = %v, %v; want approved", resp, err)
	}
	if got := effectOf(ctx, t, c, "void"); got.GetAmountMinorUnits() != 1000 {
		t.Errorf("void's Effects amount %d, want the authorized 1000", got.GetAmountMinorUnits())
	}
}
