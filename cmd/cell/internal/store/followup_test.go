package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
)

// approvedAuth records an approved authorization of 1250 GBP, id.
func approvedAuth(t *testing.T, s *Store, id string) {
	t.Helper()
	ctx := ctxT(t)
	r := record(id)
	if _, _, err := s.Insert(ctx, r); err != nil {
		t.Fatal(err)
	}
	for _, st := range []cellside.State{cellside.StateSending, cellside.StateApproved} {
		from := r.State
		r.State = st
		if err := s.Persist(ctx, r, from); err != nil {
			t.Fatal(err)
		}
	}
}

func holdReq(kind cellpayv1.PaymentType, id, orig string, minor int64) *cellproto.FollowUpRequest {
	return &cellproto.FollowUpRequest{Kind: kind, PartnerId: "p-001", TransactionId: id, OriginalTransactionId: orig,
		Market: "GB", Amount: &cellpayv1.Money{MinorUnits: minor, Currency: "GBP"}}
}

func hold(ctx context.Context, s *Store, req *cellproto.FollowUpRequest) (*cellside.Record, *cellside.Record, error) {
	return s.HoldFollowUp(ctx, key(req.GetTransactionId()), key(req.GetOriginalTransactionId()), func(o *cellside.Record) *cellside.Record {
		return cellside.FollowUpRecord(req, o, "cell-a", [32]byte{9}, "fp-cur", t0)
	})
}

// TestHoldFollowUpsConcurrently: captures of one authorization from two
// stores (two instances of a cell) at once, each approved or declined at
// random: the captures approved never pass the authorization, and the
// ledger in the row is the sum of the follow-ups' rows.
func TestHoldFollowUpsConcurrently(t *testing.T) {
	a, url := open(t)
	ctx := ctxT(t)
	b, err := Open(ctx, url, 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	approvedAuth(t, a, "auth-1")
	var (
		wg                         sync.WaitGroup
		mu                         sync.Mutex
		approved, refused, doubled int64
	)
	for i := range 40 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			req := holdReq(cellpayv1.PaymentType_CAPTURE, fmt.Sprintf("c-%d", i%30), "auth-1", 100)
			held, existing, err := hold(ctx, s, req)
			var r *cellside.Refused
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.As(err, &r):
				refused++
				return
			case err != nil:
				t.Error(err)
				return
			case existing != nil:
				doubled++
				return
			}
			ok := i%3 != 0
			out := cellside.FollowUpOutcome(held, ok, "A", "do_not_honor", t0.Add(time.Second))
			if err := s.Persist(ctx, out, cellside.StateSending); err != nil {
				t.Error(err)
			}
			if ok {
				approved += 100
			}
		})
	}
	wg.Wait()
	orig, err := a.Get(ctx, key("auth-1"))
	if err != nil {
		t.Fatal(err)
	}
	l := orig.Ledger
	if l.Captured != approved || l.HeldCapture != 0 || l.Captured > 1250 || !l.Valid() {
		t.Fatalf("ledger %+v; approved %d (refused %d, replays %d)", l, approved, refused, doubled)
	}
	// Ten IDs are sent twice: the second copy is a replay unless the
	// first was refused (nothing recorded).
	if doubled > 10 || refused == 0 {
		t.Fatalf("replays %d (at most 10), refused %d", doubled, refused)
	}
	var sum int64
	if err := a.pool.QueryRow(ctx, `SELECT coalesce(sum(amount), 0) FROM transactions
		WHERE original_transaction_id = 'auth-1' AND state = 'approved'`).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	if sum != l.Captured {
		t.Fatalf("approved rows sum to %d, the ledger says %d", sum, l.Captured)
	}
}

// TestFollowUpSettles: a refund's hold is released when it is declined or
// abandoned and counted when approved, with its callback only for a final
// state; the database refuses a ledger past its limits.
func TestFollowUpSettles(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	approvedAuth(t, s, "auth-1")
	held, _, err := hold(ctx, s, holdReq(cellpayv1.PaymentType_CAPTURE, "c-1", "auth-1", 1000))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Persist(ctx, cellside.FollowUpOutcome(held, true, "A", "", t0), cellside.StateSending); err != nil {
		t.Fatal(err)
	}
	for i, end := range []cellside.State{cellside.StateDeclined, cellside.StateAbandoned, cellside.StateApproved} {
		held, _, err := hold(ctx, s, holdReq(cellpayv1.PaymentType_REFUND, fmt.Sprintf("r-%d", i), "auth-1", 600))
		if err != nil {
			t.Fatal(err)
		}
		out := *held
		out.State = end
		if err := s.Persist(ctx, &out, cellside.StateSending); err != nil {
			t.Fatal(err)
		}
	}
	orig, err := s.Get(ctx, key("auth-1"))
	if err != nil {
		t.Fatal(err)
	}
	if l := orig.Ledger; l.Captured != 1000 || l.Refunded != 600 || l.HeldRefund != 0 {
		t.Fatalf("ledger %+v", l)
	}
	var events int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE transaction_id LIKE 'r-%'`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 2 {
		t.Fatalf("%d callback events for the refunds, want 2 (declined, approved; none for abandoned)", events)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE transactions SET refunded = 1001 WHERE transaction_id = 'auth-1'`); err == nil {
		t.Fatal("the database took refunds beyond the captures")
	}
	if _, _, err := hold(ctx, s, holdReq(cellpayv1.PaymentType_CAPTURE, "c-9", "auth-none", 1)); !errors.Is(err, cellside.ErrOriginalNotFound) {
		t.Fatalf("unknown original: %v", err)
	}
}
