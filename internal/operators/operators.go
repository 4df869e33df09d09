// Package operators holds the GTR admin API's credentials: who may call
// it, with which role, proven by which token. A token is
// "cpo_<operator>_<secret>" (64 hex digits of secret); the operators file
// keeps only each token's SHA-256, never the token, so reading the file
// does not let anyone call. The GTR verifies tokens with an Index;
// cmd/cellpay provisions a local platform's operators with NewToken and
// WriteFile.
//
// An error of this package never quotes a token.
package operators

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// Role is what an operator may do. Each role includes the ones below it.
type Role int

// The roles, weakest first.
const (
	// RoleNone is no role: nothing is allowed. It is the zero value so
	// that a forgotten role grants nothing.
	RoleNone Role = iota
	// RoleViewer reads: cells, routes, tables, partners, callbacks, the audit.
	RoleViewer
	// RoleOperator is RoleViewer plus traffic moves: drain, restore, weights,
	// callback replays.
	RoleOperator
	// RoleAdmin is everything: tables, partners and their keys, callback
	// settings.
	RoleAdmin
)

var roleNames = []string{"none", "viewer", "operator", "admin"}

func (r Role) String() string {
	if r < 0 || int(r) >= len(roleNames) {
		return fmt.Sprintf("role(%d)", int(r))
	}
	return roleNames[r]
}

// ParseRole reads "viewer", "operator" or "admin".
func ParseRole(s string) (Role, error) {
	for i, n := range roleNames {
		if i > 0 && n == s {
			return Role(i), nil
		}
	}
	return RoleNone, fmt.Errorf("operators: role %q: want viewer, operator or admin", s)
}

// MarshalYAML and UnmarshalYAML write a role by its name.
func (r Role) MarshalYAML() (any, error) { return r.String(), nil }

func (r *Role) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseRole(n.Value)
	*r = v
	return err
}

// Operator is one credential of the operators file.
type Operator struct {
	ID   string `yaml:"id"`
	Role Role   `yaml:"role"`
	// TokenSHA256 is the hex SHA-256 of the whole token.
	TokenSHA256 string `yaml:"token_sha256"`
}

// File is the operators file.
type File struct {
	Operators []Operator `yaml:"operators"`
}

// Errors Authenticate returns.
var (
	// ErrUnauthenticated: no operator has this token.
	ErrUnauthenticated = errors.New("operators: unknown or invalid token")
	// ErrThrottled: too many failed logins from the caller's address; it
	// is refused without its token being looked at for a while (the
	// admin listener's and the console's throttle).
	ErrThrottled = errors.New("too many failed logins from this address")
)

const (
	tokenPrefix = "cpo_"
	secretLen   = 64 // hex digits
)

