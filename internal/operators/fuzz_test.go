package operators

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse: an operators file from disk, compiled, then a bearer token
// from the network checked against it. Whatever either holds, nothing
// panics; a token is accepted only as the operator whose entry holds its
// hash (or as the legacy token), with that entry's role; and a refused
// token gets ErrUnauthenticated, which says nothing of it.
func FuzzParse(f *testing.F) {
	tok, op, err := NewToken(nil, "ops-1", RoleOperator)
	if err != nil {
		f.Fatal(err)
	}
	file := "operators:\n  - id: ops-1\n    role: operator\n    token_sha256: " + op.TokenSHA256 + "\n"
	f.Add([]byte(file), tok, "")
	f.Add([]byte(file), tok[:len(tok)-1]+"0", "")
	f.Add([]byte("operators: []\n"), "legacy-secret", "legacy-secret")
	f.Add([]byte("# nothing\n"), "", "")
	f.Add([]byte("operators:\n  - id: x\n    role: root\n    token_sha256: zz\n  - {}\n"), "cpo_x_", "")
	f.Add([]byte("operators: {a: 1}\nextra: 2\n"), "cpo__"+strings.Repeat("0", 64), "")
	f.Fuzz(func(t *testing.T, b []byte, tok, legacy string) {
		file, err := Parse(b, "operators.yaml")
		if err != nil {
			return
		}
		ix, err := Compile(file, legacy)
		if err != nil {
			return
		}
		got, err := ix.Authenticate(tok)
		if err != nil {
			if !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("refused with %v, want ErrUnauthenticated", err)
			}
			return
		}
		if legacy != "" && tok == legacy && got.ID == LegacyID && got.Role == RoleAdmin {
			return
		}
		for _, o := range file.Operators {
			if o.ID == got.ID && strings.EqualFold(o.TokenSHA256, Hash(tok)) && o.Role == got.Role {
				return
			}
		}
		t.Fatalf("token %q accepted as %+v, which no entry of the file holds", tok, got)
	})
}
