package issuersim

import (
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// TestListEffects: the issuer's record of what it applied, by window of
// its clock and terminal, by pages: every outcome once (approved and
// declined authorizations, an adjustment), in the order applied, with
// what it applied and no card data; a duplicate, a closed transaction and
// an injected failure before the effect add nothing; a failure after the
// effect is listed although its caller learnt nothing.
func TestListEffects(t *testing.T) {
	ctx := testCtx(t)
	var mu sync.Mutex
	clock := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		clock = clock.Add(time.Second)
		return clock
	}
	c, s := startGRPC(t, Config{Now: now})
	term := func(r *issuerproto.AuthorizeRequest, id string) *issuerproto.AuthorizeRequest {
		r.TerminalId = id
		return r
	}
	if _, err := c.Authorize(ctx, term(authReq("a1", CardApproved, 1000), "cell-a")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Authorize(ctx, term(authReq("a1", CardApproved, 1000), "cell-b")); err != nil { // a duplicate
		t.Fatal(err)
	}
	if _, err := c.Authorize(ctx, term(authReq("d1", CardStolen, 500), "cell-a")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Authorize(ctx, term(authReq("b1", CardApproved, 700), "cell-b")); err != nil {
		t.Fatal(err)
	}
	capture := adjReq("c1", "a1", issuerproto.AdjustKind_ADJUST_KIND_CAPTURE, 400)
	capture.TerminalId = "cell-a"
	if _, err := c.Adjust(ctx, capture); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Inquire(ctx, &issuerproto.InquireRequest{PartnerId: testPartner, TransactionId: "x1", Close: true}); err != nil {
		t.Fatal(err)
	}
	s.faults.set(&issuerproto.Faults{ErrorRate: 1})
	if _, err := c.Authorize(ctx, term(authReq("f1", CardApproved, 100), "cell-a")); err == nil {
		t.Fatal("an injected failure before the effect answered")
	}
	s.faults.set(&issuerproto.Faults{ErrorRate: 1, AfterEffect: true})
	if _, err := c.Authorize(ctx, term(authReq("f2", CardApproved, 100), "cell-a")); err == nil {
		t.Fatal("an injected failure after the effect answered")
	}
	s.faults.set(&issuerproto.Faults{})

	day := &issuerproto.ListEffectsRequest{From: timestamppb.New(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)), To: timestamppb.New(time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC))}
	list := func(req *issuerproto.ListEffectsRequest) (ids []string, effects []*issuerproto.RecordedEffect, pages int) {
		t.Helper()
		for {
			resp, err := c.ListEffects(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, e := range resp.GetEffects() {
				ids = append(ids, e.GetTransactionId())
				effects = append(effects, e)
			}
			if resp.GetNextPageToken() == "" {
				return ids, effects, pages
			}
			req.PageToken = resp.GetNextPageToken()
		}
	}
	ids, all, _ := list(day)
	if strings.Join(ids, ",") != "a1,d1,b1,c1,f2" {
		t.Fatalf("the day's effects %v, want a1,d1,b1,c1,f2 in the order applied", ids)
	}
	a1, d1, c1 := all[0], all[1], all[3]
	if !a1.GetApproved() || a1.GetAuthCode() != AuthCode(testPartner, "a1") || a1.GetAmountMinorUnits() != 1000 || a1.GetCurrency() != "EUR" ||
		a1.GetTerminalId() != "cell-a" || a1.GetKind() != issuerproto.AdjustKind_ADJUST_KIND_UNSPECIFIED || a1.GetAppliedAt().AsTime().IsZero() {
		t.Errorf("a1: %v", a1)
	}
	if d1.GetApproved() || d1.GetDeclineReason() != ReasonStolenCard || d1.GetAmountMinorUnits() != 0 ||
		d1.GetRequestedAmountMinorUnits() != 500 || d1.GetRequestedCurrency() != "EUR" {
		t.Errorf("d1: %v", d1)
	}
	if c1.GetKind() != issuerproto.AdjustKind_ADJUST_KIND_CAPTURE || c1.GetOriginalTransactionId() != "a1" || c1.GetAmountMinorUnits() != 400 || !c1.GetApproved() ||
		c1.GetRequestedAmountMinorUnits() != 400 || c1.GetRequestedCurrency() != "EUR" {
		t.Errorf("c1: %v", c1)
	}
	for _, e := range all {
		if strings.Contains(e.String(), CardApproved) || strings.Contains(e.String(), CardStolen) {
			t.Errorf("an effect carries a card number: %v", e)
		}
	}
	// One terminal, in pages of one: its own, each once.
	byCell := &issuerproto.ListEffectsRequest{From: day.From, To: day.To, TerminalId: "cell-a", PageSize: 1}
	if ids, _, pages := list(byCell); strings.Join(ids, ",") != "a1,d1,c1,f2" || pages < 4 {
		t.Errorf("cell-a's effects %v in %d pages, want a1,d1,c1,f2 in at least 4", ids, pages)
	}
	// A window: from d1's time (inclusive) to c1's (exclusive).
	window := &issuerproto.ListEffectsRequest{From: d1.GetAppliedAt(), To: c1.GetAppliedAt()}
	if ids, _, _ := list(window); strings.Join(ids, ",") != "d1,b1" {
		t.Errorf("the window's effects %v, want d1,b1", ids)
	}
}

// TestListEffectsRefusesBadRequests names the field at fault.
func TestListEffectsRefusesBadRequests(t *testing.T) {
	ctx := testCtx(t)
	c, _ := startGRPC(t, Config{})
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(t0.Add(d)) }
	for _, tc := range []struct {
		req   *issuerproto.ListEffectsRequest
		field string
	}{
		{&issuerproto.ListEffectsRequest{To: at(time.Hour)}, "from"},
		{&issuerproto.ListEffectsRequest{From: at(0)}, "to"},
		{&issuerproto.ListEffectsRequest{From: at(time.Hour), To: at(0)}, "to must be after from"},
		{&issuerproto.ListEffectsRequest{From: at(0), To: at(32 * 24 * time.Hour)}, "31 days"},
		{&issuerproto.ListEffectsRequest{From: at(0), To: at(time.Hour), PageSize: 1001}, "page_size"},
		{&issuerproto.ListEffectsRequest{From: at(0), To: at(time.Hour), PageToken: "zz!"}, "page_token"},
		{&issuerproto.ListEffectsRequest{From: at(0), To: at(time.Hour), PageToken: "100"}, "page_token"},
	} {
		_, err := c.ListEffects(ctx, tc.req)
		wantCode(t, err, codes.InvalidArgument)
		if err != nil && !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%v: %v, want it to name %s", tc.req, err, tc.field)
		}
	}
}

