package store

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
)

// TestOneKeyAcrossPartitions: attempts at one key, created in different
// partitions, with and without group commit, race; exactly one inserts
// and every other one gets the winner's record. The primary key holds
// created_at, so only the insert's claim of the key (cellpay_claim_key)
// keeps the transaction ID unique across partitions.
func TestOneKeyAcrossPartitions(t *testing.T) {
	s, url := open(t)
	ctx := ctxT(t)
	grouped, err := Open(ctx, url, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer grouped.Close()
	grouped.EnableGroupCommit(GroupCommit{})
	parts, err := s.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var months []time.Time // a time in each partition of transactions
	for _, p := range parts {
		if p.Table == "transactions" {
			months = append(months, p.To.Add(-time.Hour))
		}
	}
	if len(months) < 2 {
		t.Fatalf("transactions has %d partitions, want the first and the next month: %+v", len(months), parts)
	}
	for round := range 5 {
		id := "race-" + string(rune('a'+round))
		var wg sync.WaitGroup
		var mu sync.Mutex
		var winner *time.Time
		var existing []time.Time
		for i := range 24 {
			wg.Go(func() {
				r := record(id)
				r.CreatedAt = months[i%len(months)].Add(time.Duration(i) * time.Microsecond)
				st := s
				if i%2 == 1 {
					st = grouped
				}
				ins, ex, err := st.Insert(ctx, r)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Error(err)
				case ins && winner != nil:
					t.Errorf("%s inserted twice", id)
				case ins:
					winner = &r.CreatedAt
				case ex == nil:
					t.Error("lost the race but got no record")
				default:
					existing = append(existing, ex.CreatedAt)
				}
			})
		}
		wg.Wait()
		if winner == nil {
			t.Fatalf("%s: nobody inserted", id)
		}
		for _, at := range existing {
			if !at.Equal(*winner) {
				t.Fatalf("%s: a loser got the record created at %s, the winner's is %s", id, at, *winner)
			}
		}
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM transactions WHERE partner_id = 'p-001' AND transaction_id = $1`, id).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%s: %d rows (%v), want 1", id, n, err)
		}
	}
}

// TestMigration011DownAndUp: a database with rows in two partitions goes
// back to one table each (migration 011's down), every row kept and the
// old keys back, and up again.
func TestMigration011DownAndUp(t *testing.T) {
	s, url := open(t)
	ctx := ctxT(t)
	parts, err := s.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := parts[len(parts)-1].From // a time in transactions' second partition
	for i, at := range []time.Time{t0, next.Add(time.Hour)} {
		r := record(fmt.Sprintf("t-%d", i))
		r.CreatedAt, r.UpdatedAt = at, at
		if _, _, err := s.Insert(ctx, r); err != nil {
			t.Fatal(err)
		}
		r.State, r.AuthCode = cellside.StateApproved, "A1B2C3"
		if err := s.Persist(ctx, r, cellside.StateReceived); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	m, err := newMigrator(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, 10); err != nil {
		t.Fatalf("down to 10: %v", err)
	}
	var txns, events int
	var partitioned bool
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM transactions), (SELECT count(*) FROM outbox),
		EXISTS (SELECT 1 FROM pg_partitioned_table)`).Scan(&txns, &events, &partitioned); err != nil {
		t.Fatal(err)
	}
	if txns != 2 || events != 2 || partitioned {
		t.Fatalf("after down: %d transactions, %d events, partitioned %v; want 2, 2, false", txns, events, partitioned)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO transactions SELECT * FROM transactions LIMIT 1`); err == nil {
		t.Fatal("after down: a key recorded twice")
	}
	if err := m.Migrate(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM transactions`).Scan(&txns); err != nil || txns != 2 {
		t.Fatalf("after up: %d transactions, %v", txns, err)
	}
}
