package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/webhook"
)

// tsCallback is a callback as a partner's receiver took it, in the form
// the TypeScript client's e2e script reads (CELLPAY_CALLBACK_JSON).
type tsCallback struct {
	Secret  string            `json:"secret"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// TestTypeScriptClient: the partners' TypeScript client (clients/typescript)
// builds and passes its unit tests, then, against this platform over
// REST/HTTPS, submits (APPROVED), reads, resends (the same answer, also
// with an Idempotency-Key header), switches to the backup access point,
// is refused a wrong key (API_KEY_INVALID, a request ID, not retryable)
// and verifies a callback a cell really delivered (a tampered one fails);
// the resent transactions reached the issuer once each.
//
// The package is built in a copy in a temporary directory (npm ci there,
// from npm's cache when scripts/deps.sh filled it), so that the test
// neither writes into the source tree nor races a build there.
func TestTypeScriptClient(t *testing.T) {
	node, errNode := exec.LookPath("node")
	npm, errNPM := exec.LookPath("npm")
	if err := errors.Join(errNode, errNPM); err != nil {
		t.Fatalf("node and npm are needed to test clients/typescript: scripts/deps.sh test (make deps) installs Debian's nodejs and npm: %v", err)
	}
	dir := tsCopyClient(t)

	// npm ci, build and unit tests: bounded, and not counted in the
	// platform's part below.
	start := time.Now()
	npmCtx := ctxFor(t, 5*time.Minute)
	for _, args := range [][]string{
		{"ci", "--no-audit", "--no-fund", "--prefer-offline"},
		{"run", "build"},
		{"test"},
	} {
		out, err := tsRun(npmCtx, dir, nil, npm, args...)
		if err != nil {
			t.Fatalf("npm %s in a copy of clients/typescript: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "test" {
			t.Logf("npm test:\n%s", tsLastLines(out, 12))
		}
	}
	t.Logf("npm ci, build and unit tests: %v", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	ctx := ctxFor(t, 90*time.Second)
	cb := tsCaptureCallback(t, ctx)
	cbJSON, err := json.Marshal(cb)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := env.p.PartnerKeys()
	if err != nil {
		t.Fatal(err)
	}
	prefix := runID + "-ts"
	vars := []string{
		"CELLPAY_REST_URL=https://" + env.restAddr,
		"CELLPAY_REST_BACKUP_URL=https://" + env.backupRESTAddr,
		"CELLPAY_CA_FILE=" + env.p.CAFile(),
		"CELLPAY_API_KEY=" + keys["p-001"],
		"CELLPAY_PARTNER_ID=p-001",
		"CELLPAY_PAN=" + freshPAN(),
		"CELLPAY_PAN_2=" + freshPAN(),
		"CELLPAY_TXN_PREFIX=" + prefix,
		"CELLPAY_CALLBACK_JSON=" + string(cbJSON),
	}
	out, err := tsRun(ctx, dir, vars, node, filepath.Join("dist", "e2e.js"))
	t.Logf("node dist/e2e.js:\n%s", out)
	if err != nil {
		t.Fatalf("the TypeScript client's e2e checks failed: %v", err)
	}
	for _, id := range []string{prefix + "-a", prefix + "-h"} {
		if e, r := effects(t, ctx, "p-001", id); e != 1 {
			t.Errorf("issuer after %s and its resends: effects %d (requests %d); want 1", id, e, r)
		}
	}
	if e, r := effects(t, ctx, "p-001", prefix+"-refused"); e != 0 || r != 0 {
		t.Errorf("issuer after a wrong key's call: effects %d, requests %d; want none", e, r)
	}
	t.Logf("callback captured and node dist/e2e.js: %v", time.Since(start).Round(time.Millisecond))
}

// tsCopyClient copies clients/typescript's sources (not node_modules nor
// dist) into a temporary directory.
func tsCopyClient(t *testing.T) string {
	t.Helper()
	src := filepath.Join(env.root, "clients", "typescript")
	dst := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "tsconfig.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.CopyFS(filepath.Join(dst, "src"), os.DirFS(filepath.Join(src, "src"))); err != nil {
		t.Fatal(err)
	}
	return dst
}

// tsRun runs name args in dir with the test's environment and vars,
// bounded by ctx: on its end the whole process group is killed (npm runs
// tsc and node as children).
func tsRun(ctx context.Context, dir string, vars []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false",
		// The TypeScript unit tests compare their test vectors with
		// pkg/webhook's, and their reasons with pkg/api/apierr's.
		"CELLPAY_GO_WEBHOOK_TEST="+filepath.Join(env.root, "pkg", "webhook", "webhook_test.go"),
		"CELLPAY_GO_APIERR="+filepath.Join(env.root, "pkg", "api", "apierr", "apierr.go"))
	cmd.Env = append(cmd.Env, vars...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = errors.Join(err, ctx.Err())
	}
	return string(out), err
}

func tsLastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// tsCaptureCallback registers a partner of its own (as the callbacks tests
// do) whose callbacks go to a receiver here that keeps each delivery's
// headers and raw body, submits one transaction for it, and returns that
// transaction's callback as delivered, with the partner's secret. It is
// checked with pkg/webhook first, so that a failure of the TypeScript
// verification is the TypeScript's.
func tsCaptureCallback(t *testing.T, ctx context.Context) tsCallback {
	t.Helper()
	p := newCBPartner(t, "tscb")
	certFile, keyFile := env.p.CallbackCertFiles()
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	took := map[string]tsCallback{} // by webhook-id
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil || r.Method != http.MethodPost {
			http.Error(w, "bad delivery", http.StatusBadRequest)
			return
		}
		cb := tsCallback{Secret: p.secret, Body: string(body), Headers: map[string]string{}}
		for _, h := range []string{webhook.HeaderID, webhook.HeaderTimestamp, webhook.HeaderSignature, "Content-Type"} {
			if v := r.Header.Get(h); v != "" {
				cb.Headers[strings.ToLower(h)] = v
			}
		}
		mu.Lock()
		took[r.Header.Get(webhook.HeaderID)] = cb
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	p.set(t, "ordered", []string{srv.URL + "/callbacks/ts"}, "")
	txn := p.submit(t, ctx, "tscb")
	id := webhook.EventID(p.id, txn.GetTransactionId())
	var cb tsCallback
	testutil.Eventually(t, 20*time.Second, "the callback of "+id+" delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		var ok bool
		cb, ok = took[id]
		return ok
	})
	h := http.Header{}
	for k, v := range cb.Headers {
		h.Set(k, v)
	}
	if _, _, err := webhook.Verify(h, []byte(cb.Body), []string{cb.Secret}, time.Now(), 0); err != nil {
		t.Fatalf("the captured callback does not verify with pkg/webhook: %v (headers %v)", err, cb.Headers)
	}
	return cb
}
