package issuersim

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellpay/cellpay/pkg/issuerproto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestDedupeConcurrent sends 100 concurrent Authorize calls for one ID and
// checks that exactly one applied an effect and all saw its outcome.
func TestDedupeConcurrent(t *testing.T) {
	const n = 100
	tests := []struct {
		name string
		req  func(i int) *issuerproto.AuthorizeRequest
	}{
		{"same payload", func(int) *issuerproto.AuthorizeRequest { return authReq("dup", CardApproved, 1000) }},
		{"mixed payloads", func(i int) *issuerproto.AuthorizeRequest {
			// Whichever arrives first decides, even a declining card.
			if i%2 == 0 {
				return authReq("dup", CardStolen, 1000)
			}
			return authReq("dup", CardApproved, int64(i))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			c, _ := startGRPC(t, Config{})
			resps := make([]*issuerproto.AuthorizeResponse, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() { resps[i], errs[i] = c.Authorize(ctx, tt.req(i)) })
			}
			wg.Wait()
			firsts := 0
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("call %d: %v", i, errs[i])
				}
				if !resps[i].GetDuplicate() {
					firsts++
				}
				a, b := proto.Clone(resps[i]).(*issuerproto.AuthorizeResponse), proto.Clone(resps[0]).(*issuerproto.AuthorizeResponse)
				a.Duplicate, b.Duplicate = false, false
				if !proto.Equal(a, b) {
					t.Fatalf("call %d got %v, call 0 got %v", i, resps[i], resps[0])
				}
			}
			if firsts != 1 {
				t.Errorf("%d answers with duplicate=false, want 1", firsts)
			}
			if effects, requests := effectsOf(ctx, t, c, "dup"); effects != 1 || requests != n {
				t.Errorf("effects %d, requests %d; want 1, %d", effects, requests, n)
			}
		})
	}
}

// TestDistinctIDsConcurrent checks that unrelated IDs each get their own
// effect under concurrency.
func TestDistinctIDsConcurrent(t *testing.T) {
	const n = 100
	ctx := testCtx(t)
	c, _ := startGRPC(t, Config{})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			resp, err := c.Authorize(ctx, authReq(fmt.Sprintf("id-%03d", i), CardApproved, 10))
			if err == nil && (!resp.GetApproved() || resp.GetDuplicate()) {
				err = fmt.Errorf("got %v", resp)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("id-%03d: %v", i, err)
		}
	}
	resp, err := c.Effects(ctx, &issuerproto.EffectsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetTotalEffects() != n || resp.GetTotalRequests() != n || len(resp.GetEffects()) != n {
		t.Fatalf("totals %d/%d over %d entries, want %d each", resp.GetTotalEffects(), resp.GetTotalRequests(), len(resp.GetEffects()), n)
	}
	if !slices.IsSortedFunc(resp.GetEffects(), func(a, b *issuerproto.Effect) int {
		return cmp.Or(strings.Compare(a.GetPartnerId(), b.GetPartnerId()), strings.Compare(a.GetTransactionId(), b.GetTransactionId()))
	}) {
		t.Error("Effects not sorted by partner and transaction ID")
	}
}

