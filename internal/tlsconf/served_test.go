package tlsconf

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/dev/testutil"
)

// TestServedFollowsTheFiles: Served lists what a server presents now, by
// its identity: the certificate in its files, then the renewed one once
// reloaded; a stopped server is no longer listed.
func TestServedFollowsTheFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	ca, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	const id = "spiffe://test/served"
	if err := ca.Issue("server", []string{"127.0.0.1", id}, pki.Server); err != nil {
		t.Fatal(err)
	}
	notAfter := func() time.Time {
		t.Helper()
		c, err := pki.ReadCertificate(pki.CertFile(dir, "server"))
		if err != nil {
			t.Fatal(err)
		}
		return c.NotAfter
	}
	listed := func() (time.Time, bool) {
		for _, s := range Served() {
			if s.Name == id {
				return s.NotAfter, true
			}
		}
		return time.Time{}, false
	}
	_, stop, err := ServerConfig(pki.CertFile(dir, "server"), pki.KeyFile(dir, "server"), 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	first := notAfter()
	if got, ok := listed(); !ok || !got.Equal(first) {
		t.Fatalf("served %v (listed %v), want %v", got, ok, first)
	}
	time.Sleep(1100 * time.Millisecond) // certificates' times are in seconds: the renewal must differ
	if err := ca.Issue("server", []string{"127.0.0.1", id}, pki.Server); err != nil {
		t.Fatal(err)
	}
	renewed := notAfter()
	if renewed.Equal(first) {
		t.Fatal("the renewed certificate expires when the first did")
	}
	testutil.Eventually(t, 5*time.Second, "the renewed certificate served", func() bool {
		got, ok := listed()
		return ok && got.Equal(renewed)
	})
	stop()
	if _, ok := listed(); ok {
		t.Fatal("a stopped server's certificate is still listed")
	}
}
