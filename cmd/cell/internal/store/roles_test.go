package store

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cellpay/cellpay/internal/dev/pgcluster"
	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/internal/refdata"
)

// TestOwnerMigratesAppServes: the schema migrated as the owner role, the
// store works as the application role (rows, sequences, COPY), which
// cannot change the schema. (The test cluster trusts every connection, so
// the passwords are not checked here; package pgcluster's tests check
// them over TLS.)
func TestOwnerMigratesAppServes(t *testing.T) {
	ctx := ctxT(t)
	dbURL := pgtest.NewDatabase(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	// Roles are the server's: names of this test's own.
	roles := pgcluster.Roles{Owner: db + "_owner", OwnerPassword: strings.Repeat("o", 20), App: db + "_app", AppPassword: strings.Repeat("a", 20)}
	if err := pgcluster.EnsureRoles(ctx, dbURL, db, roles); err != nil {
		t.Fatal(err)
	}
	as := func(role, password string) string {
		v := *u
		v.User = url.UserPassword(role, password)
		return v.String()
	}
	ownerURL, appURL := as(roles.Owner, roles.OwnerPassword), as(roles.App, roles.AppPassword)

	var pgErr *pgconn.PgError
	if err := Migrate(ctx, appURL); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Fatalf("Migrate as the app: %v, want insufficient_privilege", err)
	}
	if err := Migrate(ctx, ownerURL); err != nil {
		t.Fatalf("Migrate as the owner: %v", err)
	}
	if err := Migrate(ctx, ownerURL); err != nil { // nothing pending
		t.Fatalf("Migrate again: %v", err)
	}
	s, err := Connect(ctx, appURL, 4)
	if err != nil {
		t.Fatalf("Connect as the app: %v", err)
	}
	defer s.Close()

	r := record("t-1")
	if ins, _, err := s.Insert(ctx, r); err != nil || !ins {
		t.Fatalf("Insert: %v, %v", ins, err)
	}
	r.State, r.AuthCode, r.UpdatedAt = cellside.StateApproved, "A1B2C3", t0.Add(time.Second)
	if err := s.Persist(ctx, r, cellside.StateReceived); err != nil { // a final outcome: its outbox row (bigserial) too
		t.Fatalf("Persist: %v", err)
	}
	meta := RefdataMeta{Kind: refdata.KindSnapshot, Hash: "h1", PublishedAt: t0, AppliedAt: t0}
	if err := s.SaveRefdataSnapshot(ctx, sampleFile(3), meta); err != nil { // COPY, DELETE
		t.Fatalf("SaveRefdataSnapshot: %v", err)
	}
	if _, _, err := s.LoadRefdata(ctx); err != nil {
		t.Fatalf("LoadRefdata: %v", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	// Partitions are the owner's, made and dropped for the app by its functions.
	parts, err := s.Partitions(ctx)
	if err != nil || len(parts) != 4 {
		t.Fatalf("Partitions: %v, %v; want the first and the next of both tables", parts, err)
	}
	last := parts[len(parts)-1].To
	if made, err := s.CreatePartition(ctx, "outbox", last, 3); err != nil || !made {
		t.Fatalf("CreatePartition: %v, %v", made, err)
	}
	if kept, err := s.DropPartition(ctx, "outbox_"+last.Format("2006_01"), time.Now().AddDate(0, 0, -9)); err != nil || kept == "" {
		t.Fatalf("DropPartition of a quarter to come: %q, %v; want kept", kept, err)
	}

	app, err := pgx.Connect(ctx, appURL)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close(ctx)
	var n int
	if err := app.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&n); err != nil || n != 1 {
		t.Errorf("outbox rows: %d, %v; want 1", n, err)
	}
	for _, sql := range []string{"DROP TABLE transactions", "TRUNCATE outbox", "ALTER TABLE transactions DROP COLUMN masked_pan", "CREATE TABLE x (id int)", "DROP TABLE schema_version",
		"DROP TABLE transactions_legacy", "CREATE TABLE outbox_2040_01 PARTITION OF outbox FOR VALUES FROM ('2040-01-01') TO ('2040-02-01')"} {
		if _, err := app.Exec(ctx, sql); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("app: %s: %v, want insufficient_privilege", sql, err)
		}
	}
	// A schema change is the owner's, and the app gets rights on what it adds.
	owner, err := pgx.Connect(ctx, ownerURL)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(ctx)
	if _, err := owner.Exec(ctx, "CREATE TABLE later (id bigserial PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Exec(ctx, "INSERT INTO later DEFAULT VALUES"); err != nil {
		t.Errorf("app: a table the owner made later: %v", err)
	}
}
