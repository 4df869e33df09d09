package partners

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestOperations(t *testing.T) {
	r, plain := sample(t)
	if err := r.Add(Partner{ID: "p-001", Status: StatusActive}); !errors.Is(err, ErrExists) {
		t.Fatalf("add existing: %v", err)
	}
	if err := r.Add(Partner{ID: "p-new", Status: StatusActive}); err != nil {
		t.Fatal(err)
	}
	if changed, err := r.SetStatus("p-new", StatusSuspended); !changed || err != nil {
		t.Fatalf("suspend: %v %v", changed, err)
	}
	if changed, err := r.SetStatus("p-new", StatusSuspended); changed || err != nil {
		t.Fatalf("suspend again: %v %v, want no change", changed, err)
	}
	if _, err := r.SetStatus("nope", StatusActive); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown partner: %v", err)
	}
	if _, err := r.SetStatus("p-new", "gone"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad status: %v", err)
	}

	first := r.Partners[0].Keys[0].ID
	if err := r.RevokeKey("p-001", first, false); !errors.Is(err, ErrLastKey) {
		t.Fatalf("revoke the last key: %v", err)
	}
	_, k2, _ := NewKey(nil, time.Now())
	if err := r.AddKey("p-001", k2); err != nil {
		t.Fatal(err)
	}
	if err := r.RevokeKey("p-001", k2.ID+"x", false); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("unknown key: %v", err)
	}
	if err := r.RevokeKey("p-001", plain["p-001"], false); !errors.Is(err, ErrKeyNotFound) || strings.Contains(err.Error(), plain["p-001"]) {
		t.Fatalf("a key where its ID belongs: %v (must not quote it)", err)
	}
	if !IsKeyID(first) || IsKeyID(plain["p-001"]) || !IsPartnerID("p-001") || IsPartnerID(plain["p-001"]) {
		t.Fatal("IsKeyID or IsPartnerID")
	}
	if err := r.RevokeKey("p-002", first, false); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("another partner's key: %v", err)
	}
	if err := r.RevokeKey("p-001", first, false); err != nil {
		t.Fatal(err)
	}
	if p, _ := r.Find("p-001"); len(p.Keys) != 1 || p.Keys[0].ID != k2.ID {
		t.Fatalf("keys after revoke: %+v", p.Keys)
	}
	if err := r.RevokeKey("p-001", k2.ID, true); err != nil {
		t.Fatalf("forced revoke of the last key: %v", err)
	}
	for range MaxKeysPerPartner {
		_, k, _ := NewKey(nil, time.Now())
		if err := r.AddKey("p-002", k); err != nil && !errors.Is(err, ErrTooManyKeys) {
			t.Fatal(err)
		}
	}
	_, k, _ := NewKey(nil, time.Now())
	if err := r.AddKey("p-002", k); !errors.Is(err, ErrTooManyKeys) {
		t.Fatalf("a key past the cap: %v", err)
	}
	if err := r.Validate(); err != nil {
		t.Fatalf("the registry after the operations: %v", err)
	}
}

func TestPartnerValidateFieldError(t *testing.T) {
	p := Partner{ID: "p", Status: StatusActive, Markets: []string{"GB", "gb"}}
	var fe *FieldError
	if err := p.Validate(); !errors.As(err, &fe) || fe.Field != "markets[1]" {
		t.Fatalf("got %v, want a FieldError on markets[1]", err)
	}
	err := (&Registry{Partners: []Partner{p}}).Validate()
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &fe) || fe.Field != "markets[1]" {
		t.Fatalf("registry: %v", err)
	}
}

func TestParseJSON(t *testing.T) {
	r, plain := sample(t)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := Compile(got)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := ix.Authenticate(plain["p-001"]); err != nil || p.ID != "p-001" {
		t.Fatalf("after a round trip: %v %v", p, err)
	}
	for name, in := range map[string]string{
		"empty":         "",
		"null":          "null",
		"array":         "[]",
		"unknown field": `{"version":1,"partners":[],"colour":"red"}`,
		"trailing":      `{"version":1,"partners":[]} {}`,
		"invalid":       `{"version":1,"partners":[{"id":"a b","status":"active"}]}`,
		"wrong type":    `{"version":"one","partners":[]}`,
	} {
		if _, err := ParseJSON([]byte(in)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	secret := plain["p-002"]
	if _, err := ParseJSON([]byte(`{"version":1,"partners":[{"id":"` + secret + `","status":"active"}]}`)); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("an error quotes what was in an id: %v", err)
	}
}
