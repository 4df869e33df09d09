package operators

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTokens(t *testing.T) {
	tok, op, err := NewToken(nil, "ops-1", RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, "cpo_ops-1_") || TokenID(tok) != "ops-1" || op.TokenSHA256 != Hash(tok) || strings.Contains(op.TokenSHA256, tok) {
		t.Fatalf("token %q, entry %+v", tok, op)
	}
	viewTok, view, _ := NewToken(nil, "v", RoleViewer)
	dir := t.TempDir()
	path := filepath.Join(dir, "operators.yaml")
	if err := WriteFile(path, &File{Operators: []Operator{op, view}}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), tok) || !strings.Contains(string(b), "role: operator") {
		t.Fatalf("file:\n%s", b)
	}
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := Compile(f, "old-shared-token")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tok, id string
		role    Role
	}{
		{tok, "ops-1", RoleOperator},
		{viewTok, "v", RoleViewer},
		{"old-shared-token", LegacyID, RoleAdmin},
		{"", "", RoleNone},
		{"garbage", "", RoleNone},
		{tok[:len(tok)-1] + otherHex(tok[len(tok)-1]), "", RoleNone},
		{strings.Replace(viewTok, "cpo_v_", "cpo_ops-1_", 1), "", RoleNone},
	} {
		got, err := ix.Authenticate(tc.tok)
		if tc.id == "" {
			if !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("token %q: %+v, %v; want ErrUnauthenticated", tc.tok, got, err)
			}
			continue
		}
		if err != nil || got.ID != tc.id || got.Role != tc.role {
			t.Errorf("token %q: %+v, %v; want %s %s", tc.tok, got, err, tc.id, tc.role)
		}
	}
	noLegacy, _ := Compile(f, "")
	if _, err := noLegacy.Authenticate("old-shared-token"); err == nil {
		t.Fatal("legacy token accepted without being configured")
	}
}

func TestCompileRefuses(t *testing.T) {
	good := Operator{ID: "a", Role: RoleAdmin, TokenSHA256: Hash("x")}
	for name, f := range map[string]File{
		"bad id":    {Operators: []Operator{{ID: "a_b", Role: RoleAdmin, TokenSHA256: Hash("x")}}},
		"no role":   {Operators: []Operator{{ID: "a", TokenSHA256: Hash("x")}}},
		"bad hash":  {Operators: []Operator{{ID: "a", Role: RoleAdmin, TokenSHA256: "cpo_a_secret"}}},
		"duplicate": {Operators: []Operator{good, good}},
	} {
		if _, err := Compile(&f, ""); err == nil {
			t.Errorf("%s: compiled", name)
		}
	}
	path := filepath.Join(t.TempDir(), "ops.yaml")
	os.WriteFile(path, []byte("operators:\n  - id: a\n    role: superuser\n    token_sha256: "+Hash("x")+"\n"), 0o600)
	if _, err := Load(path); err == nil {
		t.Fatal("unknown role loaded")
	}
	// An empty file (truncated mid-write) is refused; operators: [] is no
	// operators, on purpose.
	for _, empty := range []string{"", "# only a comment\n"} {
		os.WriteFile(path, []byte(empty), 0o600)
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "is empty") {
			t.Fatalf("empty file %q: %v, want refused as empty", empty, err)
		}
	}
	os.WriteFile(path, []byte("operators: []\n"), 0o600)
	if f, err := Load(path); err != nil || len(f.Operators) != 0 {
		t.Fatalf("operators: []: %v, %v", f, err)
	}
}

// otherHex is a hex digit other than c, so that a token with its last digit
// changed is never the token itself.
func otherHex(c byte) string {
	if c == '0' {
		return "1"
	}
	return "0"
}
