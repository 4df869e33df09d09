package pgcluster

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Roles are the two login roles of one database that EnsureRoles
// provisions. Owner owns the public schema and every table and sequence in
// it, and runs the migrations. App can only read and write rows: SELECT,
// INSERT, UPDATE and DELETE on the tables, USAGE and SELECT on the
// sequences, membership of pg_monitor (read-only statistics, for
// ReadReplication), nothing else (no CREATE, DROP, ALTER, TRUNCATE, temporary
// tables), for tables made later by Owner too.
//
// Roles belong to the whole server, grants to one database: two databases
// on one server need other role names.
type Roles struct {
	Owner, OwnerPassword string
	App, AppPassword     string
}

func (r Roles) validate() error {
	if r.Owner == "" || r.App == "" || r.Owner == r.App {
		return errors.New("two distinct role names are required")
	}
	for _, pw := range []string{r.OwnerPassword, r.AppPassword} {
		if err := validPassword(pw); err != nil {
			return err
		}
	}
	return nil
}

// validPassword checks a role's password: at least 16 characters of
// printable ASCII, which SASLprep leaves as it is.
func validPassword(pw string) error {
	if len(pw) < 16 {
		return errors.New("passwords of at least 16 characters are required")
	}
	for _, b := range []byte(pw) {
		if b < 0x21 || b > 0x7e {
			return errors.New("passwords must be printable ASCII")
		}
	}
	return nil
}

// EnsureRoles makes database on the server at serverURL (connecting as a
// superuser) match r, whatever it held before: it creates missing roles
// and sets their passwords, hands the public schema and every table and
// sequence in it to r.Owner (tables a superuser made before the roles
// existed included), and grants r.App exactly its rights. It runs in one
// transaction and is safe to repeat; two runs on one server at the same
// time are not.
//
// The passwords reach the server as SCRAM-SHA-256 verifiers computed here,
// never in the clear, so no server log can hold them.
func EnsureRoles(ctx context.Context, serverURL, database string, r Roles) error {
	if err := r.validate(); err != nil {
		return fmt.Errorf("pgcluster: roles: %w", err)
	}
	cfg, err := pgx.ParseConfig(serverURL)
	if err != nil {
		return fmt.Errorf("pgcluster: roles: %w", err)
	}
	cfg.Database = database
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("pgcluster: roles: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return ensureRoles(ctx, tx, database, r) })
	if err != nil {
		return fmt.Errorf("pgcluster: roles of %s: %w", database, err)
	}
	return nil
}

func ensureRoles(ctx context.Context, tx pgx.Tx, database string, r Roles) error {
	owner, app, db := pgx.Identifier{r.Owner}.Sanitize(), pgx.Identifier{r.App}.Sanitize(), pgx.Identifier{database}.Sanitize()
	for _, role := range []struct{ name, password string }{{r.Owner, r.OwnerPassword}, {r.App, r.AppPassword}} {
		verifier, err := scramVerifier(role.password)
		if err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", role.name).Scan(&exists); err != nil {
			return err
		}
		verb := "CREATE"
		if exists {
			verb = "ALTER"
		}
		// The verifier is base64 and '$', ':': nothing to escape in a literal.
		if _, err := tx.Exec(ctx, verb+" ROLE "+pgx.Identifier{role.name}.Sanitize()+
			" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD '"+verifier+"'"); err != nil {
			return err
		}
	}

	stmts := []string{
		// Only the two roles connect, and nobody makes temporary tables.
		"REVOKE ALL ON DATABASE " + db + " FROM PUBLIC",
		"GRANT CONNECT ON DATABASE " + db + " TO " + owner + ", " + app,
		"ALTER SCHEMA public OWNER TO " + owner,
		"REVOKE ALL ON SCHEMA public FROM PUBLIC",
		"GRANT USAGE ON SCHEMA public TO " + app,
	}
	// Tables first: a sequence that a column owns follows its table.
	for _, kinds := range []string{"'r','p','v','m','f'", "'S'"} {
		rows, err := tx.Query(ctx, `SELECT c.relname, c.relkind::text FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public' AND c.relkind IN (`+kinds+`)
			AND c.relowner <> (SELECT oid FROM pg_roles WHERE rolname = $1)
			AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype IN ('a', 'i'))
			ORDER BY c.relname`, r.Owner)
		if err != nil {
			return err
		}
		names, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) ([2]string, error) {
			var v [2]string
			err := row.Scan(&v[0], &v[1])
			return v, err
		})
		if err != nil {
			return err
		}
		for _, n := range names {
			kind := map[string]string{"v": "VIEW", "m": "MATERIALIZED VIEW", "f": "FOREIGN TABLE", "S": "SEQUENCE"}[n[1]]
			if kind == "" {
				kind = "TABLE"
			}
			if _, err := tx.Exec(ctx, "ALTER "+kind+" public."+pgx.Identifier{n[0]}.Sanitize()+" OWNER TO "+owner); err != nil {
				return err
			}
		}
	}
	stmts = append(stmts,
		// Exactly these rights, whatever was granted before.
		"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM "+app,
		"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM "+app,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "+app,
		"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO "+app,
		// And the same on what the owner's migrations make later.
		"ALTER DEFAULT PRIVILEGES FOR ROLE "+owner+" IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO "+app,
		"ALTER DEFAULT PRIVILEGES FOR ROLE "+owner+" IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO "+app,
		// Read-only statistics, so that the cell can export its standby's
		// state and lag (ReadReplication): pg_stat_replication shows
		// other roles' walsenders only to pg_monitor (or superusers).
		"GRANT pg_monitor TO "+app,
	)
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// scramIterations is the server's own default (scram_iterations).
const scramIterations = 4096

// scramVerifier returns the SCRAM-SHA-256 verifier of password (RFC 5802,
// 7677) as Postgres stores it in pg_authid.rolpassword:
// SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>. password
// must be printable ASCII, which SASLprep leaves unchanged.
func scramVerifier(password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, scramIterations, sha256.Size)
	if err != nil {
		return "", err
	}
	mac := func(msg string) []byte {
		h := hmac.New(sha256.New, salted)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	stored := sha256.Sum256(mac("Client Key"))
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", scramIterations, b64(salt), b64(stored[:]), b64(mac("Server Key"))), nil
}
