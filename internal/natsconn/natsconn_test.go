package natsconn_test

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	// The connection's probe handshook with the server on a connection of
	// its own: the certificate NATS serves is recorded under its identity
	// and under the server's address.
	served, err := pki.ReadCertificate(pki.CertFile(ca.Dir, "nats"))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "NATS's certificate recorded", func() bool {
		var byID, byServer bool
		for _, p := range hop.PeerExpiries() {
			byID = byID || p.Identity == hop.NATS && p.NotAfter.Equal(served.NotAfter)
		}
		for _, s := range natsconn.ServedExpiries() {
			byServer = byServer || s.Server == fmt.Sprintf("127.0.0.1:%d", ns.Port()) && s.NotAfter.Equal(served.NotAfter)
		}
		return byID && byServer
	})
}

// TestProbesEveryServer: a connection given a cluster's three servers
// probes each of them, not only the one it uses, and records what each
// presents by its address, each server's certificate its own (issued a
// second apart, so their expiries differ). The probe is a TLS handshake
// alone: no server sees a client session (CONNECT) from it.
func TestProbesEveryServer(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.EnsureCA(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Issue("cell-a", []string{hop.Cell("cell-a")}, pki.Client); err != nil {
		t.Fatal(err)
	}
	var urls []string
	want := map[string]time.Time{}
	var servers []*natstest.Server
	for i := range 3 {
		if i > 0 {
			time.Sleep(1100 * time.Millisecond) // x509 times are in seconds
		}
		name := fmt.Sprintf("nats-%d", i)
		if err := ca.Issue(name, []string{"127.0.0.1", hop.NATS}, pki.Server); err != nil {
			t.Fatal(err)
		}
		c, err := pki.ReadCertificate(pki.CertFile(ca.Dir, name))
		if err != nil {
			t.Fatal(err)
		}
		ns := startSecure(t, ca, filepath.Join(dir, name), name)
		servers = append(servers, ns)
		urls = append(urls, fmt.Sprintf("tls://127.0.0.1:%d", ns.Port()))
		want[fmt.Sprintf("127.0.0.1:%d", ns.Port())] = c.NotAfter
	}
	if got := natsconn.Servers(strings.Join(urls, ",")); len(got) != 3 {
		t.Fatalf("Servers(%v) = %v", urls, got)
	}

	files := tlsconf.Files{Cert: pki.CertFile(ca.Dir, "cell-a"), Key: pki.KeyFile(ca.Dir, "cell-a"), CA: ca.CertFile()}
	nc, err := natsconn.Connect(strings.Join(urls, ","), "test", files)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	testutil.Eventually(t, 10*time.Second, "every server's certificate recorded", func() bool {
		got := map[string]time.Time{}
		for _, s := range natsconn.ServedExpiries() {
			got[s.Server] = s.NotAfter
		}
		for server, notAfter := range want {
			if !got[server].Equal(notAfter) {
				return false
			}
		}
		return true
	})
	// The servers saw each probe as a connection closed before any CONNECT:
	// no name, no user; the one session is the connection's own.
	sessions := 0
	for _, ns := range servers {
		cz, err := ns.NATS().Connz(&server.ConnzOptions{State: server.ConnAll, Username: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cz.Conns {
			if c.AuthorizedUser != "" {
				sessions++
				if c.Name != "test" {
					t.Errorf("a session named %q as %s", c.Name, c.AuthorizedUser)
				}
			}
		}
	}
	if sessions != 1 {
		t.Errorf("%d client sessions on the three servers, want the connection's one (a probe is a handshake only)", sessions)
	}
}

// TestProbeServerRefusals: a probe of an address where no server listens
// or of a server presenting another identity fails within its timeout and
// records nothing for it.
func TestProbeServerRefusals(t *testing.T) {
	ca, ns := secureNATS(t, hop.Cell("cell-b"))
	files := tlsconf.Files{Cert: pki.CertFile(ca.Dir, "cell-a"), Key: pki.KeyFile(ca.Dir, "cell-a"), CA: ca.CertFile()}
	addr := fmt.Sprintf("127.0.0.1:%d", ns.Port())
	start := time.Now()
	if err := natsconn.ProbeServer(addr, files, 2*time.Second); err == nil || !strings.Contains(err.Error(), "presented identity "+hop.Cell("cell-b")) {
		t.Errorf("a server presenting a cell's identity: %v", err)
	}
	port, err := testutil.FreePortRun(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := natsconn.ProbeServer(fmt.Sprintf("127.0.0.1:%d", port), files, 2*time.Second); err == nil {
		t.Error("a probe of a closed port succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the probes took %v", d)
	}
	for _, s := range natsconn.ServedExpiries() {
		if s.Server == fmt.Sprintf("127.0.0.1:%d", port) {
			t.Errorf("recorded %v for a closed port", s)
		}
	}
}

func TestServers(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"tls://a:4222,tls://b:4222,tls://c:4222", []string{"a:4222", "b:4222", "c:4222"}},
		{"nats://127.0.0.1:7222, 127.0.0.1:7223,tls://127.0.0.1:7222", []string{"127.0.0.1:7222", "127.0.0.1:7223"}},
		{"tls://nats", []string{"nats:4222"}},
		{"tls://[::1]:4222", []string{"[::1]:4222"}},
		{"", nil},
		{strings.Repeat("tls://x:1,", 3) + "a:1,b:1,c:1,d:1,e:1,f:1,g:1,h:1,i:1", []string{"x:1", "a:1", "b:1", "c:1", "d:1", "e:1", "f:1", "g:1"}},
	} {
		if got := natsconn.Servers(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("Servers(%q) = %q, want %q", tc.in, got, tc.want)
		}
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
	return ca, startSecure(t, ca, dir, "nats")
}

// startSecure runs a NATS server as secureNATS does, in dir, serving
// ca's certificate name.
func startSecure(t *testing.T, ca *pki.CA, dir, name string) *natstest.Server {
	t.Helper()
	port, err := testutil.FreePortRun(1)
	if err != nil {
		t.Fatal(err)
	}
	conf := natsauth.Server{Host: "127.0.0.1", Port: port, StoreDir: filepath.Join(dir, "js"),
		Cert: pki.CertFile(ca.Dir, name), Key: pki.KeyFile(ca.Dir, name), CA: ca.CertFile(), Cells: []string{"cell-a"}}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	confFile := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confFile, []byte(conf.Config()), 0o600); err != nil {
		t.Fatal(err)
	}
	return natstest.StartFile(t, confFile)
}
