package webhook

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The Standard Webhooks specification's published example.
const (
	specSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specBody   = `{"test": 2432232314}`
	specSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

var specTS = time.Unix(1614265330, 0)

func TestSpecVector(t *testing.T) {
	got, err := Sign(specID, specTS, []byte(specBody), []string{specSecret})
	if err != nil || got != specSig {
		t.Fatalf("Sign = %q, %v; want the spec's %q", got, err, specSig)
	}
	h := http.Header{}
	h.Set(HeaderID, specID)
	h.Set(HeaderTimestamp, "1614265330")
	h.Set(HeaderSignature, specSig)
	id, ts, err := Verify(h, []byte(specBody), []string{specSecret}, specTS.Add(time.Minute), 0)
	if err != nil || id != specID || !ts.Equal(specTS) {
		t.Fatalf("Verify = %q, %v, %v", id, ts, err)
	}
}

func TestVerify(t *testing.T) {
	newS, err := NewSecret(nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"type":"transaction.final"}`)
	signed := func(ts time.Time, secrets ...string) http.Header {
		h := http.Header{}
		if err := Headers(h, "evt_1", ts, body, secrets); err != nil {
			t.Fatal(err)
		}
		return h
	}
	tests := []struct {
		name    string
		h       http.Header
		body    []byte
		secrets []string
		want    error
	}{
		{"good", signed(now, newS), body, []string{newS}, nil},
		{"rotation: signed with both, receiver has the old", signed(now, newS, specSecret), body, []string{specSecret}, nil},
		{"rotation: signed with the new, receiver has both", signed(now, newS), body, []string{specSecret, newS}, nil},
		{"other secret", signed(now, newS), body, []string{specSecret}, ErrSignature},
		{"body changed", signed(now, newS), []byte(`{"type":"x"}`), []string{newS}, ErrSignature},
		{"too old", signed(now.Add(-6*time.Minute), newS), body, []string{newS}, ErrTimestamp},
		{"too new", signed(now.Add(6*time.Minute), newS), body, []string{newS}, ErrTimestamp},
		{"no headers", http.Header{}, body, []string{newS}, ErrHeaders},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Verify(tt.h, tt.body, tt.secrets, now, 0)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "whsec_") {
				t.Fatal("an error quotes a secret")
			}
		})
	}
	if h := signed(now, newS, specSecret); strings.Count(h.Get(HeaderSignature), "v1,") != 2 {
		t.Fatalf("two secrets, signature header %q", h.Get(HeaderSignature))
	}
}

func TestEventIDStable(t *testing.T) {
	a, b := EventID("p-001", "t-1"), EventID("p-001", "t-1")
	if a != b || a == EventID("p-002", "t-1") || !strings.HasPrefix(a, "evt_") || len(a) != 4+26 {
		t.Fatalf("event IDs %q %q", a, b)
	}
}
