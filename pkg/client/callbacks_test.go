package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/webhook"
)

// TestCallbackHandler: over real HTTPS on loopback, the handler takes a
// well-signed event once, drops its duplicate, and refuses a bad signature,
// an old timestamp, a replay of an old delivery and a wrong method.
func TestCallbackHandler(t *testing.T) {
	oldSecret, _ := webhook.NewSecret(nil)
	newSecret, _ := webhook.NewSecret(nil)
	now := time.Now()
	var mu sync.Mutex
	var got []Callback
	fail := false
	h, err := CallbackHandler(CallbackConfig{
		Secrets: func() []string { return []string{newSecret, oldSecret} },
		Now:     func() time.Time { return now },
		Handle: func(_ context.Context, cb Callback) error {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				return errors.New("partner's database down")
			}
			got = append(got, cb)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(h)
	defer srv.Close()
	hc := srv.Client()
	hc.Timeout = 5 * time.Second

	txn := &cellpayv1.Transaction{TransactionId: "t-1", PartnerId: "p-001", Status: cellpayv1.TransactionStatus_APPROVED, MaskedPan: "424242******4242"}
	data, _ := protojson.MarshalOptions{UseProtoNames: true}.Marshal(txn)
	body, _ := json.Marshal(webhook.Event{Type: webhook.EventTypeFinal, Timestamp: now.UTC(), Data: data})
	id := webhook.EventID("p-001", "t-1")
	send := func(method string, b []byte, ts time.Time, secrets ...string) int {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL, bytes.NewReader(b))
		if err := webhook.Headers(req.Header, id, ts, body, secrets); err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	steps := []struct {
		name    string
		method  string
		body    []byte
		ts      time.Time
		secrets []string
		fail    bool
		want    int
	}{
		{"bad signature", http.MethodPost, body, now, []string{mustSecret(t)}, false, http.StatusUnauthorized},
		{"body tampered", http.MethodPost, append(bytes.Clone(body[:len(body)-1]), []byte(`,"x":1}`)...), now, []string{newSecret}, false, http.StatusUnauthorized},
		{"old timestamp", http.MethodPost, body, now.Add(-10 * time.Minute), []string{newSecret}, false, http.StatusUnauthorized},
		{"wrong method", http.MethodGet, body, now, []string{newSecret}, false, http.StatusMethodNotAllowed},
		{"handler fails: retried later", http.MethodPost, body, now, []string{newSecret}, true, http.StatusInternalServerError},
		{"signed with the old secret during a rotation", http.MethodPost, body, now, []string{oldSecret}, false, http.StatusNoContent},
		{"duplicate dropped", http.MethodPost, body, now.Add(time.Second), []string{newSecret}, false, http.StatusOK},
	}
	for _, s := range steps {
		mu.Lock()
		fail = s.fail
		mu.Unlock()
		if code := send(s.method, s.body, s.ts, s.secrets...); code != s.want {
			t.Fatalf("%s: HTTP %d, want %d", s.name, code, s.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].ID != id || !proto.Equal(got[0].Transaction, txn) || !got[0].Recorded.Equal(now.UTC().Truncate(time.Nanosecond)) {
		t.Fatalf("handled %+v", got)
	}
}

func mustSecret(t *testing.T) string {
	s, err := webhook.NewSecret(nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
