package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cellpay/cellpay/api/openapi"
	"github.com/cellpay/cellpay/pkg/api/apierr"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// fakeConn stands for the in-process connection to the partners' gRPC
// server: it applies Interceptor as the real one's dial option does, keeps
// the request the server would get, and answers with err, a transaction
// echoing it, or, for a method whose answer is not a transaction (a list,
// a statement), an empty answer.
type fakeConn struct {
	got proto.Message
	err error
}

func (f *fakeConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return Interceptor(ctx, method, args, reply, nil, func(ctx context.Context, method string, req, reply any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		f.got = proto.Clone(req.(proto.Message))
		if f.err != nil {
			return f.err
		}
		txn, ok := reply.(*cellpayv1.Transaction)
		if !ok {
			return nil
		}
		switch r := req.(type) {
		case *cellpayv1.SubmitTransactionRequest:
			txn.TransactionId, txn.PartnerId, txn.Status = r.GetTransactionId(), r.GetPartnerId(), cellpayv1.TransactionStatus_APPROVED
		case *cellpayv1.GetTransactionRequest:
			txn.TransactionId, txn.PartnerId = r.GetTransactionId(), r.GetPartnerId()
		}
		return nil
	})
}

func (f *fakeConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, apierr.Error(codes.Unimplemented, apierr.NotSupported, "no streams")
}

