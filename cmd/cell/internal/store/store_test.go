package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func open(t *testing.T) (*Store, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := pgtest.NewDatabase(t)
	s, err := Open(ctx, url, 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, url
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 123456000, time.UTC)

// key is transaction id of p-001, the partner of record(id).
func key(id string) idempotency.Key { return idempotency.Key{PartnerID: "p-001", TransactionID: id} }

func record(id string) *cellside.Record {
	return &cellside.Record{
		TransactionID: id, Fingerprint: [32]byte{1, 2, 3}, State: cellside.StateReceived,
		PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION, PartnerID: "p-001", Market: "GB",
		Amount: 1250, Currency: "GBP", SettlementAmount: 1250, SettlementCurrency: "GBP", RiskAmount: 1486,
		MerchantID: "m-1", MCC: "5411", MerchantCountry: "GB", MaskedPAN: "424242******4242",
		PANHash: []byte{0xca, 0xfe}, PANHashKeyID: "pan-cur", FingerprintKeyID: "fp-cur", RefdataVersion: "rd-1", RouteRule: "default", Attempt: 1, CellID: "cell-a",
		CreatedAt: t0, UpdatedAt: t0,
	}
}

func TestInsertGetPersist(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	r := record("t-1")
	ins, ex, err := s.Insert(ctx, r)
	if err != nil || !ins || ex != nil {
		t.Fatalf("Insert = %v, %v, %v", ins, ex, err)
	}
	got, err := s.Get(ctx, key("t-1"))
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got.Transaction(), r.Transaction()) {
		t.Fatalf("round trip:\n got %v\nwant %v", got.Transaction(), r.Transaction())
	}
	// A second insert of the same ID returns the first record untouched.
	r2 := record("t-1")
	r2.Amount = 9999
	ins, ex, err = s.Insert(ctx, r2)
	if err != nil || ins || ex == nil || ex.Amount != 1250 {
		t.Fatalf("duplicate Insert = %v, %+v, %v", ins, ex, err)
	}
	// Conditional persist: received -> sending -> approved.
	r.State, r.UpdatedAt = cellside.StateSending, t0.Add(time.Second)
	if err := s.Persist(ctx, r, cellside.StateReceived); err != nil {
		t.Fatal(err)
	}
	if err := s.Persist(ctx, r, cellside.StateReceived); !errors.Is(err, ErrStateChanged) {
		t.Fatalf("stale Persist: %v, want ErrStateChanged", err)
	}
	r.State, r.AuthCode = cellside.StateApproved, "A1B2C3"
	if err := s.Persist(ctx, r, cellside.StateSending); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Get(ctx, key("t-1"))
	if got.State != cellside.StateApproved || got.AuthCode != "A1B2C3" || !got.UpdatedAt.Equal(r.UpdatedAt) {
		t.Fatalf("after persist: %+v", got)
	}
	if _, err := s.Get(ctx, key("nope")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get missing: %v", err)
	}
}

func TestRoundTripIsExact(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	r := record("t-exact")
	if _, _, err := s.Insert(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, r.Key())
	if err != nil {
		t.Fatal(err)
	}
	// The answer a partner got must equal what a later read returns.
	if !proto.Equal(r.Transaction(), got.Transaction()) {
		t.Fatalf("record changed in the store:\n%v\n%v", r.Transaction(), got.Transaction())
	}
	if got.Fingerprint != r.Fingerprint || string(got.PANHash) != string(r.PANHash) {
		t.Fatal("fingerprint or PAN hash changed in the store")
	}
}

func TestMaskedPANConstraint(t *testing.T) {
	s, _ := open(t)
	r := record("t-pan")
	r.MaskedPAN = "4242424242424242"
	if _, _, err := s.Insert(ctxT(t), r); err == nil {
		t.Fatal("the table accepted a full card number")
	}
}