func TestEffects(t *testing.T) {
	ctx := testCtx(t)
	c, _ := startGRPC(t, Config{})
	for _, id := range []string{"a", "a", "a", "b"} {
		if _, err := c.Authorize(ctx, authReq(id, CardDoNotHonor, 1)); err != nil {
			t.Fatal(err)
		}
	}
	// p-000's "b" sorts first, and is its own transaction.
	theirs := authReq("b", CardDoNotHonor, 1)
	theirs.PartnerId = "p-000"
	if _, err := c.Authorize(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	ref := func(partner, id string) *issuerproto.TransactionRef {
		return &issuerproto.TransactionRef{PartnerId: partner, TransactionId: id}
	}
	tests := []struct {
		name      string
		ask       []*issuerproto.TransactionRef
		want      []*issuerproto.Effect
		wantTotal [2]int64 // effects, requests
	}{
		{"all", nil, []*issuerproto.Effect{
			{PartnerId: "p-000", TransactionId: "b", Effects: 1, Requests: 1},
			{PartnerId: testPartner, TransactionId: "a", Effects: 1, Requests: 3},
			{PartnerId: testPartner, TransactionId: "b", Effects: 1, Requests: 1},
		}, [2]int64{3, 5}},
		{"asked, with unknown and repeat", []*issuerproto.TransactionRef{ref(testPartner, "b"), ref(testPartner, "nope"), ref(testPartner, "b")}, []*issuerproto.Effect{
			{PartnerId: testPartner, TransactionId: "b", Effects: 1, Requests: 1},
			{PartnerId: testPartner, TransactionId: "nope"},
		}, [2]int64{1, 1}},
		{"another partner's ID is unknown", []*issuerproto.TransactionRef{ref("p-002", "a")}, []*issuerproto.Effect{
			{PartnerId: "p-002", TransactionId: "a"},
		}, [2]int64{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Effects(ctx, &issuerproto.EffectsRequest{Transactions: tt.ask})
			if err != nil {
				t.Fatal(err)
			}
			want := &issuerproto.EffectsResponse{Effects: tt.want, TotalEffects: tt.wantTotal[0], TotalRequests: tt.wantTotal[1]}
			if !proto.Equal(resp, want) {
				t.Errorf("got %v\nwant %v", resp, want)
			}
		})
	}
}

func TestInquire(t *testing.T) {
	ctx := testCtx(t)
	c, _ := startGRPC(t, Config{})
	for _, r := range []*issuerproto.AuthorizeRequest{authReq("ok", CardApproved, 5), authReq("no", CardStolen, 5)} {
		if _, err := c.Authorize(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name, partner, id string
		wantCode          codes.Code
		want              *issuerproto.AuthorizeResponse
	}{
		{name: "approved", partner: testPartner, id: "ok",
			want: &issuerproto.AuthorizeResponse{PartnerId: testPartner, TransactionId: "ok", Approved: true, AuthCode: AuthCode(testPartner, "ok")}},
		{name: "declined", partner: testPartner, id: "no",
			want: &issuerproto.AuthorizeResponse{PartnerId: testPartner, TransactionId: "no", DeclineReason: ReasonStolenCard}},
		{name: "never seen", partner: testPartner, id: "never-seen", wantCode: codes.NotFound},
		{name: "another partner's ID", partner: "p-002", id: "ok", wantCode: codes.NotFound},
		{name: "no transaction id", partner: testPartner, id: "", wantCode: codes.InvalidArgument},
		{name: "no partner id", partner: "", id: "ok", wantCode: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Inquire(ctx, &issuerproto.InquireRequest{PartnerId: tt.partner, TransactionId: tt.id})
			if tt.wantCode != codes.OK {
				wantCode(t, err, tt.wantCode)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(resp, tt.want) {
				t.Errorf("got %v, want %v", resp, tt.want)
			}
		})
	}
	if effects, requests := effectsOf(ctx, t, c, "ok"); effects != 1 || requests != 1 {
		t.Errorf("after inquiries: effects %d, requests %d; want 1, 1", effects, requests)
	}
}

func TestSetFaultsValidation(t *testing.T) {
	tests := []struct {
		name     string
		faults   *issuerproto.Faults
		wantCode codes.Code
	}{
		{"none", &issuerproto.Faults{}, codes.OK},
		{"all set", &issuerproto.Faults{LatencyMs: 1, ErrorRate: 1, AfterEffect: true, Hang: true}, codes.OK},
		{"rate above one", &issuerproto.Faults{ErrorRate: 1.5}, codes.InvalidArgument},
		{"rate negative", &issuerproto.Faults{ErrorRate: -0.1}, codes.InvalidArgument},
		{"rate NaN", &issuerproto.Faults{ErrorRate: math.NaN()}, codes.InvalidArgument},
		{"latency negative", &issuerproto.Faults{LatencyMs: -1}, codes.InvalidArgument},
		{"latency huge", &issuerproto.Faults{LatencyMs: math.MaxInt64}, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			c, _ := startGRPC(t, Config{})
			got, err := c.SetFaults(ctx, tt.faults)
			if tt.wantCode != codes.OK {
				wantCode(t, err, tt.wantCode)
				// Rejected faults leave the old (none) in force.
				if _, err := c.Authorize(ctx, authReq("after", CardApproved, 1)); err != nil {
					t.Errorf("Authorize after rejected SetFaults: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, tt.faults) {
				t.Errorf("SetFaults returned %v, want %v", got, tt.faults)
			}
		})
	}
}

// TestFaults checks each fault through real gRPC: what the caller sees and
// what the issuer recorded.
func TestFaults(t *testing.T) {
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
			if _, err := c.SetFaults(ctx, tt.faults); err != nil {
				t.Fatal(err)
			}
			// start is read before the deadline is set, so that a call that
			// ends at the deadline counts at least the deadline (read after,
			// it measured 199.1 ms of a 200 ms one under make test).
			start := time.Now()
			callCtx := ctx
			if tt.deadline > 0 {
				var cancel func()
				callCtx, cancel = context.WithTimeout(ctx, tt.deadline)
				defer cancel()
			}
			resp, err := c.Authorize(callCtx, authReq("f", CardApproved, 1))
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

			// Heal, then look at what the issuer recorded.
			if _, err := c.SetFaults(ctx, &issuerproto.Faults{}); err != nil {
				t.Fatal(err)
			}
			if effects, requests := effectsOf(ctx, t, c, "f"); effects != tt.wantEffects || requests != tt.wantRequests {
				t.Errorf("effects %d, requests %d; want %d, %d", effects, requests, tt.wantEffects, tt.wantRequests)
			}
			_, err = c.Inquire(ctx, &issuerproto.InquireRequest{PartnerId: testPartner, TransactionId: "f"})
			if tt.wantEffects == 0 {
				wantCode(t, err, codes.NotFound)
			} else if err != nil {
				t.Errorf("Inquire: %v", err)
			}
			// A retry after healing applies the effect at most once overall.
			resp, err = c.Authorize(ctx, authReq("f", CardApproved, 1))
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			if resp.GetDuplicate() != (tt.wantEffects == 1) || !resp.GetApproved() {
				t.Errorf("retry got %v, want approved, duplicate=%v", resp, tt.wantEffects == 1)
			}
			if effects, _ := effectsOf(ctx, t, c, "f"); effects != 1 {
				t.Errorf("after retry: effects %d, want 1", effects)
			}
		})
	}
}

