package pki

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

func TestCAAndServerTLS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	ca, err := EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(dir, caKeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("CA key mode: %v", err)
	}
	if err := ca.EnsureCert("gtr", []string{"127.0.0.1", "localhost"}, Server); err != nil {
		t.Fatal(err)
	}
	// Reloading the CA gives the same one; EnsureCert keeps a good cert.
	before, _ := os.ReadFile(CertFile(dir, "gtr"))
	ca2, err := EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca2.EnsureCert("gtr", []string{"127.0.0.1"}, Server); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(CertFile(dir, "gtr")); string(after) != string(before) {
		t.Fatal("EnsureCert reissued a certificate that was still good")
	}
	// A host it does not cover makes it reissue.
	if err := ca2.EnsureCert("gtr", []string{"127.0.0.1", "gtr.cellpay.svc"}, Server); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(CertFile(dir, "gtr")); string(after) == string(before) {
		t.Fatal("EnsureCert kept a certificate that misses a host")
	}

	srvCfg, stop, err := tlsconf.ServerConfig(CertFile(dir, "gtr"), KeyFile(dir, "gtr"), 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	cliCfg, err := tlsconf.ClientConfig(ca.CertFile())
	if err != nil {
		t.Fatal(err)
	}
	serial := func() string {
		d := tls.Dialer{Config: cliCfg}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := d.DialContext(ctx, "tcp", lis.Addr().String())
		if err != nil {
			t.Fatalf("TLS dial with the dev CA: %v", err)
		}
		defer c.Close()
		return c.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	first := serial()
	// A certificate replaced in place is served without a restart.
	if err := ca.Issue("gtr", []string{"127.0.0.1"}, Server); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the reissued certificate served", func() bool { return serial() != first })

	// A client that does not trust the dev CA fails.
	other, err := EnsureCA(filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	badCfg, _ := tlsconf.ClientConfig(other.CertFile())
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", lis.Addr().String(), badCfg)
	if err == nil {
		c.Close()
		t.Fatal("a client trusting another CA connected")
	}
}

// TestEnsureCertReissuesForUsageAndURI: a certificate that lacks a usage
// or a URI SAN it is now asked for (the GTR's, server-only before the
// internal hops) is reissued; one that has them is kept.
func TestEnsureCertReissuesForUsageAndURI(t *testing.T) {
	ca, err := EnsureCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	serialOf := func() string {
		c, err := readCert(CertFile(ca.Dir, "gtr"))
		if err != nil {
			t.Fatal(err)
		}
		return c.SerialNumber.String()
	}
	if err := ca.EnsureCert("gtr", []string{"127.0.0.1"}, Server); err != nil {
		t.Fatal(err)
	}
	first := serialOf()
	const id = "spiffe://cellpay.internal/gtr"
	if err := ca.EnsureCert("gtr", []string{"127.0.0.1", id}, Server); err != nil {
		t.Fatal(err)
	}
	second := serialOf()
	if second == first {
		t.Fatal("kept a certificate without the URI asked for")
	}
	if err := ca.EnsureCert("gtr", []string{"127.0.0.1", id}, Server|Client); err != nil {
		t.Fatal(err)
	}
	third := serialOf()
	if third == second {
		t.Fatal("kept a server-only certificate asked for client use too")
	}
	if err := ca.EnsureCert("gtr", []string{"127.0.0.1", id}, Server|Client); err != nil {
		t.Fatal(err)
	}
	if serialOf() != third {
		t.Fatal("reissued a certificate that covers what is asked")
	}
}
