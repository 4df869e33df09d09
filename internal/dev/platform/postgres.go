package platform

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/cellpay/cellpay/internal/dev/pgcluster"
	"github.com/cellpay/cellpay/internal/dev/pki"
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
		pp       *pgPair
		app, own string // URLs
		err      error
	}
	results := make(chan result, len(p.cfg.Cells))
	for i, cell := range p.cfg.Cells {
		name := "postgres-" + cell.ID
		// The certificates and passwords first, in this goroutine: they
		// share the CA and its folder. One certificate serves both nodes:
		// it is for the loopback addresses, whatever the port.
		certs, err := ensurePostgresCert(p.cfg.DataDir, name)
		if err != nil {
			return fmt.Errorf("platform: %s: certificate: %w", name, err)
		}
		rolesDir := filepath.Join(p.cfg.DataDir, pgRolesDir, cell.ID)
		roles, err := ensureRolePasswords(rolesDir)
		if err != nil {
			return fmt.Errorf("platform: %s: %w", name, err)
		}
		pp := &pgPair{cell: cell.ID, ca: certs.CA}
		// The replication role even without a standby: a cross-site
		// copy (StartSiteCopy) streams as it.
		pw, err := readPassword(rolesDir, ReplicationRole)
		if err != nil {
			return fmt.Errorf("platform: %s: %w", name, err)
		}
		pp.repl = pgcluster.Replication{User: ReplicationRole, Password: pw}
		for node, n := range []struct {
			dir, log string
			port     int
		}{
			{filepath.Join(p.cfg.DataDir, "pg", cell.ID), name, p.cfg.PGBasePort + i},
			{filepath.Join(p.cfg.DataDir, "pg", cell.ID+"-standby"), name + "-standby", p.cfg.StandbyBasePort + i},
		} {
			logf, err := os.OpenFile(filepath.Join(p.logDir, n.log+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
			if err != nil {
				return fmt.Errorf("platform: %s: %w", name, err)
			}
			p.pgLogs = append(p.pgLogs, logf)
			pp.nodes[node] = pgNode{dataDir: n.dir, port: n.port, log: logf}
		}
		pp.cfg = func(node int) pgcluster.Config {
			cfg := pgcluster.Config{
				DataDir:  pp.nodes[node].dataDir,
				Port:     pp.nodes[node].port,
				BinDir:   p.cfg.PGBinDir,
				Log:      pp.nodes[node].log,
				TLS:      &pgcluster.TLS{CertFile: certs.Cert, KeyFile: certs.Key},
				Settings: map[string]string{},
			}
			// Without a standby this run too: a slot left by an earlier
			// run's standby must not keep WAL without bound.
			for k, v := range pgSettings {
				cfg.Settings[k] = v
			}
			if p.cfg.NoFsync {
				cfg.Settings["fsync"] = "off"
			}
			// Even without a standby: a cross-site copy may stream
			// (StartSiteCopy). The role exists only once
			// EnsureReplication made it.
			cfg.ReplicationUser = ReplicationRole
			return cfg
		}
		p.pairs[cell.ID] = pp
		go func() {
			r := result{pp: pp, err: p.startPair(ctx, pp, roles)}
			if r.err != nil {
				r.err = fmt.Errorf("platform: %s: %w", name, r.err)
			} else {
				hosts := []string{pp.nodes[0].addr(), pp.nodes[1].addr()}
				if p.cfg.NoStandby {
					hosts = []string{pp.nodes[pp.primary].addr()}
				}
				r.app = pairURL(roles.App, roles.AppPassword, hosts, certs.CA)
				r.own = pairURL(roles.Owner, roles.OwnerPassword, hosts, certs.CA)
			}
			results <- r
		}()
	}
	var errs []error
	for range p.cfg.Cells {
		r := <-results
		if r.err == nil {
			p.dbURLs[r.pp.cell], p.migrateURLs[r.pp.cell] = r.app, r.own
		}
		errs = append(errs, r.err)
	}
	return errors.Join(errs...)
}

// startPair starts a cell's primary (initdb the first time), its
// database and roles, then, unless Config.NoStandby, its standby, and
// requires the standby synchronously before it returns: the cell starts
// after, so it never commits on one server alone. The primary's own
// setup runs without a synchronous standby (the one it may have had is
// not there yet).
func (p *Platform) startPair(ctx context.Context, pp *pgPair, roles pgcluster.Roles) error {
	// Even without a standby this run, a failover of an earlier one may
	// have left the primary on node 1.
	node, err := pickPrimary(pp.nodes)
	if err != nil {
		return err
	}
	_, statErr := os.Stat(filepath.Join(pp.nodes[node].dataDir, "PG_VERSION"))
	fresh := statErr != nil // a new primary: any standby is of another history
	prim, err := pgcluster.Start(ctx, pp.cfg(node))
	if err != nil {
		return err
	}
	pp.mu.Lock()
	pp.primary, pp.srv[node] = node, prim
	pp.mu.Unlock()
	if err := prim.SetSynchronousStandby(ctx, ""); err != nil {
		return err
	}
	if err := prim.CreateDatabase(ctx, databaseName); err != nil {
		return err
	}
	if err := pgcluster.EnsureRoles(ctx, prim.URL("postgres"), databaseName, roles); err != nil {
		return err
	}
	if p.cfg.NoStandby {
		return nil
	}
	sb, err := pp.startStandby(ctx, 1-node, prim, fresh)
	if err != nil {
		return fmt.Errorf("standby: %w", err)
	}
	pp.mu.Lock()
	pp.srv[1-node] = sb
	pp.mu.Unlock()
	return nil
}

// pairURL is the URL of database on a cell's nodes, as user, over TLS
// verified for 127.0.0.1 (sslmode=verify-full, which the certificate of
// both nodes passes), on whichever of hosts takes writes
// (target_session_attrs=read-write: pgx tries them in order and skips a
// standby or a dead server).
func pairURL(user, password string, hosts []string, caFile string) string {
	q := url.Values{"sslmode": {"verify-full"}, "sslrootcert": {caFile}}
	if len(hosts) > 1 {
		q.Set("target_session_attrs", "read-write")
		// Per host: a primary that hangs rather than dies (until the
		// watchdog fences it) must not hold a new connection from
		// trying the next host.
		q.Set("connect_timeout", "2")
	}
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(user, password),
		Host:     strings.Join(hosts, ","),
		Path:     "/" + databaseName,
		RawQuery: q.Encode(),
	}
	return u.String()
}

