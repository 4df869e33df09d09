package store

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/internal/cardkeys"
	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// columns004 are the transactions columns up to migration 004, before key
// IDs: what a cell of that schema writes.
const columns004 = `transaction_id, fingerprint, state, decline_reason, auth_code, payment_type, partner_id, market,
	amount, currency, settlement_amount, settlement_currency, risk_amount, merchant_id, mcc, merchant_country,
	masked_pan, pan_hash, refdata_version, route_rule, attempt, cell_id, created_at, updated_at`

const testPAN = "4242424242424242"

func keyRing(t *testing.T, masters ...byte) *cardkeys.Ring {
	t.Helper()
	var ms [][]byte
	for _, b := range masters {
		ms = append(ms, bytes.Repeat([]byte{b}, 32))
	}
	r, err := cardkeys.New(ms...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func cardRequest(id string, amount int64) *cellpayv1.SubmitTransactionRequest {
	return &cellpayv1.SubmitTransactionRequest{
		TransactionId: id, PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION, PartnerId: "p-001", Market: "GB",
		Amount:   &cellpayv1.Money{MinorUnits: amount, Currency: "GBP"},
		Merchant: &cellpayv1.Merchant{Id: "m-1", Mcc: "5411", Country: "GB"},
		Card:     &cellpayv1.Card{Pan: testPAN, ExpiryMonth: 12, ExpiryYear: 2030},
	}
}

// keyedRecord is record(id) with its card data computed under ring's
// current keys, as the cell's driver does.
func keyedRecord(ring *cardkeys.Ring, id string) *cellside.Record {
	r := record(id)
	r.State = cellside.StateApproved
	r.AuthCode = "A1B2C3"
	r.Fingerprint, r.FingerprintKeyID = ring.Fingerprint(cardRequest(id, 1250)), ring.FingerprintKeyID()
	h := ring.PANHashes(testPAN)[0]
	r.PANHash, r.PANHashKeyID = h.Sum, h.KeyID
	return r
}

// replay runs the orchestrator on a replay of req against the stored
// record of its key, with ring's keys, as the cell's server does.
func replay(t *testing.T, s *Store, ring *cardkeys.Ring, req *cellpayv1.SubmitTransactionRequest) cellside.Action {
	t.Helper()
	in := cellside.Input{
		Request: req, Fingerprint: ring.Fingerprint(req), FingerprintKeyID: ring.FingerprintKeyID(),
		FingerprintUnder: func(id string) (idempotency.Fingerprint, bool) { return ring.FingerprintUnder(id, req) },
		CellID:           "cell-a", Attempt: 1,
	}
	m := cellside.New(in, cellside.Policy{LimitCurrency: "GBP"}, testRefData, time.Now)
	if _, ok := m.Start().(cellside.Insert); !ok {
		t.Fatal("the machine did not insert first")
	}
	prev, err := s.Get(ctxT(t), key(req.GetTransactionId()))
	if err != nil {
		t.Fatal(err)
	}
	return m.Step(cellside.Existing{Record: prev})
}

// TestRotationKeepsReplaysAndVelocity: a record written under the old
// master is still replayed (same payload: the recorded answer; another
// payload: ALREADY_EXISTS) and still counted by velocity after the current
// master changes; a hash counts only under the key ID it was stored with.
func TestRotationKeepsReplaysAndVelocity(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	before := keyRing(t, 1)
	r := keyedRecord(before, "t-rot")
	if _, _, err := s.Insert(ctx, r); err != nil {
		t.Fatal(err)
	}
	after := keyRing(t, 2, 1)
	if after.FingerprintKeyID() == r.FingerprintKeyID {
		t.Fatal("the rotation kept the fingerprint key")
	}
	got, err := s.Get(ctx, key("t-rot"))
	if err != nil || got.FingerprintKeyID != before.FingerprintKeyID() || got.PANHashKeyID != before.PANHashKeyID() {
		t.Fatalf("stored key IDs %q, %q, %v", got.FingerprintKeyID, got.PANHashKeyID, err)
	}
	switch a := replay(t, s, after, cardRequest("t-rot", 1250)).(type) {
	case cellside.Reply:
		if a.Record.AuthCode != "A1B2C3" {
			t.Fatalf("replay answered %+v", a.Record)
		}
	default:
		t.Fatalf("replay of the same payload after rotation: %#v", a)
	}
	if a, ok := replay(t, s, after, cardRequest("t-rot", 9999)).(cellside.Reject); !ok || !strings.Contains(a.Err.Error(), "different payload") {
		t.Fatalf("replay of another payload after rotation: %#v", a)
	}
	// A ring without the old master cannot compare: ALREADY_EXISTS, never
	// the recorded answer.
	if _, ok := replay(t, s, keyRing(t, 2), cardRequest("t-rot", 1250)).(cellside.Reject); !ok {
		t.Fatal("a replay under a key no longer in the ring got an answer")
	}

	since := t0.Add(-time.Minute)
	n, _, err := s.Velocity(ctx, after.PANHashes(testPAN), since, key("t-new"))
	if err != nil || n != 1 {
		t.Fatalf("Velocity after rotation = %d, %v; want the old-key row", n, err)
	}
	n, _, err = s.Velocity(ctx, keyRing(t, 2).PANHashes(testPAN), since, key("t-new"))
	if err != nil || n != 0 {
		t.Fatalf("Velocity without the old master = %d, %v; want 0", n, err)
	}
	// The right hash under another key ID is another card's.
	wrongID := []card.KeyedHash{{KeyID: after.PANHashKeyID(), Sum: r.PANHash}}
	if n, _, err = s.Velocity(ctx, wrongID, since, key("t-new")); err != nil || n != 0 {
		t.Fatalf("Velocity matched a hash under another key ID: %d, %v", n, err)
	}
	// A new row under the current key and the old row count together.
	r2 := keyedRecord(after, "t-rot-2")
	if _, _, err := s.Insert(ctx, r2); err != nil {
		t.Fatal(err)
	}
	if n, _, err = s.Velocity(ctx, after.PANHashes(testPAN), since, key("t-new")); err != nil || n != 2 {
		t.Fatalf("Velocity over both keys = %d, %v; want 2", n, err)
	}
}

// TestMigrationKeyIDsAndMasks: rows written under schema 004 name the
// legacy key, which a ring resolves to its oldest master used as it is,
// so they still replay and count; their masks are redone under the short
// PAN rule.
func TestMigrationKeyIDsAndMasks(t *testing.T) {
	url := openAt(t, 4)
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	m := bytes.Repeat([]byte{1}, 32)
	old := record("t-legacy")
	old.State, old.AuthCode = cellside.StateApproved, "A1B2C3"
	old.Fingerprint = legacyFingerprint(m, cardRequest("t-legacy", 1250))
	old.PANHash = card.NewHasher(m).Hash(testPAN)
	short := record("t-short")
	short.MaskedPAN = "123456**9012" // the old rule, for a 12-digit PAN
	for _, r := range []*cellside.Record{old, short} {
		if _, err := conn.Exec(ctx, `INSERT INTO transactions (`+columns004+`)
			VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23,$24)`, args(r)[:24]...); err != nil {
			t.Fatalf("insert under 004: %v", err)
		}
	}
	s, err := Open(ctx, url, 4)
	if err != nil {
		t.Fatalf("Open (migrating 004 -> latest): %v", err)
	}
	defer s.Close()
	got, err := s.Get(ctx, key("t-legacy"))
	if err != nil || got.FingerprintKeyID != cardkeys.LegacyKeyID || got.PANHashKeyID != cardkeys.LegacyKeyID {
		t.Fatalf("migrated key IDs %q, %q, %v", got.FingerprintKeyID, got.PANHashKeyID, err)
	}
	ring := keyRing(t, 2, 1) // rotated since: the legacy master is the oldest
	if a, ok := replay(t, s, ring, cardRequest("t-legacy", 1250)).(cellside.Reply); !ok || a.Record.AuthCode != "A1B2C3" {
		t.Fatalf("legacy replay: %#v", a)
	}
	if _, ok := replay(t, s, ring, cardRequest("t-legacy", 1)).(cellside.Reject); !ok {
		t.Fatal("legacy replay of another payload got an answer")
	}
	if n, _, err := s.Velocity(ctx, ring.PANHashes(testPAN), t0.Add(-time.Minute), key("t-new")); err != nil || n != 1 {
		t.Fatalf("Velocity of the legacy row = %d, %v; want 1", n, err)
	}
	if got, err := s.Get(ctx, key("t-short")); err != nil || got.MaskedPAN != "1234******12" {
		t.Fatalf("migrated short mask = %q, %v", got.MaskedPAN, err)
	}
}

// TestShortPANMasks: the table takes Mask's output for every PAN length
// the API accepts, and refuses masks that show more, the old rule's for a
// short PAN included.
func TestShortPANMasks(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	for n := 12; n <= 19; n++ {
		pan := strings.Repeat("4", n-1)
		pan += string(card.CheckDigit(pan))
		r := record("t-len-" + string(rune('a'+n-12)))
		r.MaskedPAN = card.Mask(pan)
		if _, _, err := s.Insert(ctx, r); err != nil {
			t.Errorf("length %d: %q refused: %v", n, r.MaskedPAN, err)
		}
	}
	for i, m := range []string{"123456**9012", "12345***9012", "123456*****2345", "1234567******12", "123456*****789012", "4242424242424242"} {
		r := record("t-bad-" + string(rune('a'+i)))
		r.MaskedPAN = m
		if _, _, err := s.Insert(ctx, r); err == nil {
			t.Errorf("the table accepted %q", m)
		}
	}
}

// openAt returns a new database migrated to version v only.
func openAt(t *testing.T, v int) string {
	t.Helper()
	ctx := ctxT(t)
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	m, err := newMigrator(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, int32(v)); err != nil {
		t.Fatal(err)
	}
	return url
}

func legacyFingerprint(master []byte, req *cellpayv1.SubmitTransactionRequest) idempotency.Fingerprint {
	return idempotency.NewFingerprinter(master).Of(req)
}

var testRefData = func() *refdata.Snapshot {
	s, err := refdata.FromFile(refdata.File{
		Version: 1, BaseCurrency: "GBP", DefaultSettlementCurrency: "GBP",
		FXRates: map[string]string{"GBP": "1"},
		MCC:     map[string]refdata.MCC{"5411": {Category: "grocery", Risk: refdata.RiskLow}},
	})
	if err != nil {
		panic(err)
	}
	return s
}()
