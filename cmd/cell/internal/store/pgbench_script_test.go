package store

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestPgbenchScriptRuns: the SQL make bench-e2e gives pgbench as a cell's
// own (scripts/bench/cell-txn.sql, kept in step with this package by
// hand) runs against the schema as migrated, records one approved
// transaction, and inserts nothing the second time for the same ID: a
// schema change that breaks the comparison fails here, not in a
// benchmark run.
func TestPgbenchScriptRuns(t *testing.T) {
	raw, err := os.ReadFile("../../../../scripts/bench/cell-txn.sql")
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, `\set`) {
			kept = append(kept, line)
		}
	}
	script := regexp.MustCompile(`:card\b`).ReplaceAllString(regexp.MustCompile(`:id\b`).ReplaceAllString(strings.Join(kept, "\n"), "42"), "7")
	_, url := open(t)
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for range 2 {
		if _, err := conn.Exec(ctx, script); err != nil {
			t.Fatalf("the pgbench script: %v", err)
		}
	}
	var n int
	var state string
	if err := conn.QueryRow(ctx, `SELECT count(*), min(state) FROM transactions WHERE partner_id = 'p-001' AND transaction_id = 'pgb-42'`).Scan(&n, &state); err != nil || n != 1 || state != "approved" {
		t.Fatalf("after the script twice: %d rows in state %q (%v), want one approved", n, state, err)
	}
}
