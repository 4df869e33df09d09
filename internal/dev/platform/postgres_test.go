package platform_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cellpay/cellpay/internal/dev/pgcluster"
	"github.com/cellpay/cellpay/internal/dev/platform"
)

// makeLegacyDatabase makes cell's cluster in cfg's data dir as the
// platform did before roles existed: trust authentication, and a table
// (with a row and a sequence) owned by the superuser.
func makeLegacyDatabase(t *testing.T, ctx context.Context, cfg platform.Config, cell int) {
	t.Helper()
	c, err := pgcluster.Start(ctx, pgcluster.Config{
		DataDir: filepath.Join(cfg.DataDir, "pg", cfg.Cells[cell].ID), Port: cfg.PGBasePort + cell, NoSync: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if err := c.CreateDatabase(ctx, "cellpay"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, c.URL("cellpay"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE legacy (id bigserial PRIMARY KEY, v text); INSERT INTO legacy (v) VALUES ('old')"); err != nil {
		t.Fatal(err)
	}
}

func connectURL(t *testing.T, ctx context.Context, u string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("connect as %s: %v", userOf(t, u), err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func userOf(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return p.User.Username()
}

func insufficientPrivilege(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// checkDatabases: every cell was given its database's application role
// over verified TLS and the owner role for migrations, with passwords
// kept 0600; the application role reads and writes rows but cannot drop
// or create a table; plaintext is refused. legacyCell's database was made
// before the roles (makeLegacyDatabase): its table is the owner's now.
func checkDatabases(t *testing.T, ctx context.Context, p *platform.Platform, legacyCell string) {
	t.Helper()
	for _, c := range p.Config().Cells {
		appURL, ownerURL := p.CellDatabaseURL(c.ID), p.CellMigrateDatabaseURL(c.ID)
		u, err := url.Parse(appURL)
		if err != nil {
			t.Fatal(err)
		}
		if q := u.Query(); u.User.Username() != platform.AppRole || q.Get("sslmode") != "verify-full" || q.Get("sslrootcert") != p.CAFile() {
			t.Errorf("%s: CellDatabaseURL %s, want %s with sslmode=verify-full and the CA", c.ID, platform.RedactURL(appURL), platform.AppRole)
		}
		if userOf(t, ownerURL) != platform.OwnerRole {
			t.Errorf("%s: CellMigrateDatabaseURL %s, want %s", c.ID, platform.RedactURL(ownerURL), platform.OwnerRole)
		}
		pw, _ := u.User.Password()
		if strings.Contains(platform.RedactURL(appURL), pw) {
			t.Errorf("RedactURL keeps the password: %s", platform.RedactURL(appURL))
		}
		// The passwords are not on the cell's command line (which its log
		// records, and ps shows).
		if log, err := os.ReadFile(p.Process(c.ID).LogPath()); err != nil || !strings.Contains(string(log), "-listen") || strings.Contains(string(log), pw) {
			t.Errorf("%s's log holds its command line with a database password, or no command line (%v)", c.ID, err)
		}
		for _, role := range []string{platform.OwnerRole, platform.AppRole} {
			path := filepath.Join(p.Config().DataDir, "pgroles", c.ID, role+".password")
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: %v, %v; want mode 0600", path, fi, err)
			}
		}

		owner, app := connectURL(t, ctx, ownerURL), connectURL(t, ctx, appURL)
		if _, err := owner.Exec(ctx, "CREATE TABLE probe (id bigserial PRIMARY KEY)"); err != nil {
			t.Fatalf("%s: owner: %v", c.ID, err)
		}
		if _, err := app.Exec(ctx, "INSERT INTO probe DEFAULT VALUES"); err != nil {
			t.Errorf("%s: app: INSERT: %v", c.ID, err)
		}
		for _, sql := range []string{"DROP TABLE probe", "CREATE TABLE other (id int)", "TRUNCATE probe"} {
			if _, err := app.Exec(ctx, sql); !insufficientPrivilege(err) {
				t.Errorf("%s: app: %s: %v, want insufficient_privilege", c.ID, sql, err)
			}
		}
		if _, err := owner.Exec(ctx, "DROP TABLE probe"); err != nil {
			t.Errorf("%s: owner: %v", c.ID, err)
		}
		q := u.Query()
		q.Set("sslmode", "disable")
		u.RawQuery = q.Encode()
		if conn, err := pgx.Connect(ctx, u.String()); err == nil {
			conn.Close(ctx)
			t.Errorf("%s: the application role connected without TLS", c.ID)
		}

		if c.ID != legacyCell {
			continue
		}
		var v, tableOwner string
		if err := app.QueryRow(ctx, "SELECT v FROM legacy").Scan(&v); err != nil || v != "old" {
			t.Errorf("%s: app: the legacy table: %q, %v", c.ID, v, err)
		}
		if _, err := app.Exec(ctx, "INSERT INTO legacy (v) VALUES ('new')"); err != nil {
			t.Errorf("%s: app: INSERT into the legacy table: %v", c.ID, err)
		}
		su := connectURL(t, ctx, p.Postgres(c.ID).URL("cellpay"))
		if err := su.QueryRow(ctx, "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = 'legacy'").Scan(&tableOwner); err != nil || tableOwner != platform.OwnerRole {
			t.Errorf("%s: the legacy table is owned by %q (%v), want %s", c.ID, tableOwner, err, platform.OwnerRole)
		}
	}
}
