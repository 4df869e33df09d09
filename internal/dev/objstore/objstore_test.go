package objstore

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestStoreRefusesOtherCredentials: over TLS with the store's CA, a
// request without the store's access key ID is refused 403 and noted; one
// that names it reaches the store (the bucket it was started with is
// listed). Keys lists what a bucket holds.
func TestStoreRefusesOtherCredentials(t *testing.T) {
	s, err := Start(t.TempDir(), "cellpay-backups")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatal("the store's CA file holds no certificate")
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	get := func(auth string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, s.URL+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String()
	}
	if code, _ := get(""); code != http.StatusForbidden {
		t.Errorf("no credentials: %d, want 403", code)
	}
	if code, _ := get("AWS4-HMAC-SHA256 Credential=AKsomeoneelse/20261208/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00"); code != http.StatusForbidden {
		t.Errorf("another access key: %d, want 403", code)
	}
	if !s.Refused() {
		t.Error("refusals not noted")
	}
	code, body := get("AWS4-HMAC-SHA256 Credential=" + s.AccessKeyID + "/20261208/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00")
	if code != http.StatusOK || !strings.Contains(body, "cellpay-backups") {
		t.Errorf("the store's access key: %d %q, want 200 listing cellpay-backups", code, body)
	}
	if keys, err := s.Keys("cellpay-backups", "cell-a/", 10); err != nil || len(keys) != 0 {
		t.Errorf("an empty bucket's keys: %v, %v", keys, err)
	}
	for _, e := range s.Env() {
		if strings.ContainsAny(e, "'\" $`;") {
			t.Errorf("environment %q is unsafe in a shell command", e)
		}
	}
}
