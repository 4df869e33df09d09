package client

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cellpay/cellpay/pkg/webhook"
)

// FuzzCallbackHandler: a partner's callback receiver given any body,
// signed with the partner's secret (so that the decoding behind the
// signature check is reached) or with the fuzzer's own headers. Whatever
// arrives, the handler answers without panicking, with 204 or 200 only
// for a signed event whose body decodes, and Handle sees each event ID at
// most once.
func FuzzCallbackHandler(f *testing.F) {
	secret, err := webhook.NewSecret(bytes.NewReader(make([]byte, 64)))
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	f.Add([]byte(`{"type":"transaction.final","timestamp":"2023-11-14T22:13:20Z","data":{"transaction_id":"t-1","status":"APPROVED"}}`), "evt_1", true)
	f.Add([]byte(`{"type":"transaction.final","data":{"status":12345}}`), "evt_2", true)
	f.Add([]byte(`{"data":"not an object"}`), "evt_3", true)
	f.Add([]byte(`[`), "evt_4", true)
	f.Add([]byte(`{}`), "", false)
	f.Fuzz(func(t *testing.T, body []byte, id string, sign bool) {
		handled := map[string]int{}
		h, err := CallbackHandler(CallbackConfig{
			Secrets: func() []string { return []string{secret} },
			Handle: func(_ context.Context, cb Callback) error {
				handled[cb.ID]++
				if cb.Transaction == nil {
					t.Fatal("Handle got no transaction")
				}
				return nil
			},
			Now: func() time.Time { return now },
		})
		if err != nil {
			t.Fatal(err)
		}
		first := 0
		for delivery := range 2 { // the second delivery is a duplicate
			req := httptest.NewRequest(http.MethodPost, "/callbacks", bytes.NewReader(body))
			if sign {
				if err := webhook.Headers(req.Header, id, now, body, []string{secret}); err != nil {
					t.Fatal(err)
				}
			} else {
				req.Header.Set(webhook.HeaderID, id)
				req.Header.Set(webhook.HeaderTimestamp, "1700000000")
				req.Header.Set(webhook.HeaderSignature, "v1,"+id)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			ok := w.Code/100 == 2
			switch {
			case ok && (!sign || id == ""):
				t.Fatalf("answered %d to an unsigned delivery", w.Code)
			case delivery == 0 && ok != (handled[id] == 1):
				// 2xx exactly when the body decoded and Handle took it.
				t.Fatalf("answered %d, Handle called %d times", w.Code, handled[id])
			case delivery == 0:
				first = w.Code
			case ok != (first/100 == 2):
				t.Fatalf("the duplicate answered %d, the first delivery %d", w.Code, first)
			}
		}
		for id, n := range handled {
			if n != 1 {
				t.Fatalf("event %q handled %d times", id, n)
			}
		}
	})
}
