package store

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// partnerRecord is record(id) sent by partner with its own amount and
// merchant.
func partnerRecord(partner, id string, amount int64, merchant string) *cellside.Record {
	r := record(id)
	r.PartnerID, r.Amount, r.SettlementAmount, r.MerchantID = partner, amount, amount, merchant
	return r
}

// TestTwoPartnersOneID: transaction IDs are a namespace per partner. Two
// partners' records with one ID coexist, and every query finds, changes or
// leaves out exactly the one it names.
func TestTwoPartnersOneID(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	a := partnerRecord("p-001", "t-1", 1250, "m-1")
	b := partnerRecord("p-002", "t-1", 9900, "m-2")
	for _, r := range []*cellside.Record{a, b} {
		ins, ex, err := s.Insert(ctx, r)
		if err != nil || !ins || ex != nil {
			t.Fatalf("Insert %s = %v, %+v, %v; want a new row", r.Key(), ins, ex, err)
		}
	}
	for _, r := range []*cellside.Record{a, b} {
		got, err := s.Get(ctx, r.Key())
		if err != nil || !proto.Equal(got.Transaction(), r.Transaction()) {
			t.Fatalf("Get %s = %v, %v; want %v", r.Key(), got.Transaction(), err, r.Transaction())
		}
	}
	if _, err := s.Get(ctx, idempotency.Key{PartnerID: "p-003", TransactionID: "t-1"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a third partner's Get of the ID: %v, want ErrNotFound", err)
	}

	// The same partner's ID again is that partner's record, untouched.
	again := partnerRecord("p-002", "t-1", 1, "m-9")
	ins, ex, err := s.Insert(ctx, again)
	if err != nil || ins || ex == nil || ex.Amount != 9900 || ex.PartnerID != "p-002" {
		t.Fatalf("Insert of p-002/t-1 again = %v, %+v, %v; want p-002's record", ins, ex, err)
	}

	// Persist moves only its own partner's record.
	b.State, b.UpdatedAt = cellside.StateSending, t0.Add(time.Second)
	if err := s.Persist(ctx, b, cellside.StateReceived); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, a.Key()); got.State != cellside.StateReceived {
		t.Fatalf("p-001's record moved with p-002's: %s", got.State)
	}
	unresolved, err := s.Unresolved(ctx, t0.Add(time.Minute), 10)
	if err != nil || len(unresolved) != 1 || unresolved[0].Key() != b.Key() {
		t.Fatalf("Unresolved = %v, %v; want p-002/t-1 alone", unresolved, err)
	}

	// Velocity leaves out only the transaction named; the same card's
	// other-partner transaction with the same ID counts.
	n, amt, err := s.Velocity(ctx, []card.KeyedHash{{KeyID: a.PANHashKeyID, Sum: a.PANHash}}, t0.Add(-time.Minute), a.Key())
	if err != nil || n != 1 || amt != b.RiskAmount {
		t.Fatalf("Velocity excluding %s = %d, %d, %v; want p-002's one", a.Key(), n, amt, err)
	}

	// Reclaim takes over only the abandoned record of its own key.
	if _, err := s.AbandonUnsent(ctx, t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	b2 := partnerRecord("p-002", "t-1", 9900, "m-2")
	b2.Attempt = 2
	ok, ex, err := s.Reclaim(ctx, b2)
	if err != nil || ok || ex.Key() != b.Key() || ex.State != cellside.StateSending {
		t.Fatalf("Reclaim of p-002's sending record = %v, %+v, %v; want its record untouched", ok, ex, err)
	}
	a2 := partnerRecord("p-001", "t-1", 1250, "m-1")
	a2.Attempt = 2
	if ok, _, err := s.Reclaim(ctx, a2); err != nil || !ok {
		t.Fatalf("Reclaim of p-001's abandoned record = %v, %v", ok, err)
	}
	if got, _ := s.Get(ctx, b.Key()); got.Attempt != 1 || got.State != cellside.StateSending {
		t.Fatalf("p-002's record after p-001's reclaim: %+v", got)
	}
}

// TestMigrationFrom002KeepsRows: a database that already holds rows written
// under migration 002 (one key per transaction ID) migrates to the
// (partner, transaction ID) key, and its rows keep working: read, replayed,
// resolved; afterwards another partner can use their IDs.
func TestMigrationFrom002KeepsRows(t *testing.T) {
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
	if err := m.MigrateTo(ctx, 2); err != nil {
		t.Fatal(err)
	}
	// The rows as a cell before 003 wrote them: its own INSERT, keyed by
	// transaction_id alone.
	old := map[string]*cellside.Record{"old-approved": record("old-approved"), "old-sending": record("old-sending")}
	old["old-approved"].State, old["old-approved"].AuthCode = cellside.StateApproved, "A1B2C3"
	old["old-sending"].State = cellside.StateSending
	for _, r := range old {
		if _, err := conn.Exec(ctx, `INSERT INTO transactions (`+columns004+`)
			VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23,$24)
			ON CONFLICT (transaction_id) DO NOTHING`, args(r)[:24]...); err != nil {
			t.Fatalf("insert under 002: %v", err)
		}
	}

	s, err := Open(ctx, url, 4)
	if err != nil {
		t.Fatalf("Open (migrating 002 -> latest): %v", err)
	}
	defer s.Close()
	var v int
	all, _ := migrations.ReadDir("migrations")
	if err := conn.QueryRow(ctx, "SELECT version FROM schema_version").Scan(&v); err != nil || v != len(all) {
		t.Fatalf("schema version = %d, %v; want %d", v, err, len(all))
	}

	for id, r := range old {
		got, err := s.Get(ctx, key(id))
		if err != nil || !proto.Equal(got.Transaction(), r.Transaction()) {
			t.Fatalf("old row %s: %v, %v", id, got, err)
		}
	}
	// A replay of an old transaction finds it.
	ins, ex, err := s.Insert(ctx, record("old-approved"))
	if err != nil || ins || ex.State != cellside.StateApproved {
		t.Fatalf("replay of an old row: %v, %+v, %v", ins, ex, err)
	}
	// The reconciler's view of an old unresolved row, and its resolution.
	un, err := s.Unresolved(ctx, t0.Add(time.Minute), 10)
	if err != nil || len(un) != 1 || un[0].Key() != key("old-sending") {
		t.Fatalf("Unresolved after migration = %v, %v", un, err)
	}
	un[0].State, un[0].AuthCode, un[0].UpdatedAt = cellside.StateApproved, "Z9Z9Z9", t0.Add(time.Second)
	if err := s.Persist(ctx, un[0], cellside.StateSending); err != nil {
		t.Fatalf("resolving an old row: %v", err)
	}
	// Another partner's transaction with an old ID is a new one.
	other := partnerRecord("p-002", "old-approved", 9900, "m-2")
	if ins, _, err := s.Insert(ctx, other); err != nil || !ins {
		t.Fatalf("p-002 with an old ID: %v, %v; want a new row", ins, err)
	}
	if got, _ := s.Get(ctx, key("old-approved")); got.Amount != 1250 || got.AuthCode != "A1B2C3" {
		t.Fatalf("the old row after another partner used its ID: %+v", got)
	}
}

// TestEveryTransactionKeyNamesThePartner reads the schema after every
// migration: each index or constraint (primary keys, unique constraints,
// foreign keys, plain indexes) over a transaction_id column, in any table,
// names partner_id too, and the primary key of transactions is the pair
// and the month's key (created_at: migration 011).
func TestEveryTransactionKeyNamesThePartner(t *testing.T) {
	_, url := open(t)
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `
		SELECT c.conrelid::regclass::text || ' ' || c.conname, array_agg(a.attname::text ORDER BY k.n)
		FROM pg_constraint c
		CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, n)
		JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
		WHERE c.connamespace = 'public'::regnamespace AND c.contype IN ('p', 'u', 'f')
		GROUP BY 1
		UNION ALL
		SELECT i.indexrelid::regclass::text, array_agg(a.attname::text ORDER BY k.n)
		FROM pg_index i
		JOIN pg_class t ON t.oid = i.indrelid
		CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE t.relnamespace = 'public'::regnamespace
		GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]string{}
	var name string
	var cols []string
	if _, err := pgx.ForEachRow(rows, []any{&name, &cols}, func() error {
		keys[name] = slices.Clone(cols)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if pk := keys["transactions transactions_pkey"]; !slices.Equal(pk, []string{"partner_id", "transaction_id", "created_at"}) {
		t.Fatalf("primary key of transactions = %v, want [partner_id transaction_id created_at]; all keys: %v", pk, keys)
	}
	for name, cols := range keys {
		if slices.Contains(cols, "transaction_id") && !slices.Contains(cols, "partner_id") {
			t.Errorf("%s over %v names transaction_id without partner_id", name, cols)
		}
	}
}
