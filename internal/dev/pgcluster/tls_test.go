package pgcluster_test

import (
	"context"
	"crypto/tls"
	"math/big"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellpay/cellpay/internal/dev/pki"
)

// TestReloadTLS replaces the server's certificate files in place and
// reloads them: the same server (same pid) presents the new certificate
// to a new verify-full connection, and a session opened before keeps
// working.
func TestReloadTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pkiDir := filepath.Join(t.TempDir(), "pki")
	certFile, _, caFile, err := pki.Loopback(pkiDir, "postgres-test")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := tlsConfig(t, filepath.Join(t.TempDir(), "data"))
	cfg.TLS.CertFile, cfg.TLS.KeyFile = certFile, pki.KeyFile(pkiDir, "postgres-test")
	c := startCluster(t, ctx, cfg)
	exec(t, ctx, c.URL("postgres"), "CREATE ROLE reload_user LOGIN PASSWORD 'reload-password-0123456789'")
	url := c.TLSURL("reload_user", "reload-password-0123456789", "postgres", caFile)

	served := func() *big.Int {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer conn.Close(context.Background())
		tc, ok := conn.PgConn().Conn().(*tls.Conn)
		if !ok {
			t.Fatalf("connection is %T, not TLS", conn.PgConn().Conn())
		}
		return tc.ConnectionState().PeerCertificates[0].SerialNumber
	}
	old := served()
	if f := fileSerialOf(t, certFile); f.Cmp(old) != 0 {
		t.Fatalf("serves %x, file holds %x", old, f)
	}
	open := connect(t, ctx, url)
	pid := c.Pid()

	ca, err := pki.EnsureCA(pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Issue("postgres-test", []string{"127.0.0.1", "::1", "localhost"}, pki.Server); err != nil {
		t.Fatal(err)
	}
	want := fileSerialOf(t, certFile)
	if want.Cmp(old) == 0 {
		t.Fatal("the new certificate has the old serial")
	}
	if got := served(); got.Cmp(old) != 0 {
		t.Fatalf("before the reload the server presents %x, want the old %x", got, old)
	}
	if err := c.ReloadTLS(ctx, *cfg.TLS); err != nil {
		t.Fatal(err)
	}
	// pg_reload_conf signals the postmaster, which reloads asynchronously.
	deadline := time.Now().Add(10 * time.Second)
	for got := served(); got.Cmp(want) != 0; got = served() {
		if time.Now().After(deadline) {
			t.Fatalf("after the reload the server presents %x, want %x", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := open.Ping(ctx); err != nil {
		t.Fatalf("a session opened before the reload: %v", err)
	}
	if c.Pid() != pid {
		t.Fatalf("the server restarted (pid %d, then %d)", pid, c.Pid())
	}
}

func fileSerialOf(t *testing.T, path string) *big.Int {
	t.Helper()
	c, err := pki.ReadCertificate(path)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}
