package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellpay/cellpay/internal/operators"
)

// TestOperatorsInit: init writes a token per role and the operators file
// of their hashes, with no GTR to dial; a second run keeps them; a partial
// set is refused, never overwritten.
func TestOperatorsInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "operators")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"operators", "init", dir, "--addr", "127.0.0.1:1"}, &out, &errOut); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut.String())
	}
	f, err := operators.Load(filepath.Join(dir, "operators.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ix, err := operators.Compile(f, "")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "operators.yaml"))
	for _, r := range initRoles {
		tok, err := operators.ReadTokenFile(filepath.Join(dir, r.String()+".token"))
		if err != nil {
			t.Fatal(err)
		}
		if op, err := ix.Authenticate(tok); err != nil || op.Role != r || op.ID != r.String() {
			t.Errorf("%s token: %v, %v", r, op, err)
		}
		if strings.Contains(string(raw), tok) {
			t.Errorf("operators.yaml holds the %s token itself", r)
		}
		if fi, _ := os.Stat(filepath.Join(dir, r.String()+".token")); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s.token mode %v, want 0600", r, fi.Mode().Perm())
		}
	}

	out.Reset()
	if code := run(context.Background(), []string{"operators", "init", dir}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "kept") {
		t.Fatalf("second init: exit %d, %q, %s", code, out.String(), errOut.String())
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "operators.yaml")); !bytes.Equal(again, raw) {
		t.Error("second init changed operators.yaml")
	}

	if err := os.Remove(filepath.Join(dir, "viewer.token")); err != nil {
		t.Fatal(err)
	}
	errOut.Reset()
	if code := run(context.Background(), []string{"operators", "init", dir}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "viewer.token") {
		t.Errorf("init over a partial set: exit %d, %s; want 1 naming viewer.token", code, errOut.String())
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "operators.yaml")); !bytes.Equal(again, raw) {
		t.Error("init over a partial set changed operators.yaml")
	}
}
