package natsconn_test

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/natsauth"
	"github.com/cellpay/cellpay/internal/natsconn"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// TestReconnectPresentsRenewedCertificate replaces a client's certificate
// and key files in place: the open connection keeps going, and its next
// reconnect presents the new certificate, which the server (TLS with
// verify_and_map, as the platform's) takes as the same user.
func TestReconnectPresentsRenewedCertificate(t *testing.T) {
	ca, ns := secureNATS(t, hop.NATS)

	files := tlsconf.Files{Cert: pki.CertFile(ca.Dir, "cell-a"), Key: pki.KeyFile(ca.Dir, "cell-a"), CA: ca.CertFile()}
	reconnected := make(chan struct{}, 1)
	nc, err := natsconn.Connect(ns.URL(), "test", files, nats.ReconnectHandler(func(*nats.Conn) {
		select {
		case reconnected <- struct{}{}:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	testutil.Eventually(t, 10*time.Second, "connected", nc.IsConnected)

	// presented is the certificate the server saw on the client's
	// connection, and the user it mapped it to.
	presented := func() (sum, user string) {
		t.Helper()
		cz, err := ns.NATS().Connz(&server.ConnzOptions{Username: true})
		if err != nil || len(cz.Conns) != 1 || len(cz.Conns[0].TLSPeerCerts) == 0 {
			t.Fatalf("connz: %v, %+v", err, cz)
		}
		return cz.Conns[0].TLSPeerCerts[0].CertSha256, cz.Conns[0].AuthorizedUser
	}
	fileSum := func() string {
		t.Helper()
		c, err := pki.ReadCertificate(files.Cert)
		if err != nil {
			t.Fatal(err)
		}
		return certSum(c)
	}
	old := fileSum()
	if sum, user := presented(); sum != old || user != hop.Cell("cell-a") {
		t.Fatalf("presented %s as %q, want %s as %q", sum, user, old, hop.Cell("cell-a"))
	}

	if err := ca.Issue("cell-a", []string{hop.Cell("cell-a")}, pki.Client); err != nil {
		t.Fatal(err)
	}
	renewed := fileSum()
	if renewed == old {
		t.Fatal("the renewed certificate is the old one")
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("the open connection after the renewal: %v", err)
	}
	if sum, _ := presented(); sum != old {
		t.Fatalf("the open connection shows %s, want the certificate it connected with", sum)
	}
	if err := nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatalf("no reconnect within 10s: %v", nc.LastError())
	}
	testutil.Eventually(t, 5*time.Second, "the reconnected connection in connz", func() bool {
		cz, err := ns.NATS().Connz(&server.ConnzOptions{Username: true})
		return err == nil && len(cz.Conns) == 1
	})
	if sum, user := presented(); sum != renewed || user != hop.Cell("cell-a") {
		t.Fatalf("on reconnect presented %s as %q, want the renewed %s as %q", sum, user, renewed, hop.Cell("cell-a"))
	}
	// Its permissions are the cell's: its inbox works (a request to the
	// JetStream API it may use).
	if _, err := nc.Request("$JS.API.INFO", nil, 2*time.Second); err != nil {
		t.Fatalf("a request as the cell after the reconnect: %v", err)
	}
	// The connection's probe looked at the server's certificate on a
	// connection of its own, and closed it; the certificate NATS serves
	// is recorded under its identity.
	testutil.Eventually(t, 5*time.Second, "a certificate probe's connection, closed", func() bool {
		cz, err := ns.NATS().Connz(&server.ConnzOptions{State: server.ConnClosed})
		if err != nil {
			return false
		}
		for _, c := range cz.Conns {
			if c.Name == "cellpay certificate probe" {
				return true
			}
		}
		return false
	})
	served, err := pki.ReadCertificate(pki.CertFile(ca.Dir, "nats"))
	if err != nil {
		t.Fatal(err)
	}
	var seen bool
	for _, p := range hop.PeerExpiries() {
		seen = seen || p.Identity == hop.NATS && p.NotAfter.Equal(served.NotAfter)
	}
	if !seen {
		t.Fatalf("NATS's certificate (expiring %v) not recorded: %v", served.NotAfter, hop.PeerExpiries())
	}
}

func certSum(c *x509.Certificate) string {
	s := sha256.Sum256(c.Raw)
	return hex.EncodeToString(s[:])
}

// TestRefusesAServerWithoutNATSIdentity: a server with a certificate of
// the same CA for its address, but not the NATS servers' identity (another
// component's certificate, say), is refused at the handshake.
func TestRefusesAServerWithoutNATSIdentity(t *testing.T) {
	ca, ns := secureNATS(t, hop.Cell("cell-b"))
	opts, err := natsconn.TLSOptions(tlsconf.Files{Cert: pki.CertFile(ca.Dir, "cell-a"), Key: pki.KeyFile(ca.Dir, "cell-a"), CA: ca.CertFile()})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.URL(), append(opts, nats.Timeout(5*time.Second))...)
	if err == nil {
		nc.Close()
		t.Fatal("connected to a server presenting a cell's identity")
	}
	if !strings.Contains(err.Error(), "presented identity "+hop.Cell("cell-b")) {
		t.Fatalf("the refusal does not name the identity presented: %v", err)
	}
}

// secureNATS runs a NATS server with the platform's TLS and permissions
// (cell-a a user), its certificate for 127.0.0.1 and the identity given,
// and issues cell-a's client certificate from the same CA.
func secureNATS(t *testing.T, serverIdentity string) (*pki.CA, *natstest.Server) {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.EnsureCA(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Issue("nats", []string{"127.0.0.1", serverIdentity}, pki.Server); err != nil {
		t.Fatal(err)
	}
	if err := ca.Issue("cell-a", []string{hop.Cell("cell-a")}, pki.Client); err != nil {
		t.Fatal(err)
	}
	port, err := testutil.FreePortRun(1)
	if err != nil {
		t.Fatal(err)
	}
	conf := natsauth.Server{Host: "127.0.0.1", Port: port, StoreDir: filepath.Join(dir, "js"),
		Cert: pki.CertFile(ca.Dir, "nats"), Key: pki.KeyFile(ca.Dir, "nats"), CA: ca.CertFile(), Cells: []string{"cell-a"}}
	confFile := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confFile, []byte(conf.Config()), 0o600); err != nil {
		t.Fatal(err)
	}
	return ca, natstest.StartFile(t, confFile)
}