func TestInquireLatency(t *testing.T) {
	ctx := testCtx(t)
	c, _ := startGRPC(t, Config{})
	if _, err := c.SetFaults(ctx, &issuerproto.Faults{LatencyMs: 100}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := c.Inquire(ctx, &issuerproto.InquireRequest{PartnerId: testPartner, TransactionId: "x"})
	wantCode(t, err, codes.NotFound)
	if elapsed := time.Since(start); elapsed < 100*time.Millisecond {
		t.Errorf("Inquire returned after %v, want at least 100ms", elapsed)
	}
}

// TestErrorRateSeeded checks that a partial error rate fails about that
// share of calls, the same ones for the same seed.
func TestErrorRateSeeded(t *testing.T) {
	const n = 400
	run := func(seed uint64) []bool {
		ctx := testCtx(t)
		s := New(Config{Seed: seed, Now: func() time.Time { return fixedNow }})
		if _, err := s.SetFaults(ctx, &issuerproto.Faults{ErrorRate: 0.5}); err != nil {
			t.Fatal(err)
		}
		failed := make([]bool, n)
		for i := range n {
			_, err := s.Authorize(ctx, authReq(fmt.Sprint(i), CardApproved, 1))
			if err != nil {
				wantCode(t, err, codes.Unavailable)
				failed[i] = true
			}
		}
		return failed
	}
	a, b := run(7), run(7)
	if !slices.Equal(a, b) {
		t.Error("same seed, different failures")
	}
	fails := 0
	for _, f := range a {
		if f {
			fails++
		}
	}
	if fails < n*35/100 || fails > n*65/100 {
		t.Errorf("%d of %d failed at error_rate 0.5", fails, n)
	}
}

// TestDedupeIsPerPartner: transaction IDs are a namespace per partner. Four
// partners send one ID, each with its own card, amount and merchant: four
// transactions, each decided on its own payload with exactly one effect,
// each with its own auth code; a repeat within a partner is a duplicate of
// that partner's outcome; inquiries answer per partner.
func TestDedupeIsPerPartner(t *testing.T) {
	ctx := testCtx(t)
	c, _ := startGRPC(t, Config{})
	partners := []string{"p-001", "p-002", "p-003", "p-004"}
	pans := []string{CardApproved, CardStolen, "5555555555554444", CardDoNotHonor}
	reasons := []string{"", ReasonStolenCard, "", ReasonDoNotHonor}
	reqs := make([]*issuerproto.AuthorizeRequest, len(partners))
	first := make([]*issuerproto.AuthorizeResponse, len(partners))
	for i, p := range partners {
		reqs[i] = authReq("shared", pans[i], int64(100*(i+1)))
		reqs[i].PartnerId, reqs[i].MerchantId = p, "m-"+p
		resp, err := c.Authorize(ctx, reqs[i])
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if resp.GetDuplicate() || resp.GetApproved() != (reasons[i] == "") || resp.GetDeclineReason() != reasons[i] ||
			resp.GetPartnerId() != p || resp.GetTransactionId() != "shared" {
			t.Fatalf("%s: got %v, want its own first outcome (reason %q)", p, resp, reasons[i])
		}
		if resp.GetApproved() && resp.GetAuthCode() != AuthCode(p, "shared") {
			t.Fatalf("%s: auth code %q, want AuthCode(%s, shared)", p, resp.GetAuthCode(), p)
		}
		first[i] = resp
	}
	if first[0].GetAuthCode() == first[2].GetAuthCode() {
		t.Fatalf("two partners' approvals of one ID share auth code %q", first[0].GetAuthCode())
	}
	// A repeat by a partner, even with another card, is that partner's
	// duplicate.
	again := proto.Clone(reqs[1]).(*issuerproto.AuthorizeRequest)
	again.Pan = CardApproved
	resp, err := c.Authorize(ctx, again)
	if err != nil || !resp.GetDuplicate() || resp.GetDeclineReason() != ReasonStolenCard {
		t.Fatalf("p-002's repeat: %v, %v; want its stolen_card duplicate", resp, err)
	}
	for i, p := range partners {
		wantRequests := int32(1)
		if i == 1 {
			wantRequests = 2
		}
		if effects, requests := effectsOfPartner(ctx, t, c, p, "shared"); effects != 1 || requests != wantRequests {
			t.Errorf("%s: effects %d, requests %d; want 1, %d", p, effects, requests, wantRequests)
		}
		got, err := c.Inquire(ctx, &issuerproto.InquireRequest{PartnerId: p, TransactionId: "shared"})
		want := proto.Clone(first[i]).(*issuerproto.AuthorizeResponse)
		if err != nil || !proto.Equal(got, want) {
			t.Errorf("%s: Inquire = %v, %v; want %v", p, got, err, want)
		}
	}
	if _, err := c.Inquire(ctx, &issuerproto.InquireRequest{PartnerId: "p-005", TransactionId: "shared"}); status.Code(err) != codes.NotFound {
		t.Errorf("a fifth partner's inquiry: %v, want NotFound", err)
	}
}

// TestDedupeIsPerPartnerConcurrent: concurrent requests of two partners for
// one ID apply exactly one effect per partner.
func TestDedupeIsPerPartnerConcurrent(t *testing.T) {
	const n = 100
	ctx := testCtx(t)
	c, _ := startGRPC(t, Config{})
	resps := make([]*issuerproto.AuthorizeResponse, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		r := authReq("dup", CardApproved, 10)
		r.PartnerId = fmt.Sprintf("p-%03d", 1+i%2)
		wg.Go(func() { resps[i], errs[i] = c.Authorize(ctx, r) })
	}
	wg.Wait()
	firsts := map[string]int{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if !resps[i].GetDuplicate() {
			firsts[resps[i].GetPartnerId()]++
		}
	}
	if firsts["p-001"] != 1 || firsts["p-002"] != 1 || len(firsts) != 2 {
		t.Fatalf("first outcomes per partner: %v, want one each", firsts)
	}
	for _, p := range []string{"p-001", "p-002"} {
		if effects, requests := effectsOfPartner(ctx, t, c, p, "dup"); effects != 1 || requests != n/2 {
			t.Errorf("%s: effects %d, requests %d; want 1, %d", p, effects, requests, n/2)
		}
	}
}

// TestInquireClose: an inquiry with close on a transaction without an
// outcome closes it, and no later Authorize of it is applied; on one with
// an outcome it returns the outcome and closes nothing; without close it
// changes nothing.
func TestInquireClose(t *testing.T) {
	ctx := testCtx(t)
	c, _ := startGRPC(t, Config{})
	inquire := func(id string, withClose bool) (*issuerproto.AuthorizeResponse, error) {
		return c.Inquire(ctx, &issuerproto.InquireRequest{PartnerId: testPartner, TransactionId: id, Close: withClose})
	}
	closedResp := func(id string) *issuerproto.AuthorizeResponse {
		return &issuerproto.AuthorizeResponse{PartnerId: testPartner, TransactionId: id, Closed: true}
	}

	t.Run("unknown is closed, and a later Authorize refused", func(t *testing.T) {
		for _, withClose := range []bool{true, true, false} { // closing twice, then asking
			resp, err := inquire("gone", withClose)
			if err != nil || !proto.Equal(resp, closedResp("gone")) {
				t.Fatalf("Inquire(close=%v) = %v, %v; want closed", withClose, resp, err)
			}
		}
		_, err := c.Authorize(ctx, authReq("gone", CardApproved, 5))
		wantCode(t, err, codes.FailedPrecondition)
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "closed by an inquiry") || strings.Contains(msg, CardApproved) {
			t.Errorf("refusal message %q: want it to name the close, without the PAN", msg)
		}
		if effects, requests := effectsOf(ctx, t, c, "gone"); effects != 0 || requests != 1 {
			t.Errorf("effects %d, requests %d; want 0, 1", effects, requests)
		}
		// Another partner's transaction with the ID is not closed.
		theirs := authReq("gone", CardApproved, 5)
		theirs.PartnerId = "p-002"
		if resp, err := c.Authorize(ctx, theirs); err != nil || !resp.GetApproved() {
			t.Errorf("p-002's Authorize of the ID = %v, %v; want approved", resp, err)
		}
	})

	t.Run("an outcome is returned, not closed", func(t *testing.T) {
		first, err := c.Authorize(ctx, authReq("done", CardStolen, 5))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := inquire("done", true)
		if err != nil || !proto.Equal(resp, first) || resp.GetClosed() {
			t.Fatalf("Inquire(close) = %v, %v; want the outcome %v", resp, err, first)
		}
		again, err := c.Authorize(ctx, authReq("done", CardStolen, 5))
		if err != nil || !again.GetDuplicate() || again.GetDeclineReason() != ReasonStolenCard {
			t.Fatalf("repeat after the inquiry = %v, %v; want its duplicate", again, err)
		}
		if effects, requests := effectsOf(ctx, t, c, "done"); effects != 1 || requests != 2 {
			t.Errorf("effects %d, requests %d; want 1, 2", effects, requests)
		}
	})

	t.Run("without close nothing changes", func(t *testing.T) {
		_, err := inquire("later", false)
		wantCode(t, err, codes.NotFound)
		if resp, err := c.Authorize(ctx, authReq("later", CardApproved, 5)); err != nil || !resp.GetApproved() || resp.GetDuplicate() {
			t.Fatalf("Authorize after an inquiry without close = %v, %v; want applied", resp, err)
		}
	})

	t.Run("seen but failed before the effect is closed", func(t *testing.T) {
		if _, err := c.SetFaults(ctx, &issuerproto.Faults{ErrorRate: 1}); err != nil {
			t.Fatal(err)
		}
		_, err := c.Authorize(ctx, authReq("failed", CardApproved, 5))
		wantCode(t, err, codes.Unavailable)
		if _, err := c.SetFaults(ctx, &issuerproto.Faults{}); err != nil {
			t.Fatal(err)
		}
		if resp, err := inquire("failed", true); err != nil || !proto.Equal(resp, closedResp("failed")) {
			t.Fatalf("Inquire(close) = %v, %v; want closed", resp, err)
		}
		// A fault after the effect hides the refusal; still no effect.
		if _, err := c.SetFaults(ctx, &issuerproto.Faults{ErrorRate: 1, AfterEffect: true}); err != nil {
			t.Fatal(err)
		}
		_, err = c.Authorize(ctx, authReq("failed", CardApproved, 5))
		wantCode(t, err, codes.Unavailable)
		if _, err := c.SetFaults(ctx, &issuerproto.Faults{}); err != nil {
			t.Fatal(err)
		}
		_, err = c.Authorize(ctx, authReq("failed", CardApproved, 5))
		wantCode(t, err, codes.FailedPrecondition)
		if effects, requests := effectsOf(ctx, t, c, "failed"); effects != 0 || requests != 3 {
			t.Errorf("effects %d, requests %d; want 0, 3", effects, requests)
		}
	})
}

