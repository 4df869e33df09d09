package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
)

// lifecycle runs one transaction's three durable writes, each
// group-committed: the insert, the sending state and the approval.
func lifecycle(ctx context.Context, s *Store, id string) error {
	r := record(id)
	if ins, _, err := s.Insert(ctx, r); err != nil || !ins {
		return fmt.Errorf("%s: insert %v, %v", id, ins, err)
	}
	r.State = cellside.StateSending
	if err := s.Persist(ctx, r, cellside.StateReceived); err != nil {
		return fmt.Errorf("%s: sending: %w", id, err)
	}
	r.State, r.AuthCode = cellside.StateApproved, "A1"
	if err := s.Persist(ctx, r, cellside.StateSending); err != nil {
		return fmt.Errorf("%s: approve: %w", id, err)
	}
	return nil
}

// TestGroupCommitShares: concurrent transactions' writes share commits
// (fewer batches than writes), and every write is durable and reported as
// it is, as without group commit: each record final, each outbox event
// there once, a conditional write from a state already left refused.
func TestGroupCommitShares(t *testing.T) {
	s, _ := open(t)
	s.EnableGroupCommit(GroupCommit{Committers: 1})
	ctx := ctxT(t)
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if err := lifecycle(ctx, s, fmt.Sprintf("g-%d", i)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := s.GroupCommitStats()
	if st.Writes != 3*n || st.Batches >= st.Writes {
		t.Fatalf("group commit: %d writes in %d batches, want %d inserts and persists in fewer batches", st.Writes, st.Batches, 3*n)
	}
	t.Logf("%d writes in %d batches", st.Writes, st.Batches)
	for i := range n {
		got, err := s.Get(ctx, key(fmt.Sprintf("g-%d", i)))
		if err != nil || got.State != cellside.StateApproved {
			t.Fatalf("g-%d: %v, %v", i, got, err)
		}
	}
	var events int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE transaction_id LIKE 'g-%'").Scan(&events); err != nil || events != n {
		t.Fatalf("outbox: %d events, %v; want %d", events, err, n)
	}
	// A persist from a state the record has left is refused, batched too.
	r := record("g-0")
	r.State = cellside.StateDeclined
	if err := s.Persist(ctx, r, cellside.StateSending); !errors.Is(err, ErrStateChanged) {
		t.Fatalf("stale persist: %v, want ErrStateChanged", err)
	}
	// A duplicate insert answers the existing record.
	if ins, ex, err := s.Insert(ctx, record("g-1")); err != nil || ins || ex == nil || ex.State != cellside.StateApproved {
		t.Fatalf("duplicate insert: %v, %+v, %v", ins, ex, err)
	}
}

// TestGroupCommitBadWriteAlone: a write the server refuses rolls its
// batch back whole; the others of the batch are run again alone and
// commit, and only the bad one fails.
func TestGroupCommitBadWriteAlone(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	c := &committer{cfg: GroupCommit{BatchTimeout: 5 * time.Second}, exec: s.pool.SendBatch}
	insert := func(id string, amount int64) *write {
		r := record(id)
		r.Amount = amount // 0 breaks CHECK (amount > 0)
		return &write{ctx: ctx, sql: `INSERT INTO transactions (` + columns + `, owner)
			SELECT $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23,$24,$25,$26,$27
			WHERE cellpay_claim_key($7, $1)`, args: append(args(r), ""), done: make(chan writeResult, 1)}
	}
	good1, bad, good2 := insert("b-1", 100), insert("b-2", 0), insert("b-3", 100)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	late := insert("b-4", 100)
	late.ctx = gone
	c.commit([]*write{good1, bad, good2, late})
	for _, w := range []*write{good1, good2} {
		if r := <-w.done; r.err != nil || r.n != 1 {
			t.Fatalf("good write: %+v", r)
		}
	}
	if r := <-bad.done; r.err == nil {
		t.Fatal("a write breaking a CHECK succeeded")
	}
	if r := <-late.done; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("a write whose caller left while queued: %+v", r)
	}
	for id, want := range map[string]bool{"b-1": true, "b-2": false, "b-3": true, "b-4": false} {
		_, err := s.Get(ctx, key(id))
		if got := err == nil; got != want {
			t.Errorf("%s stored %v, want %v (%v)", id, got, want, err)
		}
	}
}

// TestGroupCommitClose: Close answers what is still queued and later
// writes fail at once; nothing hangs.
func TestGroupCommitClose(t *testing.T) {
	s, _ := open(t)
	s.EnableGroupCommit(GroupCommit{})
	ctx := ctxT(t)
	if err := lifecycle(ctx, s, "c-1"); err != nil {
		t.Fatal(err)
	}
	if ins, _, err := s.Insert(ctx, record("c-2")); err != nil || !ins {
		t.Fatalf("insert: %v, %v", ins, err)
	}
	s.group.close()
	r := record("c-2")
	r.State = cellside.StateSending
	if err := s.Persist(ctx, r, cellside.StateReceived); err == nil {
		t.Fatal("persist after close succeeded")
	}
	s.group = nil // Close (cleanup) would close it again
}

// TestGroupCommitReclaimHasOneWinner: attempts that reclaim one abandoned
// record at once, their reclaims queued for shared commits (in one batch
// or several), leave one winner; every other is handed the winner's
// record, received. The orchestrator's machine relies on it: the record,
// not the directory claim, decides which attempt restarts the transaction.
func TestGroupCommitReclaimHasOneWinner(t *testing.T) {
	s, _ := open(t)
	s.EnableGroupCommit(GroupCommit{Committers: 2})
	ctx := ctxT(t)
	r := record("rc-1")
	if ins, _, err := s.Insert(ctx, r); err != nil || !ins {
		t.Fatalf("insert: %v, %v", ins, err)
	}
	r.State = cellside.StateAbandoned
	if err := s.Persist(ctx, r, cellside.StateReceived); err != nil {
		t.Fatal(err)
	}
	const n = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	winners, losers := 0, 0
	for i := range n {
		wg.Go(func() {
			a := record("rc-1")
			a.Attempt = int32(i + 2)
			ok, ex, err := s.Reclaim(ctx, a)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("reclaim %d: %v", i, err)
			case ok:
				winners++
			case ex == nil || ex.State != cellside.StateReceived:
				t.Errorf("reclaim %d lost, handed %+v; want the winner's received record", i, ex)
			default:
				losers++
			}
		})
	}
	wg.Wait()
	if winners != 1 || losers != n-1 {
		t.Fatalf("%d winners and %d losers of %d reclaims, want 1 and %d", winners, losers, n, n-1)
	}
}
