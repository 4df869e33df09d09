package issuersim

import (
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
		return strings.Compare(a.GetTransactionId(), b.GetTransactionId())
	}) {
		t.Error("Effects not sorted by transaction ID")
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
	tests := []struct {
		name      string
		ask       []string
		want      []*issuerproto.Effect
		wantTotal [2]int64 // effects, requests
	}{
		{"all", nil, []*issuerproto.Effect{
			{TransactionId: "a", Effects: 1, Requests: 3},
			{TransactionId: "b", Effects: 1, Requests: 1},
		}, [2]int64{2, 4}},
		{"asked, with unknown and repeat", []string{"b", "nope", "b"}, []*issuerproto.Effect{
			{TransactionId: "b", Effects: 1, Requests: 1},
			{TransactionId: "nope"},
		}, [2]int64{1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Effects(ctx, &issuerproto.EffectsRequest{TransactionIds: tt.ask})
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
		id       string
		wantCode codes.Code
		want     *issuerproto.AuthorizeResponse
	}{
		{id: "ok", want: &issuerproto.AuthorizeResponse{TransactionId: "ok", Approved: true, AuthCode: AuthCode("ok")}},
		{id: "no", want: &issuerproto.AuthorizeResponse{TransactionId: "no", DeclineReason: ReasonStolenCard}},
		{id: "never-seen", wantCode: codes.NotFound},
		{id: "", wantCode: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			resp, err := c.Inquire(ctx, &issuerproto.InquireRequest{TransactionId: tt.id})
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
			callCtx := ctx
			if tt.deadline > 0 {
				var cancel func()
				callCtx, cancel = context.WithTimeout(ctx, tt.deadline)
				defer cancel()
			}
			start := time.Now()
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
			_, err = c.Inquire(ctx, &issuerproto.InquireRequest{TransactionId: "f"})
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
	_, err := c.Inquire(ctx, &issuerproto.InquireRequest{TransactionId: "x"})
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
