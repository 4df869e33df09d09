package retention

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func record(id string, at time.Time, state cellside.State) *cellside.Record {
	return &cellside.Record{
		TransactionID: id, Fingerprint: [32]byte{1}, State: state,
		PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION, PartnerID: "p-001", Market: "GB",
		Amount: 1250, Currency: "GBP", SettlementAmount: 1250, SettlementCurrency: "GBP", RiskAmount: 1486,
		MerchantID: "m-1", MCC: "5411", MerchantCountry: "GB", MaskedPAN: "424242******4242",
		PANHash: []byte{0xca, 0xfe}, PANHashKeyID: "k", FingerprintKeyID: "k", RefdataVersion: "rd-1", RouteRule: "default",
		Attempt: 1, CellID: "cell-a", CreatedAt: at, UpdatedAt: at,
	}
}

// TestKeeperDropsOnlyResolvedMonths runs rounds of the keeper on a real
// database whose first partitions end in January 2025 (rebounded by the
// test), with months of 2025 past a 90-day retention: a month of final
// transactions and delivered callbacks is dropped; a month holding a
// transaction short of its final state, an authorization holding a
// capture, or a callback still to deliver is kept (the database says
// why), and dropped in a later round once resolved; the current month and
// two ahead exist after the first round; nothing within the retention is
// touched.
func TestKeeperDropsOnlyResolvedMonths(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url := pgtest.NewDatabase(t)
	st, err := store.Open(ctx, url, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	for _, table := range store.PartitionedTables {
		exec(`ALTER TABLE ` + table + ` DETACH PARTITION ` + table + `_legacy`)
		exec(`ALTER TABLE ` + table + ` ATTACH PARTITION ` + table + `_legacy FOR VALUES FROM (MINVALUE) TO ('2025-01-01 00:00:00+00')`)
		for m := time.January; m <= time.April; m++ {
			if _, err := st.CreatePartition(ctx, table, month(2025, m), 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	now := time.Now().UTC()
	rows := map[string]time.Time{
		"jan-final": month(2025, 1).Add(time.Hour), "feb-sending": month(2025, 2).Add(time.Hour),
		"mar-final": month(2025, 3).Add(time.Hour), "apr-held": month(2025, 4).Add(time.Hour),
	}
	k, err := New(Config{Store: st, Keep: 90 * 24 * time.Hour, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range store.PartitionedTables {
		if _, err := st.CreatePartition(ctx, table, monthStart(now), 1); err != nil {
			t.Fatal(err)
		}
	}
	rows["now-sending"] = now
	for id, at := range rows {
		state := cellside.StateApproved
		if strings.HasSuffix(id, "-sending") {
			state = cellside.StateSending
		}
		if ins, _, err := st.Insert(ctx, record(id, at, state)); err != nil || !ins {
			t.Fatalf("insert %s: %v, %v", id, ins, err)
		}
	}
	exec(`UPDATE transactions SET held_capture = 100 WHERE transaction_id = 'apr-held'`)
	outbox := func(id, status string, at time.Time) {
		exec(`INSERT INTO outbox (event_id, partner_id, transaction_id, event_type, body, status, next_attempt_at, created_at, updated_at)
			VALUES ($1, 'p-001', $1, 'transaction.final', '{}', $2, $3, $3, $3)`, id, status, at)
	}
	outbox("jan-final", "delivered", rows["jan-final"])
	outbox("mar-final", "pending", rows["mar-final"])

	res, err := k.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantDropped := []string{"outbox_2025_01", "outbox_2025_02", "outbox_2025_04", "outbox_legacy",
		"transactions_2025_01", "transactions_2025_03", "transactions_legacy"}
	slices.Sort(res.Dropped)
	if !slices.Equal(res.Dropped, wantDropped) {
		t.Fatalf("dropped %v, want %v (kept %v)", res.Dropped, wantDropped, res.Kept)
	}
	wantKept := map[string]string{"transactions_2025_02": "holds unresolved transactions",
		"transactions_2025_04": "holds unresolved transactions", "outbox_2025_03": "holds callbacks still to deliver"}
	if len(res.Kept) != len(wantKept) {
		t.Fatalf("kept %v, want %v", res.Kept, wantKept)
	}
	for name, why := range wantKept {
		if res.Kept[name] != why {
			t.Fatalf("kept %v, want %v", res.Kept, wantKept)
		}
	}
	get := func(id string) error {
		_, err := st.Get(ctx, idempotency.Key{PartnerID: "p-001", TransactionID: id})
		return err
	}
	if err := get("jan-final"); err != store.ErrNotFound {
		t.Fatalf("jan-final after its month was dropped: %v", err)
	}
	for _, id := range []string{"feb-sending", "apr-held", "now-sending"} {
		if err := get(id); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	end, ok := k.End()
	if current := monthStart(now); !ok || end.Before(current.AddDate(0, 3, 0)) {
		t.Fatalf("room for rows ends %s (known %v), want at least three months from %s", end, ok, current)
	}
	// An ID of a dropped month is a new transaction.
	if ins, _, err := st.Insert(ctx, record("jan-final", now, cellside.StateReceived)); err != nil || !ins {
		t.Fatalf("jan-final again: %v, %v", ins, err)
	}

	// Resolved, the kept months go at the next round.
	exec(`UPDATE transactions SET state = 'failed' WHERE transaction_id = 'feb-sending'`)
	exec(`UPDATE transactions SET held_capture = 0 WHERE transaction_id = 'apr-held'`)
	exec(`UPDATE outbox SET status = 'dead' WHERE event_id = 'mar-final'`)
	res, err = k.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(res.Dropped)
	if want := []string{"outbox_2025_03", "transactions_2025_02", "transactions_2025_04"}; !slices.Equal(res.Dropped, want) || len(res.Kept) != 0 {
		t.Fatalf("dropped %v kept %v, want %v and none kept", res.Dropped, res.Kept, want)
	}
	if err := get("now-sending"); err != nil {
		t.Fatalf("now-sending: %v", err)
	}
}

// TestDatabaseRefusesToDropWithinTheWindow: whatever the caller asks, the
// database drops no month that ended within 8 days, nor any table but a
// month of the two.
func TestDatabaseRefusesToDropWithinTheWindow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, pgtest.NewDatabase(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.DropPartition(ctx, "transactions_legacy", time.Now().Add(-24*time.Hour)); err == nil || !strings.Contains(err.Error(), "idempotency window") {
		t.Fatalf("a drop within the window: %v", err)
	}
	for _, name := range []string{"risk_limits", "transactions", "instances"} {
		if _, err := st.DropPartition(ctx, name, time.Now().Add(-30*24*time.Hour)); err == nil || !strings.Contains(err.Error(), "not a partition") {
			t.Fatalf("drop %s: %v", name, err)
		}
	}
	if kept, err := st.DropPartition(ctx, "transactions_legacy", time.Now().Add(-30*24*time.Hour)); err != nil || kept != "holds rows within retention" {
		t.Fatalf("drop the current month: %q, %v", kept, err)
	}
	if _, err := st.CreatePartition(ctx, "instances", month(2030, 1), 1); err == nil {
		t.Fatal("a partition of instances was made")
	}
	if _, err := st.CreatePartition(ctx, "transactions", time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC), 1); err == nil {
		t.Fatal("a partition starting on the 2nd was made")
	}
	if _, err := st.CreatePartition(ctx, "transactions", month(2030, 1), 13); err == nil {
		t.Fatal("a partition of 13 months was made")
	}
}
