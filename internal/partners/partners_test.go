package partners

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func sample(t *testing.T) (*Registry, map[string]string) {
	t.Helper()
	r := &Registry{Version: 1}
	plain := map[string]string{}
	for _, id := range []string{"p-001", "p-002", "p-003"} {
		k, key, err := NewKey(nil, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		plain[id] = k
		r.Partners = append(r.Partners, Partner{ID: id, Status: StatusActive, Keys: []Key{key}})
	}
	r.Partners[2].Status = StatusSuspended
	return r, plain
}

func TestAuthenticate(t *testing.T) {
	r, plain := sample(t)
	ix, err := Compile(r)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ix.Authenticate(plain["p-001"])
	if err != nil || p.ID != "p-001" {
		t.Fatalf("Authenticate(p-001's key) = %v, %v", p, err)
	}
	if p, err := ix.Authenticate(plain["p-003"]); !errors.Is(err, ErrSuspended) || p.ID != "p-003" {
		t.Fatalf("suspended partner's key: %v, %v; want ErrSuspended", p, err)
	}
	good := plain["p-002"]
	wrongSecret := good[:len(good)-1] + string("0123456789abcdef"[(strings.IndexByte("0123456789abcdef", good[len(good)-1])+1)%16])
	unknownID := good[:len(keyPrefix)] + "aaaaaaaaaaaaaaaa" + good[len(keyPrefix)+keyIDLen:]
	for name, k := range map[string]string{
		"empty": "", "garbage": "hello", "wrong secret": wrongSecret, "unknown key id": unknownID,
		"upper-case secret": strings.ToUpper(good), "too long": good + "0", "bearer prefix": "Bearer " + good,
	} {
		if _, err := ix.Authenticate(k); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: %v, want ErrUnauthenticated", name, err)
		}
	}
}

func TestRevokedKeyFails(t *testing.T) {
	r, plain := sample(t)
	k2, key2, _ := NewKey(nil, time.Now())
	r2 := r.Clone()
	p, _ := r2.Find("p-001")
	p.Keys = []Key{key2} // first key revoked, second added
	ix, err := Compile(r2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ix.Authenticate(plain["p-001"]); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("revoked key: %v", err)
	}
	if p, err := ix.Authenticate(k2); err != nil || p.ID != "p-001" {
		t.Errorf("new key: %v, %v", p, err)
	}
	// The clone did not change the original.
	if ix0, _ := Compile(r); ix0 != nil {
		if _, err := ix0.Authenticate(plain["p-001"]); err != nil {
			t.Errorf("original registry changed by its clone: %v", err)
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	_, key, _ := NewKey(nil, time.Now())
	for _, c := range []struct {
		name  string
		p     Partner
		field string
	}{
		{"bad id", Partner{ID: "a b", Status: StatusActive}, "id"},
		{"bad status", Partner{ID: "p", Status: "gone"}, "status"},
		{"bad market", Partner{ID: "p", Status: StatusActive, Markets: []string{"gb"}}, "markets[0]"},
		{"bad type", Partner{ID: "p", Status: StatusActive, PaymentTypes: []string{"CASH"}}, "payment_types[0]"},
		{"bad currency", Partner{ID: "p", Status: StatusActive, SettlementCurrency: "euro"}, "settlement_currency"},
		{"bad hash", Partner{ID: "p", Status: StatusActive, Keys: []Key{{ID: key.ID, Hash: "00"}}}, "keys[0].hash"},
		{"bad mode", Partner{ID: "p", Status: StatusActive, Callbacks: Callbacks{Mode: "sideways"}}, "callbacks.mode"},
		{"bad endpoint", Partner{ID: "p", Status: StatusActive, Callbacks: Callbacks{Endpoints: []string{"ftp://x"}}}, "callbacks.endpoints[0]"},
		{"negative rate", Partner{ID: "p", Status: StatusActive, Limits: Limits{RatePerSecond: -1}}, "limits"},
		{"home site in capitals", Partner{ID: "p", Status: StatusActive, HomeSite: "Site-A"}, `home_site: site "Site-A"`},
		{"home site with a dot", Partner{ID: "p", Status: StatusActive, HomeSite: "site.a"}, "home_site"},
	} {
		err := (&Registry{Partners: []Partner{c.p}}).Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v, want ErrInvalid naming %s", c.name, err, c.field)
		}
	}
	dup := &Registry{Partners: []Partner{{ID: "p", Status: StatusActive}, {ID: "p", Status: StatusActive}}}
	if err := dup.Validate(); err == nil || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("duplicate partner: %v", err)
	}
	shared := &Registry{Partners: []Partner{{ID: "p", Status: StatusActive, Keys: []Key{key}}, {ID: "q", Status: StatusActive, Keys: []Key{key}}}}
	if err := shared.Validate(); err == nil || !strings.Contains(err.Error(), "used twice") {
		t.Errorf("a key ID shared by two partners: %v", err)
	}
}