// TestCloseRacesAuthorize: on each of many IDs two Authorize calls race
// an inquiry that closes. Each ID ends applied once, with the inquiry
// answering that outcome, or closed with no effect and both calls
// refused; never both.
func TestCloseRacesAuthorize(t *testing.T) {
	const ids, auths = 200, 2
	ctx := testCtx(t)
	c, _ := startGRPC(t, Config{})
	type result struct {
		inq     *issuerproto.AuthorizeResponse
		inqErr  error
		auth    [auths]*issuerproto.AuthorizeResponse
		authErr [auths]error
	}
	results := make([]result, ids)
	var wg sync.WaitGroup
	for i := range ids {
		id := fmt.Sprintf("race-%03d", i)
		r := &results[i]
		wg.Go(func() {
			r.inq, r.inqErr = c.Inquire(ctx, &issuerproto.InquireRequest{PartnerId: testPartner, TransactionId: id, Close: true})
		})
		for j := range auths {
			wg.Go(func() { r.auth[j], r.authErr[j] = c.Authorize(ctx, authReq(id, CardApproved, 10)) })
		}
	}
	wg.Wait()
	closedN := 0
	for i, r := range results {
		id := fmt.Sprintf("race-%03d", i)
		if r.inqErr != nil {
			t.Fatalf("%s: Inquire: %v", id, r.inqErr)
		}
		effects, requests := effectsOf(ctx, t, c, id)
		if requests != auths {
			t.Errorf("%s: %d requests, want %d", id, requests, auths)
		}
		if r.inq.GetClosed() {
			closedN++
			for j, err := range r.authErr {
				if status.Code(err) != codes.FailedPrecondition {
					t.Errorf("%s closed: Authorize %d = %v, %v; want FailedPrecondition", id, j, r.auth[j], err)
				}
			}
			if effects != 0 {
				t.Errorf("%s closed with %d effects", id, effects)
			}
			continue
		}
		firsts := 0
		for j, err := range r.authErr {
			if err != nil {
				t.Fatalf("%s applied: Authorize %d: %v", id, j, err)
			}
			if !r.auth[j].GetDuplicate() {
				firsts++
			}
			a := proto.Clone(r.auth[j]).(*issuerproto.AuthorizeResponse)
			a.Duplicate = false
			if !proto.Equal(a, r.inq) {
				t.Errorf("%s: inquiry answered %v, Authorize %d %v", id, r.inq, j, r.auth[j])
			}
		}
		if firsts != 1 || effects != 1 {
			t.Errorf("%s applied: %d first answers, %d effects; want 1, 1", id, firsts, effects)
		}
	}
	t.Logf("%d of %d closed before an Authorize applied", closedN, ids)
}

