package natsauth_test

import (
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/natsauth"
	"github.com/cellpay/cellpay/internal/natsconn"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

var update = flag.Bool("update", false, "rewrite deploy/k8s/base/nats/auth.conf from the overlays' cells")

// k8sAuthConf is the NATS authorization block of the Kubernetes manifests.
const k8sAuthConf = "../../deploy/k8s/base/nats/auth.conf"

// TestKubernetesAuthConf holds the manifests' NATS users to this package:
// one user per cell overlay (its namespace is its cell ID), the GTR, the
// replicator and the administrator, with exactly Users' permissions.
// scripts/k8s-new-cell.sh rewrites the file with -update.
func TestKubernetesAuthConf(t *testing.T) {
	entries, err := os.ReadDir("../../deploy/k8s/overlays")
	if err != nil {
		t.Fatal(err)
	}
	var cells []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join("../../deploy/k8s/overlays", e.Name(), "certificate.yaml")); e.IsDir() && e.Name() != "platform" && err == nil {
			cells = append(cells, e.Name())
		}
	}
	if len(cells) == 0 {
		t.Fatal("no cell overlays found")
	}
	sort.Strings(cells)
	want := "# Generated from internal/natsauth for the cell overlays " + fmt10(cells) + "\n" +
		"# (go test ./internal/natsauth -run TestKubernetesAuthConf -update). Do not edit.\n" +
		natsauth.Authorization(natsauth.Users(cells))
	if *update {
		if err := os.WriteFile(k8sAuthConf, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(k8sAuthConf)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s is not natsauth's users for cells %v: run go test ./internal/natsauth -run TestKubernetesAuthConf -update", k8sAuthConf, cells)
	}
}

func fmt10(cells []string) string {
	s := ""
	for i, c := range cells {
		if i > 0 {
			s += ", "
		}
		s += c
	}
	return s
}

// TestKubernetesNATSConfigBoots runs the manifests' nats.conf and auth.conf
// (with the certificate paths pointed at a test CA, and a single node) in
// the nats-server version the manifests' image pins, embedded: it parses,
// takes a cell by its certificate, and refuses an identity that is no user.
func TestKubernetesNATSConfigBoots(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Issue("tls", []string{"127.0.0.1", hop.NATS}, pki.Server|pki.Client); err != nil {
		t.Fatal(err)
	}
	for name, id := range map[string]string{"cell-a": hop.Cell("cell-a"), "ops": hop.Ops} {
		if err := ca.Issue(name, []string{id}, pki.Client); err != nil {
			t.Fatal(err)
		}
	}
	conf, err := os.ReadFile("../../deploy/k8s/base/nats/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	s := string(conf)
	for from, to := range map[string]string{
		"/etc/nats-tls/tls.crt": pki.CertFile(dir, "tls"), "/etc/nats-tls/tls.key": pki.KeyFile(dir, "tls"),
		"/etc/nats-tls/ca.crt": ca.CertFile(), "/data/jetstream": filepath.Join(dir, "js"),
		"/var/run/nats/nats.pid": filepath.Join(dir, "nats.pid"), "$POD_NAME": "nats-0",
	} {
		if !strings.Contains(s, from) {
			t.Fatalf("nats.conf no longer names %s: update this test", from)
		}
		s = strings.ReplaceAll(s, from, to)
	}
	// One node on loopback ports: no routes to dial, no fixed ports.
	s = s[:strings.Index(s, "cluster {")]
	s = strings.Replace(s, "port: 4222", "port: -1", 1)
	s = strings.Replace(s, "http_port: 8222", "http_port: -1", 1)
	s += "host: 127.0.0.1\n"
	auth, err := os.ReadFile(k8sAuthConf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "auth.conf"), auth, 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	url := natstest.StartFile(t, file).URL()
	for name, ok := range map[string]bool{"cell-a": true, "ops": false} {
		tlsOpts, err := natsconn.TLSOptions(tlsconf.Files{Cert: pki.CertFile(dir, name), Key: pki.KeyFile(dir, name), CA: ca.CertFile()})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(url, append(tlsOpts, nats.Timeout(5*time.Second))...)
		if (err == nil) != ok {
			t.Fatalf("%s: connect error %v, want success %v", name, err, ok)
		}
		if nc != nil {
			nc.Close()
		}
	}
	if nc, err := nats.Connect(strings.Replace(url, "nats://", "tls://", 1), nats.RootCAs(ca.CertFile()), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("a client without a certificate connected")
	}
}