func TestVelocity(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	states := []cellside.State{cellside.StateApproved, cellside.StateSending, cellside.StateReceived,
		cellside.StateDeclined, cellside.StateFailed, cellside.StateAbandoned}
	for i, st := range states {
		r := record("v-" + string(st))
		r.State, r.CreatedAt = st, t0.Add(time.Duration(i)*time.Second)
		if _, _, err := s.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	old := record("v-old")
	old.State, old.CreatedAt = cellside.StateApproved, t0.Add(-time.Hour)
	other := record("v-other-card")
	other.PANHash = []byte{1}
	for _, r := range []*cellside.Record{old, other} {
		if _, _, err := s.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	n, amt, err := s.Velocity(ctx, []card.KeyedHash{{KeyID: "pan-cur", Sum: []byte{0xca, 0xfe}}}, t0.Add(-time.Minute), key("v-received"))
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || amt != 2*1486 {
		t.Fatalf("Velocity = %d, %d; want 2 (approved, sending), %d", n, amt, 2*1486)
	}
}

func TestAbandonAndReclaim(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	for _, id := range []string{"a-1", "a-2"} {
		if _, _, err := s.Insert(ctx, record(id)); err != nil {
			t.Fatal(err)
		}
	}
	sent := record("a-sent")
	sent.State = cellside.StateSending
	if _, _, err := s.Insert(ctx, sent); err != nil {
		t.Fatal(err)
	}
	n, err := s.AbandonUnsent(ctx, t0.Add(time.Minute))
	if err != nil || n != 2 {
		t.Fatalf("AbandonUnsent = %d, %v; want 2", n, err)
	}
	if got, _ := s.Get(ctx, key("a-sent")); got.State != cellside.StateSending {
		t.Fatalf("a transaction past its PNR was abandoned: %s", got.State)
	}
	r := record("a-1")
	r.Attempt = 2
	ok, _, err := s.Reclaim(ctx, r)
	if err != nil || !ok {
		t.Fatalf("Reclaim = %v, %v", ok, err)
	}
	ok, ex, err := s.Reclaim(ctx, r)
	if err != nil || ok || ex.State != cellside.StateReceived || ex.Attempt != 2 {
		t.Fatalf("second Reclaim = %v, %+v, %v", ok, ex, err)
	}
}

// TestConcurrentInsertOneWinner: many attempts at one ID race; exactly one
// inserts, every other one sees the winner's record.
func TestConcurrentInsertOneWinner(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ins, ex, err := s.Insert(ctx, record("race"))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Error(err)
				return
			}
			if ins {
				wins++
			} else if ex == nil {
				t.Error("lost the race but got no record")
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d inserts won, want 1", wins)
	}
}

func TestPolicyAndMigrationsIdempotent(t *testing.T) {
	s, url := open(t)
	ctx := ctxT(t)
	p, err := s.Policy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.LimitCurrency != "EUR" || p.VelocityWindow != 10*time.Minute || p.VelocityMaxCount != 20 || p.MaxAmount["high"] != 200000 {
		t.Fatalf("policy = %+v", p)
	}
	// Opening again re-runs no migration and keeps the data.
	if _, _, err := s.Insert(ctx, record("keep")); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(ctx, url, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s2.Get(ctx, key("keep")); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v int
	all, _ := migrations.ReadDir("migrations")
	if err := conn.QueryRow(ctx, "SELECT version FROM schema_version").Scan(&v); err != nil || v != len(all) {
		t.Fatalf("schema version = %d, %v", v, err)
	}
}

func TestUnresolved(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	for i, st := range []cellside.State{cellside.StateSending, cellside.StateSending, cellside.StateApproved, cellside.StateReceived} {
		r := record(fmt.Sprintf("u-%d", i))
		r.State, r.UpdatedAt = st, t0.Add(time.Duration(i)*time.Second)
		if _, _, err := s.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	late := record("u-late")
	late.State, late.UpdatedAt = cellside.StateSending, t0.Add(time.Hour)
	if _, _, err := s.Insert(ctx, late); err != nil {
		t.Fatal(err)
	}
	got, err := s.Unresolved(ctx, t0.Add(time.Minute), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].TransactionID != "u-0" || got[1].TransactionID != "u-1" {
		t.Fatalf("Unresolved = %d records", len(got))
	}
}

// TestAbandonOwn: the step back of an attempt whose write to sending may
// or may not have committed applies from either state, to the row that
// attempt wrote only: not once another attempt reclaimed the row, not to
// another instance's row, and not twice.
func TestAbandonOwn(t *testing.T) {
	s, url := open(t)
	ctx := ctxT(t)
	s.SetInstance("inst-1")
	back := func(r *cellside.Record) error {
		b := *r
		b.State, b.UpdatedAt = cellside.StateAbandoned, t0.Add(time.Second)
		return s.AbandonOwn(ctx, &b, cellside.StateSending, cellside.StateReceived)
	}
	for _, committed := range []bool{false, true} {
		r := record(fmt.Sprintf("own-%v", committed))
		if _, _, err := s.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
		if committed {
			sent := *r
			sent.State = cellside.StateSending
			if err := s.Persist(ctx, &sent, cellside.StateReceived); err != nil {
				t.Fatal(err)
			}
		}
		if err := back(r); err != nil {
			t.Fatalf("committed %v: %v", committed, err)
		}
		if got, _ := s.Get(ctx, r.Key()); got.State != cellside.StateAbandoned {
			t.Fatalf("committed %v: state %s, want abandoned", committed, got.State)
		}
		if err := back(r); !errors.Is(err, ErrStateChanged) {
			t.Fatalf("committed %v: a second step back: %v, want ErrStateChanged", committed, err)
		}
	}
	// Reclaimed by a later attempt, which went on to sending: not this
	// attempt's row any more.
	first := record("own-reclaimed")
	if _, _, err := s.Insert(ctx, first); err != nil {
		t.Fatal(err)
	}
	if err := back(first); err != nil {
		t.Fatal(err)
	}
	later := record("own-reclaimed")
	later.Attempt, later.CreatedAt = 2, t0.Add(2*time.Second)
	if ok, _, err := s.Reclaim(ctx, later); err != nil || !ok {
		t.Fatalf("Reclaim = %v, %v", ok, err)
	}
	sent := *later
	sent.State = cellside.StateSending
	if err := s.Persist(ctx, &sent, cellside.StateReceived); err != nil {
		t.Fatal(err)
	}
	if err := back(first); !errors.Is(err, ErrStateChanged) {
		t.Fatalf("step back of the first attempt over the later one's row: %v, want ErrStateChanged", err)
	}
	// Another instance's row, same attempt and creation time.
	other, err := Open(ctx, url, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.SetInstance("inst-2")
	theirs := record("own-theirs")
	if _, _, err := other.Insert(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	if err := back(theirs); !errors.Is(err, ErrStateChanged) {
		t.Fatalf("step back of a sibling's row: %v, want ErrStateChanged", err)
	}
	for id, want := range map[string]cellside.State{"own-reclaimed": cellside.StateSending, "own-theirs": cellside.StateReceived} {
		if got, _ := s.Get(ctx, key(id)); got.State != want {
			t.Fatalf("%s: state %s, want %s", id, got.State, want)
		}
	}
}

// TestUnfiled: a record inserted without a directory entry, or marked
// when its final entry was not written, is listed once final (not while
// pending), oldest first, until marked filed; a reclaim by an attempt
// that holds its entry clears the mark.
func TestUnfiled(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	for i, st := range []cellside.State{cellside.StateApproved, cellside.StateSending, cellside.StateDeclined, cellside.StateAbandoned} {
		r := record(fmt.Sprintf("f-%d", i))
		r.State, r.UpdatedAt, r.Unfiled = st, t0.Add(-time.Duration(i)*time.Second), true
		if _, _, err := s.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	claimed := record("f-claimed")
	claimed.State, claimed.UpdatedAt = cellside.StateApproved, t0.Add(time.Second)
	if _, _, err := s.Insert(ctx, claimed); err != nil {
		t.Fatal(err)
	}
	ids := func() []string {
		t.Helper()
		got, err := s.Unfiled(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range got {
			if !r.Unfiled {
				t.Errorf("%s listed without its mark", r.TransactionID)
			}
			out = append(out, r.TransactionID)
		}
		return out
	}
	if got := fmt.Sprint(ids()); got != "[f-2 f-0]" {
		t.Fatalf("Unfiled = %s, want [f-2 f-0]", got)
	}
	if err := s.MarkFiled(ctx, key("f-2")); err != nil {
		t.Fatal(err)
	}
	// The abandoned one, reclaimed by an attempt with a claim.
	again := record("f-3")
	if ok, _, err := s.Reclaim(ctx, again); err != nil || !ok {
		t.Fatalf("Reclaim = %v, %v", ok, err)
	}
	again.State = cellside.StateApproved
	if err := s.Persist(ctx, again, cellside.StateReceived); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ids()); got != "[f-0]" {
		t.Fatalf("after marking f-2 and reclaiming f-3: Unfiled = %s, want [f-0]", got)
	}
	// A claimed one whose final entry was not written is marked too.
	if err := s.MarkUnfiled(ctx, key("f-claimed")); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ids()); got != "[f-0 f-claimed]" {
		t.Fatalf("after marking f-claimed: Unfiled = %s, want [f-0 f-claimed]", got)
	}
}
