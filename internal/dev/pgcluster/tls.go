package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Files a cluster with TLS keeps in its data dir, written on every Start
// and by ReloadTLS.
const (
	tlsCertFile = "cellpay-server.crt"
	tlsKeyFile  = "cellpay-server.key"
	hbaFile     = "cellpay_hba.conf"
)

// tlsManaged are the settings a cluster with TLS owns.
var tlsManaged = []string{"ssl", "ssl_cert_file", "ssl_key_file", "hba_file", "password_encryption"}

// hbaConf is the client authentication of a cluster with TLS, in order of
// precedence: the superuser by the socket only; everyone else over TCP
// with TLS and a SCRAM password; anything else refused. (initdb's
// pg_hba.conf, which trusts everyone, is left unused: hba_file points here.)
const hbaConf = `# Written by pgcluster on every start; edits are lost.
# TYPE    DATABASE  USER      ADDRESS        METHOD
local     all       postgres                 trust
local     all       all                      reject
hostssl   all       postgres  all            reject
hostssl   all       all       127.0.0.1/32   scram-sha-256
hostssl   all       all       ::1/128        scram-sha-256
hostnossl all       all       all            reject
`

// hbaFor is hbaConf, and when replUser is set a line that lets it, and
// only it, connect for replication, with TLS and SCRAM (a database of
// "all" does not match replication connections, and nothing else does),
// and one that refuses it any database session.
func hbaFor(replUser string) string {
	if replUser == "" {
		return hbaConf
	}
	// The role may replicate and do nothing else: no database session.
	s := strings.Replace(hbaConf, "hostssl   all       all       127.0.0.1/32",
		"hostssl   all       "+replUser+" all reject\nhostssl   all       all       127.0.0.1/32", 1)
	return strings.Replace(s, "hostnossl all", "hostssl   replication "+replUser+" 127.0.0.1/32 scram-sha-256\nhostnossl all", 1)
}

// tlsSettings are the server settings of a cluster with TLS on dataDir.
func tlsSettings(dataDir string) map[string]string {
	return map[string]string{
		"ssl":                 "on",
		"ssl_cert_file":       filepath.Join(dataDir, tlsCertFile),
		"ssl_key_file":        filepath.Join(dataDir, tlsKeyFile),
		"hba_file":            filepath.Join(dataDir, hbaFile),
		"password_encryption": "scram-sha-256",
	}
}

// prepareTLS copies the certificate and key into the data dir, owned by
// the server user (postgres refuses a key that others can read, or that
// it does not own unless root does), and writes the hba file.
func (c *Cluster) prepareTLS(t TLS) error {
	for _, f := range []struct {
		src, name string
		mode      os.FileMode
	}{
		{t.CertFile, tlsCertFile, 0o644},
		{t.KeyFile, tlsKeyFile, 0o600},
	} {
		b, err := os.ReadFile(f.src)
		if err != nil {
			return fmt.Errorf("tls: %w", err)
		}
		if err := c.writeOwned(f.name, b, f.mode); err != nil {
			return fmt.Errorf("tls: %w", err)
		}
	}
	if err := c.writeOwned(hbaFile, []byte(hbaFor(c.replUser)), 0o600); err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	return nil
}

// ReloadTLS serves a renewed certificate without a restart: it copies
// t's certificate and key into the data dir again (as Start does) and
// has the running server re-read them, with pg_reload_conf() as the
// superuser over the Unix socket. Sessions already open keep the
// certificate they were set up with; every new connection gets the new
// one. A server that cannot load the new files logs it and keeps serving
// the old ones (PostgreSQL's reload keeps the previous SSL context on
// error). The cluster must have been started with Config.TLS.
func (c *Cluster) ReloadTLS(ctx context.Context, t TLS) error {
	if !c.tls {
		return errors.New("pgcluster: reload TLS: the cluster was started without TLS")
	}
	if t.CertFile == "" || t.KeyFile == "" {
		return errors.New("pgcluster: reload TLS: CertFile and KeyFile are required")
	}
	c.mu.Lock() // not while a start or stop rewrites the data dir
	err := c.prepareTLS(t)
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("pgcluster: reload %w", err)
	}
	conn, err := c.superConn(ctx)
	if err != nil {
		return fmt.Errorf("pgcluster: reload TLS: %w", err)
	}
	defer conn.Close(context.Background())
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_reload_conf()").Scan(&ok); err != nil {
		return fmt.Errorf("pgcluster: reload TLS: %w", err)
	}
	if !ok {
		return errors.New("pgcluster: reload TLS: pg_reload_conf() returned false")
	}
	return nil
}

// writeOwned replaces the data dir's file name with b, atomically, with
// mode and owned by the server user.
func (c *Cluster) writeOwned(name string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(c.dataDir, "."+name+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = tmp.Chmod(mode)
	if err == nil && c.cred != nil {
		err = tmp.Chown(int(c.cred.Uid), int(c.cred.Gid))
	}
	if err == nil {
		_, err = tmp.Write(b)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(c.dataDir, name))
}

// TLSURL returns a URL for database as user with password, over TCP and
// TLS, verifying the server's certificate for 127.0.0.1 against caFile
// (sslmode=verify-full). It is what a role made by EnsureRoles connects
// with to a cluster with TLS.
func (c *Cluster) TLSURL(user, password, database, caFile string) string {
	q := url.Values{"sslmode": {"verify-full"}, "sslrootcert": {caFile}}
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(user, password),
		Host:     "127.0.0.1:" + strconv.Itoa(c.port),
		Path:     "/" + database,
		RawQuery: q.Encode(),
	}
	return u.String()
}