func newHandler(t testing.TB, conn *fakeConn) http.Handler {
	t.Helper()
	h, err := Handler(context.Background(), Config{Conn: conn, MaxBody: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func serve(h http.Handler, method, path, body string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// refusal checks that w is a refusal in the API's shape (google.rpc.Status
// with an ErrorInfo of a known reason, its request ID also in the header)
// and returns its code and reason.
func refusal(t testing.TB, w *httptest.ResponseRecorder) (codes.Code, apierr.Reason) {
	t.Helper()
	var st struct {
		Code    codes.Code `json:"code"`
		Message string     `json:"message"`
		Details []struct {
			Type     string            `json:"@type"`
			Reason   string            `json:"reason"`
			Domain   string            `json:"domain"`
			Metadata map[string]string `json:"metadata"`
		} `json:"details"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatalf("%d: body %q is no google.rpc.Status: %v", w.Code, w.Body.String(), err)
	}
	for _, d := range st.Details {
		if strings.HasSuffix(d.Type, "/google.rpc.ErrorInfo") {
			if d.Domain != apierr.Domain || !slices.Contains(apierr.All(), apierr.Reason(d.Reason)) {
				t.Fatalf("ErrorInfo %+v: not a Cellpay reason", d)
			}
			if id := d.Metadata[apierr.MetadataRequestID]; id == "" || w.Header().Get("X-Request-Id") != id {
				t.Fatalf("request ID %q, header %q", id, w.Header().Get("X-Request-Id"))
			}
			return st.Code, apierr.Reason(d.Reason)
		}
	}
	t.Fatalf("%d: no ErrorInfo in %s", w.Code, w.Body.String())
	return 0, ""
}

func TestSubmitAndIdempotencyKey(t *testing.T) {
	conn := &fakeConn{}
	h := newHandler(t, conn)
	w := serve(h, "POST", "/v1/partners/p-1/transactions", `{"transaction_id":"t-1","amount":{"minor_units":"5","currency":"GBP"}}`)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"transaction_id":"t-1"`) {
		t.Fatalf("submit: %d %s", w.Code, w.Body.String())
	}
	got := conn.got.(*cellpayv1.SubmitTransactionRequest)
	if got.GetPartnerId() != "p-1" || got.GetAmount().GetMinorUnits() != 5 {
		t.Fatalf("the server got %v", got)
	}
	// The header fills an absent ID, and may repeat a present one.
	for _, body := range []string{`{}`, `{"transaction_id":"t-2"}`} {
		if w := serve(h, "POST", "/v1/partners/p-1/transactions", body, "Idempotency-Key", "t-2"); w.Code != http.StatusOK || conn.got.(*cellpayv1.SubmitTransactionRequest).GetTransactionId() != "t-2" {
			t.Fatalf("Idempotency-Key with %s: %d %s", body, w.Code, w.Body.String())
		}
	}
	conn.got = nil
	w = serve(h, "POST", "/v1/partners/p-1/transactions", `{"transaction_id":"t-3"}`, "Idempotency-Key", "t-2")
	if c, r := refusal(t, w); w.Code != http.StatusBadRequest || c != codes.InvalidArgument || r != apierr.InvalidRequest || !strings.Contains(w.Body.String(), "Idempotency-Key") || conn.got != nil {
		t.Fatalf("a differing Idempotency-Key: %d %s (reached the server: %v)", w.Code, w.Body.String(), conn.got != nil)
	}
}

func TestRefusalsOfItsOwn(t *testing.T) {
	h := newHandler(t, &fakeConn{})
	for _, c := range []struct {
		name, method, path, body string
		http                     int
		code                     codes.Code
		reason                   apierr.Reason
	}{
		{"unknown field", "POST", "/v1/partners/p-1/transactions", `{"amount_cents":1}`, 400, codes.InvalidArgument, apierr.InvalidRequest},
		{"not JSON", "POST", "/v1/partners/p-1/transactions", `{"transaction_id":`, 400, codes.InvalidArgument, apierr.InvalidRequest},
		{"too large", "POST", "/v1/partners/p-1/transactions", `{"transaction_id":"` + strings.Repeat("x", 2<<10) + `"}`, 413, codes.ResourceExhausted, apierr.RequestTooLarge},
		{"no such path", "GET", "/v2/things", "", 404, codes.Unimplemented, apierr.NotSupported},
		{"no such method", "DELETE", "/v1/partners/p-1/transactions/t-1", "", 405, codes.Unimplemented, apierr.NotSupported},
	} {
		w := serve(h, c.method, c.path, c.body)
		code, reason := refusal(t, w)
		if w.Code != c.http || code != c.code || reason != c.reason {
			t.Errorf("%s: %d %v %s, want %d %v %s: %s", c.name, w.Code, code, reason, c.http, c.code, c.reason, w.Body.String())
		}
	}
}

// TestKeyBeforeBody: with Authenticate, a /v1/ call without a key is
// refused from its headers, its body never read, whatever it holds; the
// OpenAPI document needs no key. What the gateway refuses itself is logged
// under the request ID it answers with.
func TestKeyBeforeBody(t *testing.T) {
	conn := &fakeConn{}
	var logged []string
	h, err := Handler(context.Background(), Config{Conn: conn, MaxBody: 1 << 10,
		Authenticate: func(h http.Header) error {
			if h.Get("Authorization") == "" {
				return apierr.Error(codes.Unauthenticated, apierr.APIKeyMissing, "authorization: missing API key")
			}
			return nil
		},
		LogRefusal: func(id, method, _ string, st *status.Status) {
			logged = append(logged, id+" "+method+" "+st.Code().String())
		}})
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{`{"transaction_id":`, strings.Repeat("x", 4<<10)} {
		w := serve(h, "POST", "/v1/partners/p-1/transactions", body)
		if c, r := refusal(t, w); w.Code != http.StatusUnauthorized || c != codes.Unauthenticated || r != apierr.APIKeyMissing || conn.got != nil {
			t.Fatalf("no key, a body of %d bytes: %d %s (reached the server: %v)", len(body), w.Code, w.Body.String(), conn.got != nil)
		}
		if id := w.Header().Get("X-Request-Id"); len(logged) == 0 || !strings.HasPrefix(logged[len(logged)-1], id+" POST /v1/partners/p-1/transactions Unauthenticated") {
			t.Fatalf("logged %q, want the refusal under %s", logged, id)
		}
	}
	if w := serve(h, "GET", "/openapi.json", ""); w.Code != http.StatusOK {
		t.Fatalf("/openapi.json without a key: %d", w.Code)
	}
	if w := serve(h, "POST", "/v1/partners/p-1/transactions", `{"transaction_id":"t-1"}`, "Authorization", "Bearer k"); w.Code != http.StatusOK {
		t.Fatalf("with a key: %d %s", w.Code, w.Body.String())
	}
}

// TestNoCardInErrors: the decoder quotes what it could not read; a card
// number among it is masked in the answer.
func TestNoCardInErrors(t *testing.T) {
	h := newHandler(t, &fakeConn{})
	for _, body := range []string{
		`{"card":{"pan":4111111111111111}}`,
		`{"card":{"pan" "4111111111111111"}}`,
		`{"card":{"4111 1111 1111 1111":1}}`,
		`{"card":{"expiry_month":"4111111111111111"}}`,
	} {
		w := serve(h, "POST", "/v1/partners/p-1/transactions", body)
		refusal(t, w)
		if strings.Contains(w.Body.String(), "4111111111111111") || strings.Contains(w.Body.String(), "1111 1111 1111") || w.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", body, w.Code, w.Body.String())
		}
	}
}

// TestServerRefusalsKeepTheirs: a refusal by the gRPC server keeps its
// reason and request ID; a limit's RetryInfo becomes Retry-After.
func TestServerRefusalsKeepTheirs(t *testing.T) {
	st := apierr.WithRequestID(apierr.New(codes.ResourceExhausted, apierr.RateLimited, "partner rate limit reached"), "0123456789abcdef")
	withRetry, err := st.WithDetails(retryInfo(1500))
	if err != nil {
		t.Fatal(err)
	}
	h := newHandler(t, &fakeConn{err: withRetry.Err()})
	w := serve(h, "GET", "/v1/partners/p-1/transactions/t-1", "")
	code, reason := refusal(t, w)
	if w.Code != http.StatusTooManyRequests || code != codes.ResourceExhausted || reason != apierr.RateLimited ||
		w.Header().Get("X-Request-Id") != "0123456789abcdef" || w.Header().Get("Retry-After") != "2" {
		t.Fatalf("%d %v %s, X-Request-Id %q, Retry-After %q: %s", w.Code, code, reason, w.Header().Get("X-Request-Id"), w.Header().Get("Retry-After"), w.Body.String())
	}
}

func TestOpenAPIServed(t *testing.T) {
	w := serve(newHandler(t, &fakeConn{}), "GET", "/openapi.json", "")
	if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), openapi.V1) || len(openapi.V1) == 0 {
		t.Fatalf("/openapi.json: %d, %d bytes", w.Code, w.Body.Len())
	}
}

// FuzzHandler: whatever a partner sends, the handler answers 200 with the
// request the server got naming the path's partner, or a refusal in the
// API's shape; it never panics, and nothing over MaxBody reaches the
// server.
func FuzzHandler(f *testing.F) {
	f.Add("POST", "/v1/partners/p-1/transactions", `{"transaction_id":"t-1","payment_type":"CARD_AUTHORIZATION","amount":{"minor_units":"1250","currency":"GBP"},"card":{"pan":"4242424242424242","expiry_month":12,"expiry_year":2030}}`, "")
	f.Add("POST", "/v1/partners/p-1/transactions", `{"partner_id":"p-2","transaction_id":"t-1"}`, "t-1")
	f.Add("POST", "/v1/partners/p%2F1/transactions", `{"payment_type":7,"amount":{"minor_units":1e30}}`, "k")
	f.Add("GET", "/v1/partners/p-1/transactions/t-1?partner_id=p-2", "", "")
	f.Add("POST", "/v1/partners/p-1/transactions", `[1,2,3]`, "")
	f.Add("PUT", "/openapi.json", `{}`, "")
	f.Fuzz(func(t *testing.T, method, path, body, idem string) {
		req, err := http.NewRequest(method, "https://gtr"+path, strings.NewReader(body))
		if err != nil {
			return // not a request a client could send
		}
		if idem != "" {
			req.Header.Set("Idempotency-Key", idem)
		}
		conn := &fakeConn{}
		w := httptest.NewRecorder()
		newHandler(t, conn).ServeHTTP(w, req)
		if w.Code == http.StatusOK {
			if r, ok := conn.got.(*cellpayv1.SubmitTransactionRequest); ok {
				if len(body) > 1<<10 {
					t.Fatalf("a body of %d bytes reached the server", len(body))
				}
				if want := strings.TrimPrefix(strings.TrimSuffix(req.URL.Path, "/transactions"), "/v1/partners/"); r.GetPartnerId() != want {
					t.Fatalf("path %q: the server got partner %q", req.URL.Path, r.GetPartnerId())
				}
				if idem != "" && r.GetTransactionId() != idem {
					t.Fatalf("Idempotency-Key %q: the server got transaction_id %q", idem, r.GetTransactionId())
				}
			}
			return
		}
		refusal(t, w)
	})
}

func retryInfo(ms int64) *errdetails.RetryInfo {
	return &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(ms) * time.Millisecond)}
}
