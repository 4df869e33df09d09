package platform

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/cellpay/cellpay/internal/pgcluster"
)

// The roles of a cell's database in its private cluster (package
// pgcluster's Roles): the owner runs the cell's migrations, the cell
// serves as the application role, which can only read and write rows.
const (
	OwnerRole = "cellpay_owner"
	AppRole   = "cellpay_app"
)

// pgRolesDir holds, under DataDir, each cell's role passwords:
// pgroles/<cell>/<role>.password, 64 hex digits, mode 0600, kept across
// restarts.
const pgRolesDir = "pgroles"

// startDatabases gives every cell a database: its own private cluster (in
// parallel, initdb being the slow part), or its own database on DatabaseURL.
//
// A private cluster takes only TLS with SCRAM passwords over TCP, and its
// database has an owner role and an application role (cellpay_owner,
// cellpay_app), made or brought in line on every start: a data dir made
// before they existed has its tables handed to the owner. On DatabaseURL
// the cells connect with its role as it is, migrations and all: its server,
// its TLS and its roles are its operator's.
func (p *Platform) startDatabases(ctx context.Context) error {
	if p.cfg.DatabaseURL != "" {
		for _, cell := range p.cfg.Cells {
			name := "cellpay_" + sanitize(cell.ID)
			if err := pgcluster.CreateDatabase(ctx, p.cfg.DatabaseURL, name); err != nil {
				return fmt.Errorf("platform: database for %s: %w", cell.ID, err)
			}
			u, err := withDatabase(p.cfg.DatabaseURL, name)
			if err != nil {
				return fmt.Errorf("platform: DatabaseURL: %w", err)
			}
			p.dbURLs[cell.ID] = u
		}
		return nil
	}

	type result struct {
		cell     string
		c        *pgcluster.Cluster
		app, own string // URLs
		err      error
	}
	results := make(chan result, len(p.cfg.Cells))
	for i, cell := range p.cfg.Cells {
		name := "postgres-" + cell.ID
		// The certificates and passwords first, in this goroutine: they
		// share the CA and its folder.
		certs, err := ensurePostgresCert(p.cfg.DataDir, name)
		if err != nil {
			return fmt.Errorf("platform: %s: certificate: %w", name, err)
		}
		roles, err := ensureRolePasswords(filepath.Join(p.cfg.DataDir, pgRolesDir, cell.ID))
		if err != nil {
			return fmt.Errorf("platform: %s: %w", name, err)
		}
		logf, err := os.OpenFile(filepath.Join(p.logDir, name+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("platform: %s: %w", name, err)
		}
		p.pgLogs = append(p.pgLogs, logf)
		cfg := pgcluster.Config{
			DataDir: filepath.Join(p.cfg.DataDir, "pg", cell.ID),
			Port:    p.cfg.PGBasePort + i,
			BinDir:  p.cfg.PGBinDir,
			Log:     logf,
			TLS:     &pgcluster.TLS{CertFile: certs.Cert, KeyFile: certs.Key},
		}
		go func() {
			r := result{cell: cell.ID}
			r.c, r.err = pgcluster.Start(ctx, cfg)
			if r.err == nil {
				r.err = r.c.CreateDatabase(ctx, databaseName)
			}
			if r.err == nil {
				r.err = pgcluster.EnsureRoles(ctx, r.c.URL("postgres"), databaseName, roles)
			}
			if r.err != nil {
				r.err = fmt.Errorf("platform: %s: %w", name, r.err)
			} else {
				r.app = r.c.TLSURL(roles.App, roles.AppPassword, databaseName, certs.CA)
				r.own = r.c.TLSURL(roles.Owner, roles.OwnerPassword, databaseName, certs.CA)
			}
			results <- r
		}()
	}
	var errs []error
	for range p.cfg.Cells {
		r := <-results
		if r.c != nil {
			p.pgs[r.cell] = r.c
			p.dbURLs[r.cell], p.migrateURLs[r.cell] = r.app, r.own
		}
		errs = append(errs, r.err)
	}
	return errors.Join(errs...)
}

// ensureRolePasswords returns the roles of a cell's database with the
// passwords kept in dir, making the ones that are missing.
func ensureRolePasswords(dir string) (pgcluster.Roles, error) {
	r := pgcluster.Roles{Owner: OwnerRole, App: AppRole}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return r, err
	}
	for _, role := range []struct {
		name string
		pw   *string
	}{{OwnerRole, &r.OwnerPassword}, {AppRole, &r.AppPassword}} {
		path, err := ensureSecret(filepath.Join(dir, role.name+".password"))
		if err != nil {
			return r, err
		}
		if err := os.Chmod(path, 0o600); err != nil { // a copied file may have lost its mode
			return r, err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return r, err
		}
		*role.pw = strings.TrimSpace(string(b))
	}
	return r, nil
}

// CellDatabaseURL returns the database URL cellID was given: in a private
// cluster the application role's (AppRole, over TLS with its password),
// which reads and writes rows and nothing else; on Config.DatabaseURL that
// URL's role.
func (p *Platform) CellDatabaseURL(cellID string) string { return p.dbURLs[cellID] }

// CellMigrateDatabaseURL returns the URL cellID runs its migrations over,
// the schema owner's (OwnerRole), for what must change the schema; "" on
// Config.DatabaseURL, where the cell migrates over CellDatabaseURL. (The
// superuser is Postgres(cellID).URL, by the cluster's Unix socket.)
func (p *Platform) CellMigrateDatabaseURL(cellID string) string { return p.migrateURLs[cellID] }

// RedactURL returns a database URL fit to print: its password, if any,
// replaced by xxxxx.
func RedactURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// sanitize maps a cell ID to identifier characters: cell-a -> cell_a.
func sanitize(id string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		default:
			return '_'
		}
	}, id)
}

// withDatabase returns serverURL naming database name instead.
func withDatabase(serverURL, name string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}
