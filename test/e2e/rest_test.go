package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/internal/dev/issuersim"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/api/apierr"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// restAnswer is one answer of the REST API.
type restAnswer struct {
	code   int
	proto  string // HTTP/2.0, HTTP/1.1
	header http.Header
	body   []byte
}

// restStatus is a refusal's body: google.rpc.Status in JSON.
type restStatus struct {
	Code    int32  `json:"code"`
	Message string `json:"message"`
}

// refusal decodes a's body as a refusal, with its ErrorInfo's reason and
// request ID (empty where absent).
func (a restAnswer) refusal(t *testing.T) (st restStatus, reason, requestID string) {
	t.Helper()
	if err := json.Unmarshal(a.body, &st); err != nil {
		t.Fatalf("refusal body %q: %v", a.body, err)
	}
	reason, requestID = guideRefusal(a.body)
	return st, reason, requestID
}

// txn decodes a's body as a Transaction.
func (a restAnswer) txn(t *testing.T) *cellpayv1.Transaction {
	t.Helper()
	if a.code != http.StatusOK {
		t.Fatalf("REST answer %d, want 200: %s", a.code, a.body)
	}
	var txn cellpayv1.Transaction
	if err := protojson.Unmarshal(a.body, &txn); err != nil {
		t.Fatalf("REST transaction %q: %v", a.body, err)
	}
	return &txn
}

// restClient calls the REST API at addr over HTTPS, trusting the
// platform's CA.
func restClient(t *testing.T) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(env.p.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatal("no CA certificate in", env.p.CAFile())
	}
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}}
}

// restDo sends method path (with body, if not nil) to addr with key as the
// bearer token ("" for none) and extra headers.
func restDo(t *testing.T, c *http.Client, addr, method, path string, body []byte, key string, hdr ...string) restAnswer {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxFor(t, 30*time.Second), method, "https://"+addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	return restAnswer{code: resp.StatusCode, proto: resp.Proto, header: resp.Header, body: b}
}

