package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/webhook"
)

// finalize records r as final state st, through sending unless from says.
func finalize(t *testing.T, s *Store, id string, st cellside.State) *cellside.Record {
	t.Helper()
	ctx := ctxT(t)
	r := record(id)
	if _, _, err := s.Insert(ctx, r); err != nil {
		t.Fatal(err)
	}
	r.State, r.UpdatedAt = cellside.StateSending, t0.Add(time.Second)
	if err := s.Persist(ctx, r, cellside.StateReceived); err != nil {
		t.Fatal(err)
	}
	r.State, r.UpdatedAt = st, t0.Add(2*time.Second)
	if st == cellside.StateApproved {
		r.AuthCode = "A1B2C3"
	} else {
		r.DeclineReason = "do_not_honor"
	}
	if err := s.Persist(ctx, r, cellside.StateSending); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestFinalOutcomeWritesItsEvent: every final state writes exactly one
// outbox row with the record's content; a non-final one none; a stale
// write neither the outcome nor an event.
func TestFinalOutcomeWritesItsEvent(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	for i, st := range []cellside.State{cellside.StateApproved, cellside.StateDeclined, cellside.StateFailed} {
		r := finalize(t, s, fmt.Sprintf("t-final-%d", i), st)
		// A stale write (the reconciler racing the attempt) records nothing.
		again := *r
		again.State = cellside.StateDeclined
		if err := s.Persist(ctx, &again, cellside.StateSending); !errors.Is(err, ErrStateChanged) {
			t.Fatalf("stale final Persist: %v", err)
		}
	}
	rows, err := s.ListCallbacks(ctx, CallbackFilter{PartnerID: "p-001"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("%d outbox rows for 3 final outcomes", len(rows))
	}
	for _, c := range rows {
		rec, err := s.Get(ctx, key(c.TransactionID))
		if err != nil {
			t.Fatal(err)
		}
		var ev webhook.Event
		if err := json.Unmarshal(c.Body, &ev); err != nil {
			t.Fatal(err)
		}
		var txn cellpayv1.Transaction
		if err := protojson.Unmarshal(ev.Data, &txn); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&txn, rec.Transaction()) || ev.Type != webhook.EventTypeFinal || !ev.Timestamp.Equal(rec.UpdatedAt) {
			t.Fatalf("event %s:\n got %v\nwant %v", c.EventID, &txn, rec.Transaction())
		}
		if c.EventID != webhook.EventID("p-001", c.TransactionID) || c.Status != CallbackPending || c.Attempts != 0 {
			t.Fatalf("row %+v", c)
		}
		if strings.Contains(string(c.Body), "4242424242424242") || !strings.Contains(string(c.Body), "424242******4242") {
			t.Fatalf("body %s: want the masked card only", c.Body)
		}
	}
	// A transaction still pending has no event yet.
	r := record("t-pending")
	if _, _, err := s.Insert(ctx, r); err != nil {
		t.Fatal(err)
	}
	r.State = cellside.StateSending
	if err := s.Persist(ctx, r, cellside.StateReceived); err != nil {
		t.Fatal(err)
	}
	if rows, _ := s.ListCallbacks(ctx, CallbackFilter{}); len(rows) != 3 {
		t.Fatalf("a pending transaction wrote an event: %d rows", len(rows))
	}
}

// TestClaimIsExclusive: several claimers at once (notifier instances
// sharing the database) never get the same row; a row whose lease ran out
// is claimed again, and the old owner's result is refused; with the
// results written alone and group-committed.
func TestClaimIsExclusive(t *testing.T) {
	t.Run("alone", func(t *testing.T) { claimIsExclusive(t, false) })
	t.Run("group commit", func(t *testing.T) { claimIsExclusive(t, true) })
}

func claimIsExclusive(t *testing.T, group bool) {
	s, _ := open(t)
	if group {
		s.EnableGroupCommit(GroupCommit{})
	}
	ctx := ctxT(t)
	const n = 40
	for i := range n {
		finalize(t, s, fmt.Sprintf("t-claim-%d", i), cellside.StateApproved)
	}
	now := t0.Add(time.Minute)
	var mu sync.Mutex
	seen := map[int64]string{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			owner := fmt.Sprintf("w%d", w)
			for {
				got, err := s.ClaimCallbacks(ctx, owner, now, time.Minute, 3)
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, c := range got {
					if prev, ok := seen[c.ID]; ok {
						t.Errorf("row %d claimed by %s and %s", c.ID, prev, owner)
					}
					seen[c.ID] = owner
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("claimed %d of %d rows", len(seen), n)
	}
	// Leases live: nothing to claim. After they run out, w9 takes one, and
	// the old owner's result is refused.
	if got, _ := s.ClaimCallbacks(ctx, "w9", now.Add(30*time.Second), time.Minute, 100); len(got) != 0 {
		t.Fatalf("claimed %d rows under live leases", len(got))
	}
	got, err := s.ClaimCallbacks(ctx, "w9", now.Add(2*time.Minute), time.Minute, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("after the leases: %d, %v", len(got), err)
	}
	c := got[0]
	done := Attempt{Status: CallbackDelivered, Attempts: 1, Now: now, DeliveredTo: "https://x"}
	if err := s.RecordAttempt(ctx, c.ID, seen[c.ID], done); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("old owner's result: %v, want ErrLeaseLost", err)
	}
	if err := s.RecordAttempt(ctx, c.ID, "w9", done); err != nil {
		t.Fatal(err)
	}
	b, err := s.CallbackBacklog(ctx)
	if err != nil || b.Pending != n-1 || b.Dead != 0 {
		t.Fatalf("backlog %+v, %v", b, err)
	}
}

func TestRetryDeadAndReplay(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	finalize(t, s, "t-dead", cellside.StateDeclined)
	finalize(t, s, "t-ok", cellside.StateApproved)
	now := t0.Add(time.Minute)
	got, err := s.ClaimCallbacks(ctx, "w", now, time.Minute, 10)
	if err != nil || len(got) != 2 {
		t.Fatalf("claim: %d, %v", len(got), err)
	}
	for _, c := range got {
		a := Attempt{Status: CallbackDead, Attempts: 8, LastError: "HTTP 500", LastHTTPStatus: 500, LastEndpoint: "https://a", Now: now}
		if c.TransactionID == "t-ok" {
			a = Attempt{Status: CallbackPending, Attempts: 1, NextAttemptAt: now.Add(time.Hour), LastError: "timeout", Now: now}
		}
		if err := s.RecordAttempt(ctx, c.ID, "w", a); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := s.ClaimCallbacks(ctx, "w", now.Add(time.Minute), time.Minute, 10); len(got) != 0 {
		t.Fatalf("claimed %d rows: dead and not-yet-due rows must wait", len(got))
	}
	dead, _ := s.ListCallbacks(ctx, CallbackFilter{Statuses: []string{CallbackDead}})
	failed, _ := s.ListCallbacks(ctx, CallbackFilter{Failed: true})
	if len(dead) != 1 || dead[0].TransactionID != "t-dead" || dead[0].LastHTTPStatus != 500 || len(failed) != 2 {
		t.Fatalf("dead %+v, failed %d", dead, len(failed))
	}
	if err := s.DisableEndpoint(ctx, "p-001", "https://a", "410 Gone", now); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.DisabledEndpoints(ctx); len(d["p-001"]) != 1 {
		t.Fatalf("disabled %v", d)
	}
	n, err := s.ReplayCallbacks(ctx, "p-001", dead[0].EventID, time.Time{}, now.Add(2*time.Minute))
	if err != nil || n != 1 {
		t.Fatalf("replay one: %d, %v", n, err)
	}
	if d, _ := s.DisabledEndpoints(ctx); len(d) != 0 {
		t.Fatalf("replay left endpoints disabled: %v", d)
	}
	if n, _ := s.ReplayCallbacks(ctx, "p-002", "", time.Time{}, now); n != 0 {
		t.Fatalf("another partner's replay touched %d rows", n)
	}
	if n, _ := s.ReplayCallbacks(ctx, "p-001", "", t0, now.Add(2*time.Minute)); n != 2 {
		t.Fatalf("replay from a time: %d rows, want both", n)
	}
	got, _ = s.ClaimCallbacks(ctx, "w", now.Add(2*time.Minute), time.Minute, 10)
	if len(got) != 2 || got[0].Attempts != 0 {
		t.Fatalf("after replay claimed %+v", got)
	}
}