// ensureRolePasswords returns the roles of a cell's database with the
// passwords kept in dir, making the ones that are missing.
func ensureRolePasswords(dir string) (pgcluster.Roles, error) {
	r := pgcluster.Roles{Owner: OwnerRole, App: AppRole}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return r, err
	}
	var err error
	if r.OwnerPassword, err = readPassword(dir, OwnerRole); err != nil {
		return r, err
	}
	r.AppPassword, err = readPassword(dir, AppRole)
	return r, err
}

// readPassword returns role's password kept in dir/<role>.password,
// making it if it is missing.
func readPassword(dir, role string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path, err := ensureSecret(filepath.Join(dir, role+".password"))
	if err != nil {
		return "", err
	}
	if err := os.Chmod(path, 0o600); err != nil { // a copied file may have lost its mode
		return "", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// CellDatabaseURL returns the database URL cellID was given: in a private
// cluster the application role's (AppRole, over TLS with its password),
// which reads and writes rows and nothing else; on Config.DatabaseURL that
// URL's role.
// After MoveCellDatabase, the URL it was given.
func (p *Platform) CellDatabaseURL(cellID string) string {
	p.urlMu.RLock()
	defer p.urlMu.RUnlock()
	return p.dbURLs[cellID]
}

// CellMigrateDatabaseURL returns the URL cellID runs its migrations over,
// the schema owner's (OwnerRole), for what must change the schema; "" on
// Config.DatabaseURL, where the cell migrates over CellDatabaseURL. (The
// superuser is Postgres(cellID).URL, by the cluster's Unix socket.)
// After MoveCellDatabase, the URL it was given.
func (p *Platform) CellMigrateDatabaseURL(cellID string) string {
	p.urlMu.RLock()
	defer p.urlMu.RUnlock()
	return p.migrateURLs[cellID]
}

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

// postgresCertName is the server certificate of cellID's private Postgres
// (both nodes), under DataDir/pki.
func postgresCertName(cellID string) string { return "postgres-" + cellID }

// rotatePostgres issues each private cluster's server certificate again
// and has its running nodes, primary and standby, serve it without a
// restart (pgcluster's ReloadTLS: the files copied into the data dir,
// then pg_reload_conf()). A node that is not running (a standby being
// rebuilt after a failover) copies the new files when it starts. Nothing
// to do on DatabaseURL.
func (p *Platform) rotatePostgres(ctx context.Context, ca *pki.CA) error {
	var errs []error
	for _, cell := range p.cfg.Cells {
		pp := p.pairs[cell.ID]
		if pp == nil {
			continue
		}
		name := postgresCertName(cell.ID)
		if err := ca.Issue(name, loopbackHosts, pki.Server); err != nil {
			errs = append(errs, fmt.Errorf("platform: %s: %w", name, err))
			continue
		}
		f := TLSFiles(p.cfg.DataDir, name)
		prim, sb := pp.current()
		for _, c := range []*pgcluster.Cluster{prim, sb} {
			if c == nil || !c.Running() {
				continue
			}
			if err := c.ReloadTLS(ctx, pgcluster.TLS{CertFile: f.Cert, KeyFile: f.Key}); err != nil {
				errs = append(errs, fmt.Errorf("platform: %s (port %d): %w", name, c.Port(), err))
			}
		}
	}
	return errors.Join(errs...)
}
