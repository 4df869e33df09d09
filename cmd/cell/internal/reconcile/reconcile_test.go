package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/cmd/cell/internal/orchestrator"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// memStore is an in-memory Store for the reconciler's pure logic.
type memStore struct {
	mu   sync.Mutex
	recs map[string]*orchestrator.Record
}

func (m *memStore) Unresolved(_ context.Context, before time.Time, limit int) ([]*orchestrator.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*orchestrator.Record
	for _, r := range m.recs {
		if r.State == orchestrator.StateSending && r.UpdatedAt.Before(before) && len(out) < limit {
			c := *r
			out = append(out, &c)
		}
	}
	return out, nil
}

func (m *memStore) Persist(_ context.Context, r *orchestrator.Record, from orchestrator.State) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.recs[r.TransactionID].State != from {
		return errors.New("state changed")
	}
	c := *r
	m.recs[r.TransactionID] = &c
	return nil
}

type fakeIssuer struct {
	answers  map[string]*issuerproto.AuthorizeResponse
	down     bool
	inquired []string
}

func (f *fakeIssuer) Inquire(_ context.Context, in *issuerproto.InquireRequest, _ ...grpc.CallOption) (*issuerproto.AuthorizeResponse, error) {
	f.inquired = append(f.inquired, in.GetTransactionId())
	if f.down {
		return nil, status.Error(codes.Unavailable, "down")
	}
	if a, ok := f.answers[in.GetTransactionId()]; ok {
		return a, nil
	}
	return nil, status.Error(codes.NotFound, "never seen")
}

func TestResolves(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	rec := func(id string, state orchestrator.State, age time.Duration) *orchestrator.Record {
		return &orchestrator.Record{TransactionID: id, State: state, UpdatedAt: now.Add(-age)}
	}
	st := &memStore{recs: map[string]*orchestrator.Record{
		"approved":  rec("approved", orchestrator.StateSending, 5*time.Second),
		"declined":  rec("declined", orchestrator.StateSending, 5*time.Second),
		"lost-new":  rec("lost-new", orchestrator.StateSending, 5*time.Second),
		"lost-old":  rec("lost-old", orchestrator.StateSending, time.Minute),
		"too-young": rec("too-young", orchestrator.StateSending, 100*time.Millisecond),
		"busy":      rec("busy", orchestrator.StateSending, 5*time.Second),
		"final":     rec("final", orchestrator.StateApproved, time.Minute),
		"received":  rec("received", orchestrator.StateReceived, time.Minute),
	}}
	iss := &fakeIssuer{answers: map[string]*issuerproto.AuthorizeResponse{
		"approved": {Approved: true, AuthCode: "A1"},
		"declined": {DeclineReason: "do_not_honor"},
		"busy":     {Approved: true, AuthCode: "B1"},
	}}
	r, err := New(Config{Store: st, Issuer: iss, Now: func() time.Time { return now },
		Busy: func(id string) bool { return id == "busy" }, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	n, err := r.Once(context.Background())
	if err != nil || n != 3 {
		t.Fatalf("Once = %d, %v; want 3 resolved", n, err)
	}
	want := map[string]string{
		"approved": "approved/A1/", "declined": "declined//do_not_honor", "lost-old": "failed//issuer_not_reached",
		"lost-new": "sending//", "too-young": "sending//", "busy": "sending//", "final": "approved//", "received": "received//",
	}
	for id, w := range want {
		r := st.recs[id]
		if got := string(r.State) + "/" + r.AuthCode + "/" + r.DeclineReason; got != w {
			t.Errorf("%s: %s, want %s", id, got, w)
		}
	}
	for _, id := range iss.inquired {
		if id == "final" || id == "received" || id == "busy" || id == "too-young" {
			t.Errorf("inquired about %s", id)
		}
	}
	// The issuer down: nothing changes, no error escapes per record.
	st.recs["x"] = rec("x", orchestrator.StateSending, time.Minute)
	iss.down = true
	if n, err := r.Once(context.Background()); err != nil || n != 0 || st.recs["x"].State != orchestrator.StateSending {
		t.Fatalf("issuer down: %d, %v, %s", n, err, st.recs["x"].State)
	}
}
