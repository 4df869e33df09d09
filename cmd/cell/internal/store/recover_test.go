package store

import (
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// recovered is a final recovered record of id, as issuercheck.Recovered
// makes it: no fingerprint, nothing the issuer does not know.
func recovered(id string, pt cellpayv1.PaymentType, original string, amount int64) *cellside.Record {
	return &cellside.Record{TransactionID: id, PartnerID: "p-001", FingerprintKeyID: cellside.RecoveredKeyID,
		State: cellside.StateApproved, AuthCode: "R" + id, PaymentType: pt, Original: original, Amount: amount, Currency: "GBP",
		CellID: "cell-a", Attempt: 1, CreatedAt: t0, UpdatedAt: t0}
}

// TestRecover: a recovered record is written once, final, with its
// callback event; an approved follow-up's amount lands on its original's
// sums (an original that survived, and one recovered just before it); a
// key recorded already is left as it is; a record that is not a final
// recovered one is refused.
func TestRecover(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	approvedAuth(t, s, "kept")
	for _, r := range []*cellside.Record{
		recovered("cap-kept", cellpayv1.PaymentType_CAPTURE, "kept", 400),
		recovered("lost", cellpayv1.PaymentType_CARD_AUTHORIZATION, "", 1000),
		recovered("cap-lost", cellpayv1.PaymentType_CAPTURE, "lost", 600),
		recovered("ref-lost", cellpayv1.PaymentType_REFUND, "lost", 100),
	} {
		if ok, err := s.Recover(ctx, r); err != nil || !ok {
			t.Fatalf("recover %s: %v, %v", r.TransactionID, ok, err)
		}
	}
	for id, want := range map[string][2]int64{"kept": {400, 0}, "lost": {600, 100}} {
		o, err := s.Get(ctx, key(id))
		if err != nil {
			t.Fatal(err)
		}
		if o.Ledger.Captured != want[0] || o.Ledger.Refunded != want[1] {
			t.Errorf("%s: captured %d, refunded %d; want %v", id, o.Ledger.Captured, o.Ledger.Refunded, want)
		}
	}
	got, err := s.Get(ctx, key("cap-lost"))
	if err != nil || !got.Recovered() || got.State != cellside.StateApproved || got.Original != "lost" || got.AuthCode != "Rcap-lost" || got.Amount != 600 {
		t.Fatalf("the recovered capture: %+v, %v", got, err)
	}
	cbs, err := s.ListCallbacks(ctx, CallbackFilter{PartnerID: "p-001", TransactionID: "cap-lost"})
	if err != nil || len(cbs) != 1 {
		t.Fatalf("callbacks of the recovered capture: %v, %v", cbs, err)
	}
	// Again, and over a record the cell holds: nothing changes.
	if ok, err := s.Recover(ctx, recovered("cap-lost", cellpayv1.PaymentType_CAPTURE, "lost", 600)); err != nil || ok {
		t.Fatalf("recovering it again: %v, %v", ok, err)
	}
	if ok, err := s.Recover(ctx, recovered("kept", cellpayv1.PaymentType_CARD_AUTHORIZATION, "", 1)); err != nil || ok {
		t.Fatalf("recovering over a kept record: %v, %v", ok, err)
	}
	if o, _ := s.Get(ctx, key("lost")); o.Ledger.Captured != 600 {
		t.Fatalf("a second recovery moved the sums: %+v", o.Ledger)
	}
	notFinal := recovered("x", cellpayv1.PaymentType_CARD_AUTHORIZATION, "", 1)
	notFinal.State = cellside.StateSending
	notRecovered := recovered("y", cellpayv1.PaymentType_CARD_AUTHORIZATION, "", 1)
	notRecovered.FingerprintKeyID = "fp-cur"
	for _, r := range []*cellside.Record{notFinal, notRecovered} {
		if _, err := s.Recover(ctx, r); err == nil {
			t.Errorf("recovered %s: %+v", r.TransactionID, r)
		}
	}
}

// TestCatchUp: a record held received, short of what the issuer applied
// for it, is brought to the issuer's outcome with its callback, payload
// and fingerprint kept; a record no longer received is left alone; and
// nothing but received is caught up (an abandoned record may be a
// released cell's, whose transaction another cell holds).
func TestCatchUp(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	r := record("behind-1")
	if _, _, err := s.Insert(ctx, r); err != nil {
		t.Fatal(err)
	}
	up := *r
	up.State, up.AuthCode, up.UpdatedAt = cellside.StateApproved, "UP1", t0.Add(time.Second)
	if ok, err := s.CatchUp(ctx, &up, cellside.StateReceived); err != nil || !ok {
		t.Fatalf("catch up: %v, %v", ok, err)
	}
	got, err := s.Get(ctx, up.Key())
	if err != nil || got.State != cellside.StateApproved || got.AuthCode != "UP1" || got.Fingerprint != r.Fingerprint || got.Amount != r.Amount {
		t.Fatalf("caught up: %+v, %v", got, err)
	}
	if cbs, err := s.ListCallbacks(ctx, CallbackFilter{PartnerID: "p-001", TransactionID: up.TransactionID}); err != nil || len(cbs) != 1 {
		t.Fatalf("callbacks: %v, %v", cbs, err)
	}
	if ok, err := s.CatchUp(ctx, &up, cellside.StateReceived); err != nil || ok {
		t.Fatalf("catching up again: %v, %v", ok, err)
	}
	if _, err := s.CatchUp(ctx, &up, cellside.StateSending); err == nil {
		t.Error("caught up from sending")
	}
	// An abandoned payment's record is caught up too; an abandoned
	// follow-up's is not (its hold was released).
	ab := record("behind-2")
	if _, _, err := s.Insert(ctx, ab); err != nil {
		t.Fatal(err)
	}
	if n, err := s.AbandonUnsent(ctx, t0); err != nil || n < 1 {
		t.Fatalf("abandon: %d, %v", n, err)
	}
	up2 := *ab
	up2.State, up2.AuthCode, up2.UpdatedAt = cellside.StateApproved, "UP2", t0.Add(time.Second)
	if ok, err := s.CatchUp(ctx, &up2, cellside.StateAbandoned); err != nil || !ok {
		t.Fatalf("catch up from abandoned: %v, %v", ok, err)
	}
	approvedAuth(t, s, "orig")
	c, _, err := hold(ctx, s, holdReq(cellpayv1.PaymentType_CAPTURE, "cap-ab", "orig", 500))
	if err != nil {
		t.Fatal(err)
	}
	c.State = cellside.StateAbandoned
	if err := s.Persist(ctx, c, cellside.StateSending); err != nil {
		t.Fatal(err)
	}
	upc := *c
	upc.State = cellside.StateApproved
	if ok, err := s.CatchUp(ctx, &upc, cellside.StateAbandoned); err != nil || ok {
		t.Fatalf("an abandoned follow-up caught up: %v, %v", ok, err)
	}
}

// TestGetMany: one read returns the records held of the keys asked,
// another partner's record under the same ID not among them, and refuses
// more than MaxGetMany keys.
func TestGetMany(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	for _, id := range []string{"m-1", "m-2"} {
		if _, _, err := s.Insert(ctx, record(id)); err != nil {
			t.Fatal(err)
		}
	}
	other := record("m-3")
	other.PartnerID = "p-002"
	if _, _, err := s.Insert(ctx, other); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetMany(ctx, []idempotency.Key{key("m-1"), key("m-2"), key("m-3"), key("none")})
	if err != nil || len(got) != 2 || got[key("m-1")].TransactionID != "m-1" || got[key("m-2")] == nil {
		t.Fatalf("GetMany: %v, %v", got, err)
	}
	if _, err := s.GetMany(ctx, make([]idempotency.Key, MaxGetMany+1)); err == nil {
		t.Fatal("GetMany took more than MaxGetMany keys")
	}
}
