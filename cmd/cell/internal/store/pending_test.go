package store

import (
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
)

// TestOldestPending: zero with no PENDING transaction; the creation time of
// the oldest one in state sending, ignoring received and final ones; zero
// again once it is resolved.
func TestOldestPending(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	oldest := func() time.Time {
		t.Helper()
		ts, err := s.OldestPending(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	if ts := oldest(); !ts.IsZero() {
		t.Fatalf("empty table: %v, want zero", ts)
	}
	received := record("t-received")
	received.CreatedAt = t0.Add(-time.Hour)
	if _, _, err := s.Insert(ctx, received); err != nil {
		t.Fatal(err)
	}
	finalize(t, s, "t-final", cellside.StateApproved)
	var pending []*cellside.Record
	for i, age := range []time.Duration{time.Minute, 10 * time.Minute} {
		r := record("t-pending-" + string(rune('a'+i)))
		r.CreatedAt = t0.Add(-age)
		if _, _, err := s.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
		r.State, r.UpdatedAt = cellside.StateSending, t0
		if err := s.Persist(ctx, r, cellside.StateReceived); err != nil {
			t.Fatal(err)
		}
		pending = append(pending, r)
	}
	if ts := oldest(); !ts.Equal(t0.Add(-10 * time.Minute)) {
		t.Fatalf("oldest pending = %v, want %v", ts, t0.Add(-10*time.Minute))
	}
	for _, r := range pending {
		r.State, r.UpdatedAt, r.DeclineReason = cellside.StateDeclined, t0.Add(time.Second), "do_not_honor"
		if err := s.Persist(ctx, r, cellside.StateSending); err != nil {
			t.Fatal(err)
		}
	}
	if ts := oldest(); !ts.IsZero() {
		t.Fatalf("all resolved: %v, want zero", ts)
	}
}