// restJSON is req as a partner posts it: the protos' field names.
func restJSON(t *testing.T, req *cellpayv1.SubmitTransactionRequest) []byte {
	t.Helper()
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func submitPath(partner string) string { return "/v1/partners/" + partner + "/transactions" }

func getPath(partner, id string) string { return submitPath(partner) + "/" + id }

// TestRESTMatchesGRPC: the REST/JSON API over HTTPS, against the real
// binaries, gives the partners' gRPC cases the same outcomes: approve,
// decline, replay (the same answer, one issuer effect), a reused ID with
// another payload, another partner's ID, no key, a wrong key, an invalid
// field, an oversized body, the rate limit with its retry hint; each
// refusal with its gRPC code's HTTP status, the same ErrorInfo reason as
// over gRPC and a request ID that is in the GTR's log. Idempotency-Key
// means the transaction_id; both access points serve it; /openapi.json is
// the committed document.
func TestRESTMatchesGRPC(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	keys, err := env.p.PartnerKeys()
	if err != nil {
		t.Fatal(err)
	}
	c := restClient(t)
	key := keys["p-001"]
	raw := dialRaw(t)

	// Approve: the answer over JSON is the transaction gRPC reads.
	approve := request("rest-approve", freshPAN())
	a := restDo(t, c, env.restAddr, "POST", submitPath("p-001"), restJSON(t, approve), key)
	got := a.txn(t)
	if got.GetStatus() != cellpayv1.TransactionStatus_APPROVED || got.GetAuthCode() == "" || len(a.header.Values("X-Request-Id")) != 1 || a.proto != "HTTP/2.0" {
		t.Fatalf("approval over REST (%s): %v (X-Request-Id %q)", a.proto, got, a.header.Values("X-Request-Id"))
	}
	read, err := raw.GetTransaction(withKey(ctx, key), &cellpayv1.GetTransactionRequest{TransactionId: approve.TransactionId, PartnerId: "p-001"})
	if err != nil || !proto.Equal(read, got) {
		t.Fatalf("gRPC reads %v, %v; REST answered %v", read, err, got)
	}
	// Replays, over REST and over gRPC, and a read over REST at the
	// backup access point: the same transaction, one effect.
	if again := restDo(t, c, env.restAddr, "POST", submitPath("p-001"), restJSON(t, approve), key).txn(t); !proto.Equal(again, got) {
		t.Fatalf("REST replay answered %v, first %v", again, got)
	}
	if again, err := raw.SubmitTransaction(withKey(ctx, key), approve); err != nil || !proto.Equal(again, got) {
		t.Fatalf("gRPC replay of a REST transaction answered %v, %v", again, err)
	}
	if b := restDo(t, c, env.backupRESTAddr, "GET", getPath("p-001", approve.TransactionId), nil, key).txn(t); !proto.Equal(b, got) {
		t.Fatalf("REST read at the backup access point: %v", b)
	}
	if e, r := effects(t, ctx, "p-001", approve.TransactionId); e != 1 || r != 1 {
		t.Fatalf("issuer after an approval and its replays: effects %d, requests %d; want 1, 1", e, r)
	}

	// Decline.
	decline := request("rest-decline", issuersim.CardDoNotHonor)
	if d := restDo(t, c, env.restAddr, "POST", submitPath("p-001"), restJSON(t, decline), key).txn(t); d.GetStatus() != cellpayv1.TransactionStatus_DECLINED || d.GetDeclineReason() != issuersim.ReasonDoNotHonor {
		t.Fatalf("decline over REST: %v", d)
	}

	// Idempotency-Key: it is the transaction_id where the body has none;
	// one that differs is refused, naming the header.
	byHeader := request("rest-idem", freshPAN())
	idem := byHeader.TransactionId
	byHeader.TransactionId = ""
	if h := restDo(t, c, env.restAddr, "POST", submitPath("p-001"), restJSON(t, byHeader), key, "Idempotency-Key", idem).txn(t); h.GetTransactionId() != idem || h.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
		t.Fatalf("Idempotency-Key as the transaction_id: %v", h)
	}

	// Refusals: each case's gRPC outcome, then REST's.
	reused := proto.Clone(approve).(*cellpayv1.SubmitTransactionRequest)
	reused.Amount.MinorUnits++
	noMarket := request("rest-nomarket", freshPAN())
	noMarket.Market = ""
	wrong := key[:len(key)-64] + strings.Repeat("0", 64)
	for _, k := range []struct {
		name       string
		grpc       func() error
		method     string
		path       string
		body       []byte
		key        string
		hdr        []string
		want       codes.Code
		reason     apierr.Reason
		field      string // named in the message
		skipGRPCEq bool   // gRPC refuses it before any Cellpay code
	}{
		{name: "reused ID", grpc: func() error { _, err := raw.SubmitTransaction(withKey(ctx, key), reused); return err },
			method: "POST", path: submitPath("p-001"), body: restJSON(t, reused), key: key, want: codes.AlreadyExists, reason: apierr.TransactionIDReused},
		{name: "another partner's ID", grpc: func() error {
			_, err := raw.GetTransaction(withKey(ctx, keys["p-002"]), &cellpayv1.GetTransactionRequest{TransactionId: approve.TransactionId, PartnerId: "p-002"})
			return err
		}, method: "GET", path: getPath("p-002", approve.TransactionId), key: keys["p-002"], want: codes.NotFound, reason: apierr.TransactionNotFound},
		{name: "another partner's path", grpc: func() error {
			_, err := raw.GetTransaction(withKey(ctx, key), &cellpayv1.GetTransactionRequest{TransactionId: approve.TransactionId, PartnerId: "p-002"})
			return err
		}, method: "GET", path: getPath("p-002", approve.TransactionId), key: key, want: codes.PermissionDenied, reason: apierr.PartnerMismatch},
		{name: "no key", grpc: func() error { _, err := raw.SubmitTransaction(ctx, approve); return err },
			method: "POST", path: submitPath("p-001"), body: restJSON(t, approve), want: codes.Unauthenticated, reason: apierr.APIKeyMissing},
		{name: "no key, a body that is not JSON", method: "POST", path: submitPath("p-001"), body: []byte(`{"transaction_id":`),
			want: codes.Unauthenticated, reason: apierr.APIKeyMissing},
		{name: "a card number where the decoder fails", method: "POST", path: submitPath("p-001"), body: []byte(`{"card":{"pan":4111111111111111}}`), key: key,
			want: codes.InvalidArgument, reason: apierr.InvalidRequest, field: "pan"},
		{name: "wrong key", grpc: func() error { _, err := raw.SubmitTransaction(withKey(ctx, wrong), approve); return err },
			method: "POST", path: submitPath("p-001"), body: restJSON(t, approve), key: wrong, want: codes.Unauthenticated, reason: apierr.APIKeyInvalid},
		{name: "invalid field", grpc: func() error { _, err := raw.SubmitTransaction(withKey(ctx, key), noMarket); return err },
			method: "POST", path: submitPath("p-001"), body: restJSON(t, noMarket), key: key, want: codes.InvalidArgument, reason: apierr.InvalidRequest, field: "market"},
		{name: "unknown JSON field", method: "POST", path: submitPath("p-001"), body: []byte(`{"transaction_id":"x","amount_cents":5}`), key: key,
			want: codes.InvalidArgument, reason: apierr.InvalidRequest, field: "amount_cents"},
		{name: "Idempotency-Key differs", method: "POST", path: submitPath("p-001"), body: restJSON(t, approve), key: key, hdr: []string{"Idempotency-Key", "other"},
			want: codes.InvalidArgument, reason: apierr.InvalidRequest, field: "Idempotency-Key"},
		{name: "oversized body", grpc: func() error {
			big := proto.Clone(approve).(*cellpayv1.SubmitTransactionRequest)
			big.Merchant.Id = strings.Repeat("m", 100<<10)
			_, err := raw.SubmitTransaction(withKey(ctx, key), big)
			return err
		}, method: "POST", path: submitPath("p-001"), body: bytes.Repeat([]byte(" "), 100<<10), key: key, want: codes.ResourceExhausted, reason: apierr.RequestTooLarge, skipGRPCEq: true},
		{name: "no such path", method: "GET", path: "/v1/payments", key: key, want: codes.Unimplemented, reason: apierr.NotSupported},
	} {
		if k.grpc != nil {
			err := k.grpc()
			if status.Code(err) != k.want {
				t.Errorf("%s: gRPC answered %v, want %v", k.name, err, k.want)
			} else if r := apierr.ReasonOf(err); !k.skipGRPCEq && (r != k.reason || apierr.RequestIDOf(err) == "") {
				t.Errorf("%s: gRPC reason %q, request ID %q; want %s and an ID", k.name, r, apierr.RequestIDOf(err), k.reason)
			}
		}
		a := restDo(t, c, env.restAddr, k.method, k.path, k.body, k.key, k.hdr...)
		wantHTTP := runtime.HTTPStatusFromCode(k.want)
		switch k.reason {
		case apierr.RequestTooLarge:
			wantHTTP = http.StatusRequestEntityTooLarge
		case apierr.NotSupported:
			wantHTTP = http.StatusNotFound
		}
		st, reason, id := a.refusal(t)
		if a.code != wantHTTP || codes.Code(st.Code) != k.want || reason != string(k.reason) {
			t.Errorf("%s: REST answered %d %s, reason %q; want %d %v %s: %s", k.name, a.code, codes.Code(st.Code), reason, wantHTTP, k.want, k.reason, a.body)
			continue
		}
		if id == "" || a.header.Get("X-Request-Id") != id || len(a.header.Values("X-Request-Id")) != 1 {
			t.Errorf("%s: request ID %q in the body, %q in the header", k.name, id, a.header.Values("X-Request-Id"))
		}
		if k.field != "" && !strings.Contains(st.Message, k.field) {
			t.Errorf("%s: the message %q does not name %s", k.name, st.Message, k.field)
		}
		if strings.Contains(string(a.body), "cpk_") || strings.Contains(string(a.body), "4111111111111111") {
			t.Errorf("%s: the answer quotes a key or a card number: %s", k.name, a.body)
		}
		// Support finds the call from the ID: every refusal is logged
		// under it (the tap's, the keys', at a bounded rate that a test's
		// few stay under).
		testutil.Eventually(t, 5*time.Second, k.name+": its request ID in the GTR's log", func() bool {
			b, _ := os.ReadFile(filepath.Join(env.p.LogDir(), "gtr.log"))
			return bytes.Contains(b, []byte(id))
		})
	}

	// The OpenAPI document served is the one committed.
	doc := restDo(t, c, env.restAddr, "GET", "/openapi.json", nil, "")
	want, err := os.ReadFile(filepath.Join(env.root, "api", "openapi", "cellpay.v1.swagger.json"))
	if err != nil || doc.code != http.StatusOK || !bytes.Equal(doc.body, want) {
		t.Errorf("/openapi.json: %d, %d bytes, equal to the committed one: %v (%v)", doc.code, len(doc.body), bytes.Equal(doc.body, want), err)
	}
}