// FuzzListEffects: no window, page size or page token panics or fails
// with anything but INVALID_ARGUMENT, and a page is never larger than
// asked.
func FuzzListEffects(f *testing.F) {
	f.Add(int64(0), int64(3600), int32(0), "")
	f.Add(int64(0), int64(3600), int32(1), "1")
	f.Add(int64(-62135596800), int64(253402300799), int32(1000), "zzzzzzzzzzzzz")
	f.Add(int64(5), int64(5), int32(-1), "-1")
	s := New(Config{Now: func() time.Time { return time.Unix(100, 0) }})
	ctx := f.Context()
	for _, id := range []string{"a", "b", "c"} {
		if _, err := s.Authorize(ctx, authReq(id, CardApproved, 10)); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, from, to int64, size int32, token string) {
		resp, err := s.ListEffects(ctx, &issuerproto.ListEffectsRequest{
			From: &timestamppb.Timestamp{Seconds: from}, To: &timestamppb.Timestamp{Seconds: to}, PageSize: size, PageToken: token})
		if err != nil {
			wantCode(t, err, codes.InvalidArgument)
			return
		}
		if n := len(resp.GetEffects()); n > max(int(size), 0) && size != 0 || n > defEffectsPage {
			t.Fatalf("%d effects in a page of %d", n, size)
		}
	})
}
