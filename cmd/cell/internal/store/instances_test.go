package store

import (
	"errors"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
)

// sibling opens a second store on url as instance id, with a live lease.
func sibling(t *testing.T, url, id string) *Store {
	t.Helper()
	s, err := Connect(ctxT(t), url, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	s.SetInstance(id)
	if err := s.RenewLease(ctxT(t), time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	return s
}

func insert(t *testing.T, s *Store, id string, state cellside.State) {
	t.Helper()
	r := record(id)
	if ok, _, err := s.Insert(ctxT(t), r); err != nil || !ok {
		t.Fatalf("insert %s: %v, %v", id, ok, err)
	}
	if state != cellside.StateReceived {
		r.State = state
		if err := s.Persist(ctxT(t), r, cellside.StateReceived); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAbandonUnsentLeavesLiveSiblings: a starting instance abandons its own
// leftovers and those of instances whose lease ran out, never a live
// sibling's; the reconciler's sweep abandons a dead sibling's too.
func TestAbandonUnsentLeavesLiveSiblings(t *testing.T) {
	first, url := open(t)
	first.SetInstance("a")
	if err := first.RenewLease(ctxT(t), time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	b := sibling(t, url, "b")
	insert(t, first, "t-a", cellside.StateReceived)
	insert(t, b, "t-b", cellside.StateReceived)

	// b restarts (same name, lease still live): its own row goes, a's stays.
	if n, err := b.AbandonUnsent(ctxT(t), t0.Add(time.Second)); err != nil || n != 1 {
		t.Fatalf("b's AbandonUnsent = %d, %v; want its own row only", n, err)
	}
	if st := state(t, first, "t-a"); st != cellside.StateReceived {
		t.Fatalf("live sibling a's row is %s, want received", st)
	}
	if st := state(t, first, "t-b"); st != cellside.StateAbandoned {
		t.Fatalf("b's own leftover is %s, want abandoned", st)
	}

	// a's lease runs out: a new instance c abandons its row at start.
	insert(t, first, "t-a2", cellside.StateReceived)
	if err := first.RenewLease(ctxT(t), time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	c := sibling(t, url, "c")
	if n, err := c.AbandonUnsent(ctxT(t), t0.Add(time.Second)); err != nil || n != 2 {
		t.Fatalf("c's AbandonUnsent = %d, %v; want a's two rows", n, err)
	}

	// The sweep: a dead owner's row past the grace goes; a live one's
	// stays until it is stuck.
	insert(t, first, "t-a3", cellside.StateReceived) // a's lease expired
	insert(t, b, "t-b2", cellside.StateReceived)
	now := t0.Add(10 * time.Second)
	if n, err := c.AbandonOrphans(ctxT(t), now, now, now.Add(-time.Hour)); err != nil || n != 1 {
		t.Fatalf("AbandonOrphans = %d, %v; want a's row only", n, err)
	}
	if st := state(t, first, "t-b2"); st != cellside.StateReceived {
		t.Fatalf("live b's row is %s after the sweep", st)
	}
	if n, err := c.AbandonOrphans(ctxT(t), now, now, now); err != nil || n != 1 {
		t.Fatalf("AbandonOrphans of stuck rows = %d, %v; want b's", n, err)
	}
}

func state(t *testing.T, s *Store, id string) cellside.State {
	t.Helper()
	r, err := s.Get(ctxT(t), key(id))
	if err != nil {
		t.Fatal(err)
	}
	return r.State
}

// TestActiveFollowsOwnerAndLease: a sending row is active while its owner
// holds a live lease and has not released it, for every instance; the
// reconciler (Unresolved) leaves it alone meanwhile.
func TestActiveFollowsOwnerAndLease(t *testing.T) {
	a, url := open(t)
	a.SetInstance("a")
	if err := a.RenewLease(ctxT(t), time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	b := sibling(t, url, "b")
	now := time.Now().UTC().Truncate(time.Microsecond)
	r := record("t-1")
	r.CreatedAt, r.UpdatedAt = now, now
	if ok, _, err := a.Insert(ctxT(t), r); err != nil || !ok {
		t.Fatal(ok, err)
	}
	r.State = cellside.StateSending
	if err := a.Persist(ctxT(t), r, cellside.StateReceived); err != nil {
		t.Fatal(err)
	}
	active := func(s *Store) bool {
		t.Helper()
		ok, err := s.Active(ctxT(t), key("t-1"))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	unresolved := func() int {
		t.Helper()
		recs, err := b.Unresolved(ctxT(t), now.Add(time.Hour), 10)
		if err != nil {
			t.Fatal(err)
		}
		return len(recs)
	}
	if !active(a) || !active(b) || unresolved() != 0 {
		t.Fatalf("in flight at a: active at a %v, at b %v, unresolved %d; want true, true, 0", active(a), active(b), unresolved())
	}
	if got, ok, err := b.GetActive(ctxT(t), key("t-1")); err != nil || !ok || got.State != cellside.StateSending || got.TransactionID != "t-1" {
		t.Fatalf("GetActive at b = %+v, %v, %v; want the sending record, active", got, ok, err)
	}
	if _, _, err := b.GetActive(ctxT(t), key("t-none")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetActive of no record: %v, want ErrNotFound", err)
	}
	if ok, err := b.Active(ctxT(t), key("t-none")); err != nil || ok {
		t.Fatalf("Active of no record = %v, %v", ok, err)
	}
	// b cannot release a's row; a's lease running out frees it.
	if err := b.Release(ctxT(t), key("t-1")); err != nil || !active(b) {
		t.Fatalf("after b's release: %v, active %v; want still active", err, active(b))
	}
	if err := a.RenewLease(ctxT(t), time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if active(b) || unresolved() != 1 {
		t.Fatalf("a's lease ran out: active at b %v, unresolved %d; want false, 1", active(b), unresolved())
	}
	// a's own view: its attempt is still its own until it releases.
	if !active(a) {
		t.Fatal("a no longer sees its own attempt")
	}
	if err := a.Release(ctxT(t), key("t-1")); err != nil || active(a) {
		t.Fatalf("after a's release: %v, active %v", err, active(a))
	}
	// A final state ends ownership whoever wrote it.
	if err := a.RenewLease(ctxT(t), time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	insert(t, a, "t-2", cellside.StateApproved)
	if ok, err := b.Active(ctxT(t), key("t-2")); err != nil || ok {
		t.Fatalf("final row active: %v, %v", ok, err)
	}
}

// TestServedRefdataIsTheMinimum: the cell serves what all its live
// instances serve.
func TestServedRefdataIsTheMinimum(t *testing.T) {
	a, url := open(t)
	a.SetInstance("a")
	b := sibling(t, url, "b")
	if _, ok, err := a.ServedRefdata(ctxT(t)); err != nil || ok {
		t.Fatalf("nothing served: %v, %v", ok, err)
	}
	v := func(n uint64) *uint64 { return &n }
	if err := a.RenewLease(ctxT(t), time.Minute, v(7)); err != nil {
		t.Fatal(err)
	}
	if err := b.RenewLease(ctxT(t), time.Minute, v(5)); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := a.ServedRefdata(ctxT(t)); err != nil || !ok || got != 5 {
		t.Fatalf("ServedRefdata = %d, %v, %v; want 5", got, ok, err)
	}
	if err := b.DropLease(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := a.ServedRefdata(ctxT(t)); err != nil || !ok || got != 7 {
		t.Fatalf("after b left: %d, %v, %v; want 7", got, ok, err)
	}
}

// TestReconcilerLockIsExclusive: one session holds the lock; once it
// closes, another takes it.
func TestReconcilerLockIsExclusive(t *testing.T) {
	a, url := open(t)
	b := sibling(t, url, "b")
	sa, err := a.LockSession(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.LockSession(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctxT(t))
	if ok, err := sa.TryLock(ctxT(t), ReconcilerLock); err != nil || !ok {
		t.Fatalf("a: %v, %v", ok, err)
	}
	if ok, err := sb.TryLock(ctxT(t), ReconcilerLock); err != nil || ok {
		t.Fatalf("b took a held lock: %v, %v", ok, err)
	}
	if err := sa.Check(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	sa.Close(ctxT(t))
	// The server releases a's lock when its backend has seen the close,
	// a moment after Close returns.
	testutil.Eventually(t, 10*time.Second, "b takes the lock a's closed session held", func() bool {
		ok, err := sb.TryLock(ctxT(t), ReconcilerLock)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	})
}

// TestRestartReleasesItsSendingRows: an instance restarted under its name
// releases the sending rows of its previous life (no attempt works on them
// any more) so that the reconciler resolves them at once.
func TestRestartReleasesItsSendingRows(t *testing.T) {
	a, url := open(t)
	a.SetInstance("a")
	if err := a.RenewLease(ctxT(t), time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	b := sibling(t, url, "b")
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, s := range []*Store{a, b} {
		r := record("t-" + s.Instance())
		r.CreatedAt, r.UpdatedAt = now, now
		if ok, _, err := s.Insert(ctxT(t), r); err != nil || !ok {
			t.Fatal(ok, err)
		}
		r.State = cellside.StateSending
		if err := s.Persist(ctxT(t), r, cellside.StateReceived); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.AbandonUnsent(ctxT(t), now); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Active(ctxT(t), key("t-a")); err != nil || ok {
		t.Fatalf("a's previous life's sending row after a's restart: active %v, %v; want released", ok, err)
	}
	if ok, err := a.Active(ctxT(t), key("t-b")); err != nil || !ok {
		t.Fatalf("live b's sending row after a's restart: active %v, %v; want still b's", ok, err)
	}
	if st := state(t, a, "t-a"); st != cellside.StateSending {
		t.Fatalf("a's sending row is %s after the restart, want sending (past its PNR)", st)
	}
}

// TestRestartLeavesDecidingRows: a row deciding (a decision before the
// PNR on its way into the directory) is never abandoned by a restart nor
// by the sweep: it is released for the reconciler, which settles it by
// the directory; while its attempt lives, the reconciler leaves it alone.
func TestRestartLeavesDecidingRows(t *testing.T) {
	a, _ := open(t)
	a.SetInstance("a")
	if err := a.RenewLease(ctxT(t), time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	r := record("t-dec")
	r.CreatedAt, r.UpdatedAt = now, now
	if ok, _, err := a.Insert(ctxT(t), r); err != nil || !ok {
		t.Fatal(ok, err)
	}
	r.State, r.DeclineReason = cellside.StateDeciding, "amount_limit"
	if err := a.Persist(ctxT(t), r, cellside.StateReceived); err != nil {
		t.Fatal(err)
	}
	if recs, err := a.Unresolved(ctxT(t), now.Add(time.Hour), 10); err != nil || len(recs) != 0 {
		t.Fatalf("Unresolved while its attempt lives: %v, %v; want none", recs, err)
	}
	if _, err := a.AbandonUnsent(ctxT(t), now); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AbandonOrphans(ctxT(t), now, now.Add(time.Hour), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	recs, err := a.Unresolved(ctxT(t), now.Add(time.Hour), 10)
	if err != nil || len(recs) != 1 || recs[0].State != cellside.StateDeciding || recs[0].DeclineReason != "amount_limit" {
		t.Fatalf("after a restart: Unresolved %v, %v; want the deciding row, its reason kept", recs, err)
	}
}