// TestEffectsOfEveryTransactionBounded: Effects with none asked reports
// every transaction up to MaxAllEffects, and past that refuses, naming
// the field, while asking for one's own still answers.
func TestEffectsOfEveryTransactionBounded(t *testing.T) {
	s := New(Config{})
	for i := range MaxAllEffects + 1 {
		s.ledger.getOrCreate(txnKey{partner: testPartner, id: fmt.Sprintf("b-%05d", i)})
		if i == MaxAllEffects-1 {
			resp, err := s.Effects(context.Background(), &issuerproto.EffectsRequest{})
			if err != nil || len(resp.GetEffects()) != MaxAllEffects {
				t.Fatalf("at the bound: %d effects, %v", len(resp.GetEffects()), err)
			}
		}
	}
	_, err := s.Effects(context.Background(), &issuerproto.EffectsRequest{})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "transactions:") {
		t.Fatalf("past the bound: %v, want FAILED_PRECONDITION naming transactions", err)
	}
	resp, err := s.Effects(context.Background(), &issuerproto.EffectsRequest{Transactions: []*issuerproto.TransactionRef{{PartnerId: testPartner, TransactionId: "b-00007"}}})
	if err != nil || len(resp.GetEffects()) != 1 {
		t.Fatalf("one's own: %v, %v", resp, err)
	}
}
