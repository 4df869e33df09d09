package pgtest_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/cellpay/cellpay/internal/dev/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestDatabasesAreIsolated(t *testing.T) {
	defer goleak.VerifyNone(t, pgtest.IgnoreGoroutines())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var names []string
	var open []*pgx.Conn // closed only after the subtest's cleanup dropped their databases
	defer func() {
		for _, c := range open {
			c.Close(context.Background())
		}
	}()
	t.Run("use", func(t *testing.T) {
		a, b := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
		if a == b {
			t.Fatalf("two NewDatabase calls returned the same URL %s", a)
		}
		ca, err := pgx.Connect(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, ca)
		cb, err := pgx.Connect(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, cb)
		if _, err := ca.Exec(ctx, "CREATE TABLE only_in_a (id int)"); err != nil {
			t.Fatal(err)
		}
		var exists bool
		if err := cb.QueryRow(ctx, "SELECT to_regclass('only_in_a') IS NOT NULL").Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists {
			t.Fatal("a table created in one database is visible in the other")
		}
		for _, c := range []*pgx.Conn{ca, cb} {
			var name string
			if err := c.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(name, "t_testdatabasesareisolated_use_") {
				t.Errorf("database name %q is not named after the test", name)
			}
			names = append(names, name)
		}
	})

	conn := connect(t, ctx, pgtest.Cluster().URL("postgres"))
	for _, name := range names {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists {
			t.Errorf("database %s still exists after its test ended", name)
		}
	}
}

func connect(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// TestApplyMigrations: the create halves run in name order, the drop
// halves never.
func TestApplyMigrations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	for name, sql := range map[string]string{
		"001_a.sql": "CREATE TABLE a (id text PRIMARY KEY);\n---- create above / drop below ----\nDROP TABLE a;\n",
		"002_b.sql": "ALTER TABLE a ADD COLUMN b text NOT NULL DEFAULT 'x';\n---- create above / drop below ----\nALTER TABLE a DROP COLUMN b;\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(sql), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	url := pgtest.NewDatabase(t)
	pgtest.ApplyMigrations(t, url, dir)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var b string
	if _, err := conn.Exec(ctx, "INSERT INTO a (id) VALUES ('1')"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT b FROM a").Scan(&b); err != nil || b != "x" {
		t.Fatalf("after both migrations: %q, %v", b, err)
	}
}
