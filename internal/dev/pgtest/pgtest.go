// Package pgtest gives each test a real, fresh PostgreSQL database on a
// private cluster that lives as long as the test binary.
//
// A package opts in with
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and a test calls NewDatabase for a URL. There is no skipping: a machine
// without the PostgreSQL server binaries fails the tests, loudly.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/cellpay/cellpay/internal/dev/pgcluster"
)

// startTimeout bounds starting the cluster (initdb included).
const startTimeout = 2 * time.Minute

var (
	mu      sync.Mutex
	cluster *pgcluster.Cluster
	seq     atomic.Int64
)

// Main starts one private cluster (NoSync: throwaway data) in a temporary
// directory, runs the tests, stops the cluster, removes the directory and
// exits with the tests' code. If the cluster cannot start, it says why and
// exits 1.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	c, err := pgcluster.Start(ctx, pgcluster.Config{DataDir: filepath.Join(dir, "data"), NoSync: true})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: cannot start PostgreSQL for the tests: %v\n", err)
		return 1
	}
	mu.Lock()
	cluster = c
	mu.Unlock()

	code := m.Run()

	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Cluster returns the test binary's cluster. It panics unless the package's
// TestMain calls Main.
func Cluster() *pgcluster.Cluster {
	mu.Lock()
	defer mu.Unlock()
	if cluster == nil {
		panic("pgtest: no cluster: the package needs func TestMain(m *testing.M) { pgtest.Main(m) }")
	}
	return cluster
}

// NewDatabase creates an empty database named after the test and returns its
// URL. The database is dropped when the test ends, sessions and all.
func NewDatabase(t testing.TB) string {
	t.Helper()
	c := Cluster()
	name := databaseName(t.Name(), seq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.CreateDatabase(ctx, name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.DropDatabase(ctx, name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return c.URL(name)
}

// ApplyMigrations applies the "create" half (above the
// "---- create above / drop below ----" line) of every tern migration in
// dir, the *.sql files in name order, to the database at url: the schema a
// service migrates itself to, for tests of other packages that read it.
func ApplyMigrations(t testing.TB, url, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("pgtest: no migrations in %s: %v", dir, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(context.Background())
	for _, f := range files { // Glob sorts by name
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		up, _, _ := strings.Cut(string(b), "---- create above / drop below ----")
		if _, err := conn.Exec(ctx, up); err != nil {
			t.Fatalf("pgtest: apply %s: %v", filepath.Base(f), err)
		}
	}
}

// databaseName turns a test name into a database name: lower case, only
// [a-z0-9_], short enough to leave room for the counter within Postgres's 63
// bytes. The counter keeps two calls in one test, or two tests that sanitise
// alike, apart.
func databaseName(test string, n int64) string {
	var b strings.Builder
	for _, r := range strings.ToLower(test) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	base := b.String()
	if len(base) > 40 {
		base = base[:40]
	}
	return fmt.Sprintf("t_%s_%d", base, n)
}

// IgnoreGoroutines is the goleak option for tests that check for leaks in a
// binary using Main: the goroutine reaping the cluster's server process lives
// as long as the binary.
//
//	defer goleak.VerifyNone(t, pgtest.IgnoreGoroutines())
func IgnoreGoroutines() goleak.Option {
	return goleak.IgnoreAnyFunction("github.com/cellpay/cellpay/internal/dev/pgcluster.(*child).supervise")
}
