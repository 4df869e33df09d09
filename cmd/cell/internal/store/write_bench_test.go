package store

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
)

// TestWriteCostBenchmark measures what a payment's writes cost the
// database: CELLPAY_WRITE_BENCH transactions, one after another on the
// store's one connection (no group commit), each inserted, moved to
// sending, approved with its callback row, and its card's velocity read,
// as the orchestrator does; it prints the server process's CPU µs per
// transaction (/proc of the backend) and the client's wall time per
// transaction. CELLPAY_WRITE_BENCH_MONTHS=M first rebounds the tables'
// first partitions to end M months ago and makes partitions of
// CELLPAY_WRITE_BENCH_SPAN months (1 by default) from there to the next
// month, as a cell holds after M months of retention (partitioned schema
// only). make bench-retention compares them through the harness.
func TestWriteCostBenchmark(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("CELLPAY_WRITE_BENCH"))
	if n <= 0 {
		t.Skip("CELLPAY_WRITE_BENCH unset: a benchmark (make bench-retention)")
	}
	n = min(n, 100_000)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	s, err := Open(ctx, url, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if m, _ := strconv.Atoi(os.Getenv("CELLPAY_WRITE_BENCH_MONTHS")); m > 0 {
		span, _ := strconv.Atoi(os.Getenv("CELLPAY_WRITE_BENCH_SPAN"))
		makePartitions(ctx, t, url, min(m, 36), min(max(span, 1), 12))
	}
	var pid int
	if err := s.pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	hashes := []card.KeyedHash{{KeyID: "pan-cur", Sum: []byte{0xca, 0xfe}}}
	run := func(prefix string, count int) {
		for i := range count {
			r := record(fmt.Sprintf("%s-%d", prefix, i))
			r.PANHash = []byte(fmt.Sprintf("card-%d", i%500))
			r.CreatedAt, r.UpdatedAt = now, now
			if ins, _, err := s.Insert(ctx, r); err != nil || !ins {
				t.Fatalf("insert: %v, %v", ins, err)
			}
			if _, _, err := s.Velocity(ctx, hashes, now.Add(-10*time.Minute), r.Key()); err != nil {
				t.Fatal(err)
			}
			r.State = cellside.StateSending
			if err := s.Persist(ctx, r, cellside.StateReceived); err != nil {
				t.Fatal(err)
			}
			r.State, r.AuthCode = cellside.StateApproved, "A1B2C3"
			if err := s.Persist(ctx, r, cellside.StateSending); err != nil {
				t.Fatal(err)
			}
		}
	}
	run("warm", min(n/10+1, 1000)) // plans cached, caches warm
	cpu0, start := procCPU(t, pid), time.Now()
	run("tx", n)
	cpu, wall := procCPU(t, pid)-cpu0, time.Since(start)
	fmt.Printf("BENCH db_cpu_us_per_tx %.1f us\n", float64(cpu.Microseconds())/float64(n))
	fmt.Printf("BENCH wall_us_per_tx %.1f us\n", float64(wall.Microseconds())/float64(n))
}

// makePartitions rebounds both tables' first partitions to end months ago
// and makes partitions of span months from there to past the next month.
func makePartitions(ctx context.Context, t *testing.T, url string, months, span int) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	cur := time.Now().UTC()
	first := time.Date(cur.Year(), cur.Month(), 1, 0, 0, 0, 0, time.UTC).AddDate(0, -months, 0)
	for _, table := range []string{"transactions", "outbox"} {
		sql := []string{
			fmt.Sprintf(`ALTER TABLE %[1]s DETACH PARTITION %[1]s_legacy`, table),
			fmt.Sprintf(`ALTER TABLE %[1]s ATTACH PARTITION %[1]s_legacy FOR VALUES FROM (MINVALUE) TO ('%[2]s')`, table, first.Format(time.RFC3339)),
		}
		// What migration 011 made past the first partitions goes: the
		// spans below cover it.
		rows, err := conn.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent = $1::regclass AND c.relname <> $2`, table, table+"_legacy")
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			sql = append(sql, `DROP TABLE `+n)
		}
		for m := first; m.Before(cur.AddDate(0, 2, 0)); m = m.AddDate(0, span, 0) {
			sql = append(sql, fmt.Sprintf(`CREATE TABLE %s_%s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
				table, m.Format("2006_01"), table, m.Format(time.RFC3339), m.AddDate(0, span, 0).Format(time.RFC3339)))
		}
		for _, q := range sql {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
}

// procCPU is process pid's user and system CPU time so far.
func procCPU(t *testing.T, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command's closing parenthesis: utime is the 12th,
	// stime the 13th, in clock ticks (USER_HZ, 100 on Linux).
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