func TestParseStrict(t *testing.T) {
	if _, err := Parse([]byte("version: 1\npartners:\n  - id: p-001\n    status: active\n    colour: red\n")); err == nil || !strings.Contains(err.Error(), "colour") {
		t.Errorf("unknown field: %v", err)
	}
	if _, err := Parse(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty document: %v", err)
	}
	r, err := Parse([]byte(`{"version": 2, "partners": [{"id": "p-001", "status": "active", "markets": ["GB"]}]}`))
	if err != nil || r.Version != 2 || r.Partners[0].Markets[0] != "GB" {
		t.Fatalf("JSON: %+v, %v", r, err)
	}
}

func TestAllowsAndLimits(t *testing.T) {
	p := Partner{ID: "p", Status: StatusActive, Markets: []string{"GB"}, PaymentTypes: []string{"CARD_AUTHORIZATION"}}
	if f, ok := p.Allows("DE", "CARD_AUTHORIZATION"); ok || f != "market" {
		t.Errorf("DE: %s %v", f, ok)
	}
	if f, ok := p.Allows("GB", "BANK_TRANSFER"); ok || f != "payment_type" {
		t.Errorf("BANK_TRANSFER: %s %v", f, ok)
	}
	if _, ok := p.Allows("GB", "CARD_AUTHORIZATION"); !ok {
		t.Error("an allowed pair was refused")
	}
	if l := (&Partner{Limits: Limits{RatePerSecond: 50}}).EffectiveLimits(); l.Burst != 50 || l.MaxInFlight != 50 {
		t.Errorf("defaults: %+v", l)
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	k, _, _ := NewKey(nil, time.Now())
	path := KeyFile(dir, "p-001")
	if err := WriteKeyFile(path, k); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", st.Mode(), err)
	}
	keys, err := ReadKeyDir(dir)
	if err != nil || keys["p-001"] != k || len(keys) != 1 {
		t.Fatalf("ReadKeyDir: %v %v", len(keys), err)
	}
	bad := filepath.Join(dir, "p-002.key")
	os.WriteFile(bad, []byte("not a key but a secret-looking thing"), 0o600)
	if _, err := ReadKeyFile(bad); err == nil || strings.Contains(err.Error(), "secret-looking") {
		t.Errorf("a bad key file: %v (must not quote the content)", err)
	}
	if KeyID(k) == "" || strings.Contains(KeyID(k), k[len(k)-10:]) {
		t.Error("KeyID")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("version: 1\npartners:\n  - id: p-001\n    status: active\n"))
	f.Add([]byte(`{"version":1,"partners":[{"id":"x","status":"suspended","keys":[{"id":"aaaaaaaaaaaaaaaa","hash":"` + strings.Repeat("0", 64) + `"}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			return
		}
		if _, err := Compile(r); err != nil {
			t.Fatalf("a registry that parsed does not compile: %v", err)
		}
	})
}

func FuzzAuthenticate(f *testing.F) {
	r := &Registry{Version: 1}
	k, key, _ := NewKey(nil, time.Now())
	r.Partners = []Partner{{ID: "p", Status: StatusActive, Keys: []Key{key}}}
	ix, _ := Compile(r)
	f.Add(k)
	f.Add("cpk_")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ix.Authenticate(s)
		if err == nil && s != k {
			t.Fatalf("authenticated a key that is not the partner's: %q", s)
		}
		if err == nil && p.ID != "p" {
			t.Fatal("wrong partner")
		}
	})
}

// TestHomeSite: a partner's home site is optional, read from YAML and
// JSON, kept by Clone, and left out of the JSON of a partner without one.
func TestHomeSite(t *testing.T) {
	r, err := Parse([]byte("version: 1\npartners:\n  - id: p-001\n    status: active\n    home_site: site-a\n  - id: p-002\n    status: active\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Partners[0].HomeSite != "site-a" || r.Partners[1].HomeSite != "" {
		t.Fatalf("home sites %q, %q", r.Partners[0].HomeSite, r.Partners[1].HomeSite)
	}
	if c := r.Clone(); c.Partners[0].HomeSite != "site-a" {
		t.Fatalf("Clone lost the home site: %+v", c.Partners[0])
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(b), `"home_site"`) != 1 {
		t.Fatalf("JSON %s: want home_site once, for p-001 only", b)
	}
	back, err := ParseJSON(b)
	if err != nil || back.Partners[0].HomeSite != "site-a" {
		t.Fatalf("ParseJSON: %+v, %v", back, err)
	}
}

// TestSetHomeSite: set, the same again (no change), cleared; a bad site
// names home_site; an unknown partner is ErrNotFound.
func TestSetHomeSite(t *testing.T) {
	r, err := Parse([]byte("version: 1\npartners:\n  - id: p-001\n    status: active\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		site    string
		changed bool
	}{{"site-b", true}, {"site-b", false}, {"", true}} {
		changed, err := r.SetHomeSite("p-001", step.site)
		if err != nil || changed != step.changed || r.Partners[0].HomeSite != step.site {
			t.Fatalf("SetHomeSite(%q): changed %v, %v; home site %q", step.site, changed, err, r.Partners[0].HomeSite)
		}
	}
	var fe *FieldError
	if _, err := r.SetHomeSite("p-001", "Site A"); !errors.As(err, &fe) || fe.Field != "home_site" {
		t.Fatalf("a bad site: %v", err)
	}
	if _, err := r.SetHomeSite("p-404", "site-a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an unknown partner: %v", err)
	}
}