// TestRESTRateLimit: a partner over its rate over REST gets 429 with
// RATE_LIMITED, Retry-After and the RetryInfo detail; retried unchanged
// after the hint, the same call is answered.
func TestRESTRateLimit(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	adm := platformAdmin(t)
	id := "p-rest-" + runID
	r, err := adm.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: id, Markets: []string{"GB"},
		PaymentTypes: []string{"CARD_AUTHORIZATION"}, SettlementCurrency: "GBP",
		Limits: &adminproto.PartnerLimits{RatePerSecond: 1, Burst: 1, MaxInFlight: 5}})
	if err != nil {
		t.Fatal(err)
	}
	key := r.GetKey().GetApiKey()
	c := restClient(t)
	req := request("rest-rate", freshPAN())
	req.PartnerId = id
	body := restJSON(t, req)
	// The GTR knows the partner once a read is not refused for its key.
	testutil.Eventually(t, 10*time.Second, "the GTR knows the new partner's key", func() bool {
		return restDo(t, c, env.restAddr, "GET", getPath(id, "none"), nil, key).code == http.StatusNotFound
	})
	var limited restAnswer
	for i := 0; i < 20 && limited.code == 0; i++ { // the burst of 1 is spent within a few calls
		if a := restDo(t, c, env.restAddr, "POST", submitPath(id), body, key); a.code == http.StatusTooManyRequests {
			limited = a
		} else if a.code != http.StatusOK {
			t.Fatalf("call %d: %d %s", i, a.code, a.body)
		}
	}
	if limited.code == 0 {
		t.Fatal("20 calls in a row at a rate of 1 a second: none limited")
	}
	st, reason, _ := limited.refusal(t)
	secs, err := strconv.Atoi(limited.header.Get("Retry-After"))
	if reason != string(apierr.RateLimited) || codes.Code(st.Code) != codes.ResourceExhausted || err != nil || secs < 1 || !strings.Contains(string(limited.body), "RetryInfo") {
		t.Fatalf("rate limited: reason %q, code %v, Retry-After %q: %s", reason, codes.Code(st.Code), limited.header.Get("Retry-After"), limited.body)
	}
	time.Sleep(time.Duration(secs) * time.Second) // the hint is the point of this test
	if a := restDo(t, c, env.restAddr, "POST", submitPath(id), body, key); a.code != http.StatusOK {
		t.Fatalf("retried after Retry-After %ds: %d %s", secs, a.code, a.body)
	}
	if e, _ := effects(t, ctx, id, req.TransactionId); e != 1 {
		t.Fatalf("issuer effects for the retried call: %d, want 1", e)
	}
}