// idRe is an operator ID: no underscore, so that a token splits one way.
var idRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]{0,63}$`)

// ValidID reports whether id can name an operator.
func ValidID(id string) bool { return idRe.MatchString(id) }

// NewToken makes a token for operator id and returns it with the
// operator's entry (its hash). rnd nil is crypto/rand.
func NewToken(rnd io.Reader, id string, role Role) (string, Operator, error) {
	if !ValidID(id) {
		return "", Operator{}, fmt.Errorf("operators: operator ID %q: want 1 to 64 of [A-Za-z0-9.-]", id)
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	var secret [secretLen / 2]byte
	if _, err := io.ReadFull(rnd, secret[:]); err != nil {
		return "", Operator{}, fmt.Errorf("operators: new token: %w", err)
	}
	tok := tokenPrefix + id + "_" + hex.EncodeToString(secret[:])
	return tok, Operator{ID: id, Role: role, TokenSHA256: Hash(tok)}, nil
}

// Hash is the hex SHA-256 of a token, as the operators file keeps it.
func Hash(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// TokenID is the operator ID a token names, or "" when it is not of the
// form cpo_<id>_<secret>.
func TokenID(tok string) string {
	rest, ok := strings.CutPrefix(tok, tokenPrefix)
	i := strings.LastIndexByte(rest, '_')
	if !ok || i < 0 || len(rest)-i-1 != secretLen || !ValidID(rest[:i]) {
		return ""
	}
	return rest[:i]
}

// Index verifies tokens. It is immutable and safe for concurrent use.
type Index struct {
	byID map[string]entry
	// legacy is the one token without the cpo_ form, if any.
	legacy *entry
}

type entry struct {
	op   Operator
	hash [sha256.Size]byte
}

// LegacyID is the operator a legacy single admin token acts as.
const LegacyID = "legacy-admin"

// Compile checks f and indexes it. legacyToken, if not "", is the old
// single admin token: it authenticates as operator LegacyID, role admin.
func Compile(f *File, legacyToken string) (*Index, error) {
	ix := &Index{byID: map[string]entry{}}
	if f != nil {
		for i, o := range f.Operators {
			if !ValidID(o.ID) {
				return nil, fmt.Errorf("operators: operators[%d].id %q: want 1 to 64 of [A-Za-z0-9.-]", i, o.ID)
			}
			if o.Role == RoleNone {
				return nil, fmt.Errorf("operators: operator %q: role is required", o.ID)
			}
			h, err := hex.DecodeString(o.TokenSHA256)
			if err != nil || len(h) != sha256.Size {
				return nil, fmt.Errorf("operators: operator %q: token_sha256: want 64 hex digits", o.ID)
			}
			if _, dup := ix.byID[o.ID]; dup || o.ID == LegacyID && legacyToken != "" {
				return nil, fmt.Errorf("operators: operator %q is listed twice", o.ID)
			}
			e := entry{op: o}
			copy(e.hash[:], h)
			ix.byID[o.ID] = e
		}
	}
	if legacyToken != "" {
		ix.legacy = &entry{op: Operator{ID: LegacyID, Role: RoleAdmin}, hash: sha256.Sum256([]byte(legacyToken))}
	}
	return ix, nil
}

// Len is how many credentials the index holds, the legacy one included.
func (ix *Index) Len() int {
	n := len(ix.byID)
	if ix.legacy != nil {
		n++
	}
	return n
}

// Authenticate returns the operator whose token tok is, or
// ErrUnauthenticated. The hash is compared in constant time; a token
// naming no operator is compared against a zero hash all the same, so
// that timing says nothing about which IDs exist.
func (ix *Index) Authenticate(tok string) (Operator, error) {
	got := sha256.Sum256([]byte(tok))
	e, ok := ix.byID[TokenID(tok)]
	if !ok && ix.legacy != nil {
		e, ok = *ix.legacy, true
	}
	if subtle.ConstantTimeCompare(got[:], e.hash[:]) != 1 || !ok || tok == "" {
		return Operator{}, ErrUnauthenticated
	}
	return e.op, nil
}

// Load reads an operators file. An empty one (no YAML document: nothing,
// or comments only) is an error, not a file with no operators: a GTR that
// reads the file while an editor or a non-atomic write has just truncated
// it must keep the operators in force, not lock every one out. A file that
// means no operators says so: operators: [].
func Load(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("operators: %w", err)
	}
	return Parse(b, path)
}

// Parse decodes an operators file's bytes (Load's rules); name is the
// file's, for the errors.
func Parse(b []byte, name string) (*File, error) {
	var f File
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	switch err := dec.Decode(&f); {
	case errors.Is(err, io.EOF):
		return nil, fmt.Errorf("operators: %s is empty (a file with no operators says operators: [])", name)
	case err != nil:
		return nil, fmt.Errorf("operators: %s: %w", name, err)
	}
	return &f, nil
}

// WriteFile writes f to path (mode 0600), atomically.
func WriteFile(path string, f *File) error {
	b, err := yaml.Marshal(f)
	if err != nil {
		return fmt.Errorf("operators: %w", err)
	}
	b = append([]byte("# GTR admin API operators: ID, role and the SHA-256 of each token (never the\n# token itself). Tokens are cpo_<id>_<64 hex digits>.\n"), b...)
	return writeAtomic(path, b)
}

// WriteTokenFile writes a token to path, mode 0600, atomically.
func WriteTokenFile(path, tok string) error {
	if TokenID(tok) == "" {
		return errors.New("operators: write token file: not an operator token")
	}
	return writeAtomic(path, []byte(tok+"\n"))
}

// ReadTokenFile reads a token file (any token, trimmed).
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("operators: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("operators: %s is empty", path)
	}
	return tok, nil
}

func writeAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".op-*")
	if err != nil {
		return fmt.Errorf("operators: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("operators: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("operators: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("operators: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("operators: %w", err)
	}
	return nil
}
