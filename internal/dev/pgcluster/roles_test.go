package pgcluster_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cellpay/cellpay/internal/dev/pgcluster"
	"github.com/cellpay/cellpay/internal/dev/pki"
)

var testRoles = pgcluster.Roles{
	Owner: "cellpay_owner", OwnerPassword: "owner-password-0123456789",
	App: "cellpay_app", AppPassword: "app-password-0123456789",
}

// tlsConfig is a cluster with TLS and a server certificate for loopback
// from a fresh CA, whose file it returns too.
func tlsConfig(t *testing.T, dataDir string) (pgcluster.Config, string) {
	t.Helper()
	cert, key, ca, err := pki.Loopback(filepath.Join(t.TempDir(), "pki"), "postgres-test")
	if err != nil {
		t.Fatal(err)
	}
	return pgcluster.Config{DataDir: dataDir, NoSync: true, TLS: &pgcluster.TLS{CertFile: cert, KeyFile: key}}, ca
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

func connect(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// withQuery returns rawURL with query parameter k set to v.
func withQuery(t *testing.T, rawURL, k, v string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

func TestTLSAndRoles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cfg, ca := tlsConfig(t, filepath.Join(t.TempDir(), "data"))
	c := startCluster(t, ctx, cfg)

	if !strings.Contains(c.URL("app"), "host=") {
		t.Errorf("superuser URL %s is not over the Unix socket", c.URL("app"))
	}
	if err := c.CreateDatabase(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := pgcluster.EnsureRoles(ctx, c.URL("postgres"), "app", testRoles); err != nil {
			t.Fatalf("EnsureRoles: %v", err)
		}
	}
	ownerURL := c.TLSURL(testRoles.Owner, testRoles.OwnerPassword, "app", ca)
	appURL := c.TLSURL(testRoles.App, testRoles.AppPassword, "app", ca)

	// The owner migrates; the application reads and writes rows, over TLS.
	owner := connect(t, ctx, ownerURL)
	if _, err := owner.Exec(ctx, "CREATE TABLE t (id bigserial PRIMARY KEY, v text)"); err != nil {
		t.Fatalf("owner: CREATE TABLE: %v", err)
	}
	app := connect(t, ctx, appURL)
	var ssl bool
	if err := app.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
		t.Errorf("app connection: ssl=%v, %v", ssl, err)
	}
	if _, err := app.Exec(ctx, "INSERT INTO t (v) VALUES ('a')"); err != nil {
		t.Fatalf("app: INSERT: %v", err)
	}
	if _, err := app.Exec(ctx, "UPDATE t SET v = 'b'"); err != nil {
		t.Fatalf("app: UPDATE: %v", err)
	}
	var n int
	if err := app.QueryRow(ctx, "SELECT count(*) FROM t WHERE v = 'b'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("app: SELECT: %d, %v", n, err)
	}
	if _, err := app.Exec(ctx, "DELETE FROM t"); err != nil {
		t.Fatalf("app: DELETE: %v", err)
	}

	// The application cannot change the schema.
	for _, sql := range []string{
		"DROP TABLE t",
		"CREATE TABLE u (id int)",
		"CREATE TEMPORARY TABLE u (id int)",
		"TRUNCATE t",
		"ALTER TABLE t ADD COLUMN w int",
		"CREATE INDEX t_v ON t (v)",
		"CREATE SCHEMA s",
	} {
		if _, err := app.Exec(ctx, sql); sqlState(err) != "42501" { // insufficient_privilege
			t.Errorf("app: %s: %v, want insufficient_privilege", sql, err)
		}
	}

	// Refused: plaintext TCP, a wrong password, the superuser over TCP.
	for name, u := range map[string]string{
		"plaintext":            withQuery(t, appURL, "sslmode", "disable"),
		"wrong password":       c.TLSURL(testRoles.App, "not-the-password-0123", "app", ca),
		"superuser over TCP":   c.TLSURL(pgcluster.Superuser, "anything-at-all-0123", "app", ca),
		"superuser, plaintext": withQuery(t, c.TLSURL(pgcluster.Superuser, "", "app", ca), "sslmode", "disable"),
	} {
		conn, err := pgx.Connect(ctx, u)
		if err == nil {
			conn.Close(ctx)
			t.Errorf("%s: connected", name)
			continue
		}
		if code := sqlState(err); code != "28000" && code != "28P01" { // invalid_authorization_specification, invalid_password
			t.Errorf("%s: %v, want an authentication failure", name, err)
		}
	}

	// The server stores SCRAM verifiers, never the passwords.
	su := connect(t, ctx, c.URL("postgres"))
	rows, err := su.Query(ctx, "SELECT rolname, rolpassword, rolsuper, rolcreaterole FROM pg_authid WHERE rolname = ANY($1)", []string{testRoles.Owner, testRoles.App})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for rows.Next() {
		var name, pw string
		var super, createRole bool
		if err := rows.Scan(&name, &pw, &super, &createRole); err != nil {
			t.Fatal(err)
		}
		seen++
		if !strings.HasPrefix(pw, "SCRAM-SHA-256$4096:") || strings.Contains(pw, testRoles.OwnerPassword) || strings.Contains(pw, testRoles.AppPassword) {
			t.Errorf("%s: rolpassword %q, want a SCRAM-SHA-256 verifier", name, pw)
		}
		if super || createRole {
			t.Errorf("%s: superuser %v, createrole %v", name, super, createRole)
		}
	}
	if rows.Err() != nil || seen != 2 {
		t.Fatalf("roles: %d, %v", seen, rows.Err())
	}
}

// TestEnsureRolesConverges: a data dir made before the roles existed
// (trust authentication, tables owned by the superuser) gets TLS and its
// roles, the old tables handed to the owner.
func TestEnsureRolesConverges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "data")
	old := startCluster(t, ctx, pgcluster.Config{DataDir: dir, NoSync: true})
	if err := old.CreateDatabase(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	exec(t, ctx, old.URL("app"), "CREATE TABLE t (id bigserial PRIMARY KEY, v text); INSERT INTO t (v) VALUES ('old'); CREATE SEQUENCE s")
	oldURL := old.URL("app")
	if err := old.Stop(); err != nil {
		t.Fatal(err)
	}

	cfg, ca := tlsConfig(t, dir)
	cfg.Port = old.Port()
	c := startCluster(t, ctx, cfg)
	if conn, err := pgx.Connect(ctx, oldURL); err == nil {
		conn.Close(ctx)
		t.Fatal("the old trusted URL still connects")
	}
	if err := pgcluster.EnsureRoles(ctx, c.URL("postgres"), "app", testRoles); err != nil {
		t.Fatalf("EnsureRoles: %v", err)
	}
	su := connect(t, ctx, c.URL("app"))
	owners, err := su.Query(ctx, `SELECT c.relname, pg_get_userbyid(c.relowner) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind IN ('r', 'S', 'i')`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(owners, pgx.RowToStructByPos[struct{ Name, Owner string }])
	if err != nil || len(got) != 4 { // t, t_pkey, t_id_seq, s
		t.Fatalf("relations: %v, %v", got, err)
	}
	for _, r := range got {
		if r.Owner != testRoles.Owner {
			t.Errorf("%s is owned by %s", r.Name, r.Owner)
		}
	}

	app := connect(t, ctx, c.TLSURL(testRoles.App, testRoles.AppPassword, "app", ca))
	if _, err := app.Exec(ctx, "INSERT INTO t (v) VALUES ('new')"); err != nil { // the sequence too
		t.Fatalf("app: INSERT into an old table: %v", err)
	}
	var n int
	if err := app.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 2 {
		t.Fatalf("app: SELECT: %d, %v", n, err)
	}
	if _, err := app.Exec(ctx, "DROP TABLE t"); sqlState(err) != "42501" {
		t.Errorf("app: DROP TABLE on an old table: %v, want insufficient_privilege", err)
	}
	owner := connect(t, ctx, c.TLSURL(testRoles.Owner, testRoles.OwnerPassword, "app", ca))
	if _, err := owner.Exec(ctx, "ALTER TABLE t ADD COLUMN w int"); err != nil {
		t.Errorf("owner: ALTER an old table: %v", err)
	}
}

// TestTLSLongDataDir: a data dir too deep for a socket inside it still
// gets one (elsewhere), which is the superuser's only way in with TLS.
func TestTLSLongDataDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 40), "data")
	cfg, _ := tlsConfig(t, dir)
	c := startCluster(t, ctx, cfg)
	if strings.Contains(c.URL("postgres"), url.QueryEscape(dir)) {
		t.Fatalf("the socket is in the data dir %s, too long for a socket address", dir)
	}
	if err := c.CreateDatabase(ctx, "app"); err != nil {
		t.Fatalf("the superuser by the socket: %v", err)
	}
	u, err := url.Parse(c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	sock := u.Query().Get("host")
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket dir %s after a clean stop: %v, want it removed", sock, err)
	}
}
