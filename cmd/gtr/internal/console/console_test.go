package console

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/cmd/gtr/internal/admin"
	"github.com/cellpay/cellpay/cmd/gtr/internal/refusals"
	"github.com/cellpay/cellpay/internal/operators"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/cellproto"
)

// fakeAdmin is the Admin API as the console sees it: it authenticates the
// token each call carries and authorizes it by admin's policy, as the
// real interceptors do, and records the changes it let through.
type fakeAdmin struct {
	adminproto.AdminClient // methods the console does not call panic
	ix                     *operators.Index

	mu      sync.Mutex
	changes []string // "otto Drain cell-b 30"
	weight  map[string]int32
	finds   int // FindTransaction calls let through
}

func (f *fakeAdmin) authorize(ctx context.Context, method string, opts []grpc.CallOption) (operators.Operator, error) {
	for _, o := range opts {
		if pc, ok := o.(grpc.PerRPCCredsCallOption); ok {
			md, err := pc.Creds.GetRequestMetadata(ctx)
			if err != nil {
				return operators.Operator{}, err
			}
			tok, _ := strings.CutPrefix(md[admin.TokenHeader], "Bearer ")
			op, err := f.ix.Authenticate(tok)
			if err != nil {
				return op, status.Error(codes.Unauthenticated, "invalid operator token")
			}
			if !admin.Allowed(op.Role, method) {
				return op, status.Errorf(codes.PermissionDenied, "%s needs a higher role than %s", method, op.Role)
			}
			return op, nil
		}
	}
	return operators.Operator{}, status.Error(codes.Unauthenticated, "missing operator token")
}

func (f *fakeAdmin) ListCells(ctx context.Context, _ *adminproto.ListCellsRequest, opts ...grpc.CallOption) (*adminproto.ListCellsResponse, error) {
	if _, err := f.authorize(ctx, "ListCells", opts); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &adminproto.ListCellsResponse{TableVersion: 3}
	for _, id := range []string{"cell-a", "cell-b"} {
		w := f.weight[id]
		resp.Cells = append(resp.Cells, &adminproto.CellStatus{Id: id, Pool: "main", Health: adminproto.Health_HEALTH_UP, HealthShare: 100,
			Weight: w, TargetWeight: w, TableWeight: 100, TrafficShare: 0.5})
	}
	return resp, nil
}

func (f *fakeAdmin) record(op operators.Operator, what string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.changes = append(f.changes, op.ID+" "+what)
}

func (f *fakeAdmin) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.changes)
}

func (f *fakeAdmin) Drain(ctx context.Context, req *adminproto.DrainRequest, opts ...grpc.CallOption) (*adminproto.CellStatus, error) {
	op, err := f.authorize(ctx, "Drain", opts)
	if err != nil {
		return nil, err
	}
	f.record(op, "Drain "+req.GetCellId())
	return &adminproto.CellStatus{Id: req.GetCellId(), Weight: 100 - req.GetPercent()}, nil
}

func (f *fakeAdmin) ListAudit(ctx context.Context, _ *adminproto.ListAuditRequest, opts ...grpc.CallOption) (*adminproto.ListAuditResponse, error) {
	if _, err := f.authorize(ctx, "ListAudit", opts); err != nil {
		return nil, err
	}
	return &adminproto.ListAuditResponse{}, nil
}

// FindTransaction answers for p-001's order-1842: attempted first on
// cell-a, which stepped back, decided on cell-b with a callback still
// being retried; cell-c does not answer. Any other transaction is in no
// cell.
func (f *fakeAdmin) FindTransaction(ctx context.Context, req *adminproto.FindTransactionRequest, opts ...grpc.CallOption) (*adminproto.FindTransactionResponse, error) {
	if _, err := f.authorize(ctx, "FindTransaction", opts); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.finds++
	f.mu.Unlock()
	resp := &adminproto.FindTransactionResponse{PartnerId: req.GetPartnerId(), TransactionId: req.GetTransactionId()}
	if req.GetPartnerId() != "p-001" || req.GetTransactionId() != "order-1842" {
		for _, id := range []string{"cell-a", "cell-b"} {
			resp.Cells = append(resp.Cells, &adminproto.CellTransaction{CellId: id, Record: &cellproto.InspectResponse{}})
		}
		return resp, nil
	}
	at := timestamppb.New(time.Date(2026, 5, 4, 9, 58, 0, 0, time.UTC))
	resp.Cells = []*adminproto.CellTransaction{
		// The table's order: cell-b, decided on attempt 2, comes before
		// cell-a, abandoned on attempt 1.
		{CellId: "cell-b", Record: &cellproto.InspectResponse{Found: true, State: "approved", Attempt: 2, CellId: "cell-b", RouteRule: "all",
			AuthCode: "A1B2C3", MaskedPan: "411111******1111", AmountMinorUnits: 1250, Currency: "EUR", PaymentType: "authorization",
			CreatedAt: at, UpdatedAt: at, Callbacks: []*cellproto.CallbackEvent{{EventId: "evt-1", Status: "pending", Attempts: 3,
				LastError: "HTTP 503", LastEndpoint: "https://partner.example/hook?key=s3cret"}}}},
		{CellId: "cell-a", Record: &cellproto.InspectResponse{Found: true, State: "abandoned", Attempt: 1, CellId: "cell-a", RouteRule: "all",
			MaskedPan: "411111******1111", AmountMinorUnits: 1250, Currency: "EUR", PaymentType: "authorization", CreatedAt: at, UpdatedAt: at}},
		{CellId: "cell-c", Error: "connection refused"},
		{CellId: "cell-d", Record: &cellproto.InspectResponse{}},
	}
	return resp, nil
}

type fixture struct {
	srv        *httptest.Server
	admin      *fakeAdmin
	mu         sync.Mutex
	now        time.Time
	operatorTk string
	viewerTk   string
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	var ops []operators.Operator
	tok := func(id string, role operators.Role) string {
		tk, op, err := operators.NewToken(nil, id, role)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, op)
		return tk
	}
	f := &fixture{operatorTk: tok("otto", operators.RoleOperator), viewerTk: tok("vera", operators.RoleViewer)}
	ix, err := operators.Compile(&operators.File{Operators: ops}, "")
	if err != nil {
		t.Fatal(err)
	}
	f.admin = &fakeAdmin{ix: ix, weight: map[string]int32{"cell-a": 100, "cell-b": 100}}
	f.now = time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
	cfg.Admin, cfg.Authenticate = f.admin, admin.NewAuth(ix).Login
	cfg.Now = func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
	cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewTLSServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// browser is an HTTP client with its own cookie jar, as one browser.
func (f *fixture) browser(t *testing.T) *http.Client {
	t.Helper()
	c := *f.srv.Client() // its TLS transport, with a jar of its own
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Jar = jar
	return &c
}

// req is one request; hdr adds or (with "") removes headers from the
// console's own: the CSRF header, a JSON body's type and the origin.
func (f *fixture) req(t *testing.T, c *http.Client, method, path, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r, err := http.NewRequest(method, f.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set(CSRFHeader, "1")
	r.Header.Set("Origin", f.srv.URL)
	if method == http.MethodPost {
		r.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		if v == "" {
			r.Header.Del(k)
		} else {
			r.Header.Set(k, v)
		}
	}
	resp, err := c.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (f *fixture) login(t *testing.T, c *http.Client, tok string) *http.Response {
	t.Helper()
	resp, body := f.req(t, c, "POST", "/api/login", `{"token":"`+tok+`"}`, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("login: %d %s", resp.StatusCode, body)
	}
	return resp
}

func TestLogin(t *testing.T) {
	f := newFixture(t, Config{})
	c := f.browser(t)
	if resp, _ := f.req(t, c, "GET", "/api/cells", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("cells before login: %d, want 401", resp.StatusCode)
	}
	resp, body := f.req(t, c, "POST", "/api/login", `{"token":"cpo_otto_`+strings.Repeat("0", 64)+`"}`, nil)
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Fatalf("bad token: %d %s, cookies %v", resp.StatusCode, body, resp.Cookies())
	}
	resp = f.login(t, c, f.operatorTk)
	ck := resp.Cookies()
	if len(ck) != 1 || ck[0].Name != CookieName || !ck[0].Secure || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode || ck[0].Path != "/" {
		t.Fatalf("session cookie %+v", ck)
	}
	if strings.Contains(ck[0].Value, f.operatorTk) {
		t.Fatal("the cookie carries the token")
	}
	resp, body = f.req(t, c, "GET", "/api/session", "", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"operator":"otto"`) || !strings.Contains(body, `"Drain":true`) || strings.Contains(body, f.operatorTk) {
		t.Fatalf("session: %d %s", resp.StatusCode, body)
	}
	if resp, body := f.req(t, c, "GET", "/api/cells", "", nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"id":"cell-b"`) {
		t.Fatalf("cells: %d %s", resp.StatusCode, body)
	}
	if resp, _ := f.req(t, c, "POST", "/api/logout", "", nil); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	if resp, _ := f.req(t, c, "GET", "/api/cells", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("cells after logout: %d, want 401", resp.StatusCode)
	}
}

// TestLoginThrottled: wrong tokens from one address are refused with 401
// up to the limit, then with 429 and Retry-After, the right token
// included, without the token being looked at.
func TestLoginThrottled(t *testing.T) {
	f := newFixture(t, Config{})
	c := f.browser(t)
	bad := `{"token":"cpo_otto_` + strings.Repeat("0", 64) + `"}`
	for i := range 10 {
		if resp, body := f.req(t, c, "POST", "/api/login", bad, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d %s, want 401", i+1, resp.StatusCode, body)
		}
	}
	resp, body := f.req(t, c, "POST", "/api/login", `{"token":"`+f.operatorTk+`"}`, nil)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || len(resp.Cookies()) != 0 {
		t.Fatalf("after 10 failures, the right token: %d %s, Retry-After %q, cookies %v", resp.StatusCode, body, resp.Header.Get("Retry-After"), resp.Cookies())
	}
}

// TestCSRF: a request without the console's header, from another origin
// or site, or posting a form instead of JSON, is refused before anything
// runs, even with the session cookie.
func TestCSRF(t *testing.T) {
	f := newFixture(t, Config{})
	c := f.browser(t)
	f.login(t, c, f.operatorTk)
	drain := `{"cell":"cell-b","action":"drain","percent":30}`
	for _, tc := range []struct {
		name string
		hdr  map[string]string
	}{
		{"no header", map[string]string{CSRFHeader: ""}},
		{"other origin", map[string]string{"Origin": "https://evil.example"}},
		{"cross-site fetch", map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"form post", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}},
		{"text post", map[string]string{"Content-Type": "text/plain"}},
	} {
		if resp, body := f.req(t, c, "POST", "/api/change", drain, tc.hdr); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d %s, want 403", tc.name, resp.StatusCode, body)
		}
	}
	if resp, _ := f.req(t, c, "POST", "/api/login", `{"token":"`+f.operatorTk+`"}`, map[string]string{CSRFHeader: ""}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("login without the header: %d, want 403", resp.StatusCode)
	}
	if n := f.admin.count(); n != 0 {
		t.Fatalf("%d changes made", n)
	}
	if resp, body := f.req(t, c, "POST", "/api/change", drain, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("the console's own request: %d %s", resp.StatusCode, body)
	}
}

// TestRoles: the API's policy decides; a viewer's drain is 403 and
// reaches no change, an operator's goes through as that operator.
func TestRoles(t *testing.T) {
	f := newFixture(t, Config{})
	viewer, op := f.browser(t), f.browser(t)
	f.login(t, viewer, f.viewerTk)
	f.login(t, op, f.operatorTk)
	drain := `{"cell":"cell-b","action":"drain","percent":30}`
	if _, body := f.req(t, viewer, "GET", "/api/session", "", nil); !strings.Contains(body, `"Drain":false`) {
		t.Fatalf("viewer's session: %s", body)
	}
	if resp, body := f.req(t, viewer, "POST", "/api/change", drain, nil); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "PermissionDenied") {
		t.Fatalf("viewer's drain: %d %s, want 403", resp.StatusCode, body)
	}
	if resp, body := f.req(t, viewer, "GET", "/api/cells", "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("viewer's cells: %d %s", resp.StatusCode, body)
	}
	if resp, body := f.req(t, op, "POST", "/api/change", drain, nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"weight":70`) {
		t.Fatalf("operator's drain: %d %s", resp.StatusCode, body)
	}
	f.admin.mu.Lock()
	got := strings.Join(f.admin.changes, ";")
	f.admin.mu.Unlock()
	if got != "otto Drain cell-b" {
		t.Fatalf("changes %q, want otto's drain alone", got)
	}
}

// TestBadRequests: bodies are bounded and strict.
func TestBadRequests(t *testing.T) {
	f := newFixture(t, Config{})
	c := f.browser(t)
	f.login(t, c, f.operatorTk)
	for _, tc := range []struct{ name, body string }{
		{"too big", `{"cell":"` + strings.Repeat("x", maxBody) + `"}`},
		{"unknown field", `{"cell":"cell-b","action":"drain","percent":30,"as":"admin"}`},
		{"trailing data", `{"cell":"cell-b","action":"drain","percent":30}{}`},
		{"bad ramp", `{"cell":"cell-b","action":"drain","percent":30,"over":"soon"}`},
		{"bad action", `{"cell":"cell-b","action":"delete"}`},
	} {
		if resp, body := f.req(t, c, "POST", "/api/change", tc.body, nil); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", tc.name, resp.StatusCode, body)
		}
	}
}

// TestSessionsBounded: sessions are at most MaxSessions (the least
// recently used goes), and end after SessionTTL or IdleTimeout.
func TestSessionsBounded(t *testing.T) {
	f := newFixture(t, Config{MaxSessions: 2, SessionTTL: time.Hour, IdleTimeout: 10 * time.Minute})
	b := []*http.Client{f.browser(t), f.browser(t), f.browser(t)}
	for _, c := range b {
		f.login(t, c, f.operatorTk)
		f.advance(time.Second)
	}
	want := []int{401, 200, 200}
	for i, c := range b {
		if resp, _ := f.req(t, c, "GET", "/api/session", "", nil); resp.StatusCode != want[i] {
			t.Errorf("session %d: %d, want %d", i, resp.StatusCode, want[i])
		}
	}
	f.advance(9 * time.Minute)
	if resp, _ := f.req(t, b[1], "GET", "/api/session", "", nil); resp.StatusCode != 200 {
		t.Errorf("session 1 after 9 min: %d", resp.StatusCode)
	}
	f.advance(9 * time.Minute)
	if resp, _ := f.req(t, b[2], "GET", "/api/session", "", nil); resp.StatusCode != 401 {
		t.Errorf("session 2 idle 18 min: %d, want 401", resp.StatusCode)
	}
	for range 7 {
		f.advance(9 * time.Minute)
		f.req(t, b[1], "GET", "/api/session", "", nil)
	}
	if resp, _ := f.req(t, b[1], "GET", "/api/session", "", nil); resp.StatusCode != 401 {
		t.Errorf("session 1 after its TTL: %d, want 401", resp.StatusCode)
	}
}

// TestPageHeaders: a strict CSP, no framing, and pages that need no inline
// script or style to work under it.
func TestPageHeaders(t *testing.T) {
	f := newFixture(t, Config{})
	c := f.browser(t)
	resp, body := f.req(t, c, "GET", "/", "", nil)
	if resp.StatusCode != 200 || !strings.Contains(body, `<script src="/console.js" defer>`) {
		t.Fatalf("index: %d", resp.StatusCode)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") || resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers %v", resp.Header)
	}
	for _, bad := range []*regexp.Regexp{regexp.MustCompile(`<script>|<script [^>]*>[^<]`), regexp.MustCompile(`\son[a-z]+=`),
		regexp.MustCompile(`\sstyle=`), regexp.MustCompile(`<style`), regexp.MustCompile(`https?://`)} {
		if bad.MatchString(body) {
			t.Errorf("index.html has %s: inline code or style, or something from elsewhere", bad)
		}
	}
	for _, p := range []string{"/console.js", "/console.css"} {
		resp, body := f.req(t, c, "GET", p, "", nil)
		if resp.StatusCode != 200 || len(body) == 0 || regexp.MustCompile(`https?://|innerHTML|eval\(`).MatchString(body) {
			t.Errorf("%s: %d, or it loads from elsewhere or writes HTML", p, resp.StatusCode)
		}
	}
	if resp, _ := f.req(t, c, "GET", "/etc/passwd", "", nil); resp.StatusCode != 404 {
		t.Errorf("other path: %d", resp.StatusCode)
	}
}

// TestFindTransaction: /api/txn asks the Admin API with the session's
// token and answers every cell, the records by attempt (the one that
// stepped back, then the one that decided), the cell that did not answer
// with its error, and nothing but the masked card; bad parameters are 400
// naming the parameter before the API is asked; without a session 401,
// without the console's header 403.
func TestFindTransaction(t *testing.T) {
	f := newFixture(t, Config{})
	c := f.browser(t)
	const path = "/api/txn?partner=p-001&id=order-1842"
	if resp, body := f.req(t, c, "GET", path, "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("before login: %d %s, want 401", resp.StatusCode, body)
	}
	f.login(t, c, f.viewerTk) // a viewer may find a transaction
	if resp, body := f.req(t, c, "GET", path, "", map[string]string{CSRFHeader: ""}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("without %s: %d %s, want 403", CSRFHeader, resp.StatusCode, body)
	}
	if resp, body := f.req(t, c, "GET", path, "", map[string]string{"Sec-Fetch-Site": "cross-site"}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site: %d %s, want 403", resp.StatusCode, body)
	}
	for _, tc := range []struct{ query, field string }{
		{"partner=p-001", "id: is required"},
		{"id=order-1842", "partner: is required"},
		{"partner=p%20001&id=order-1842", "partner: has a character outside"},
		{"partner=p-001&id=order%2F1842", "id: has a character outside"},
		{"partner=p-001&id=" + strings.Repeat("x", 65), "id: is 65 characters"},
	} {
		resp, body := f.req(t, c, "GET", "/api/txn?"+tc.query, "", nil)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, tc.field) {
			t.Errorf("%s: %d %s, want 400 %q", tc.query, resp.StatusCode, body, tc.field)
		}
	}
	f.admin.mu.Lock()
	finds := f.admin.finds
	f.admin.mu.Unlock()
	if finds != 0 {
		t.Fatalf("bad parameters reached the API %d times", finds)
	}

	resp, body := f.req(t, c, "GET", path, "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("find: %d %s", resp.StatusCode, body)
	}
	var got txnJSON
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if got.Partner != "p-001" || got.ID != "order-1842" || got.DecidedBy != "cell-b" || got.Complete {
		t.Fatalf("answer %+v", got)
	}
	want := "approved by cell-b on attempt 2; stepped back from cell-a (attempt 1); did not answer: cell-c (it may hold more)"
	if got.Summary != want {
		t.Errorf("summary %q, want %q", got.Summary, want)
	}
	var order []string
	for _, cell := range got.Cells {
		order = append(order, cell.Cell+" "+cell.Step)
	}
	if strings.Join(order, ",") != "cell-a stepped back,cell-b decided,cell-c ,cell-d " {
		t.Fatalf("cells %q: want the attempts in order, then the others in the table's", order)
	}
	a, b, cc, d := got.Cells[0], got.Cells[1], got.Cells[2], got.Cells[3]
	if !a.Found || a.State != "abandoned" || a.Attempt != 1 || a.Callbacks != nil {
		t.Errorf("cell-a %+v", a)
	}
	if !b.Found || b.State != "approved" || b.Attempt != 2 || b.AuthCode != "A1B2C3" || b.Amount != "12.50 EUR" || b.AmountMinor != 1250 ||
		b.Currency != "EUR" || b.PaymentType != "authorization" || b.MaskedPAN != "411111******1111" || b.Rule != "all" ||
		b.Updated == nil || !b.Updated.Equal(time.Date(2026, 5, 4, 9, 58, 0, 0, time.UTC)) {
		t.Errorf("cell-b %+v", b)
	}
	if len(b.Callbacks) != 1 || b.Callbacks[0] != (callbackJSON{EventID: "evt-1", Status: "pending", Attempts: 3, LastError: "HTTP 503"}) {
		t.Errorf("cell-b's callbacks %+v", b.Callbacks)
	}
	if cc.Found || cc.Error != "connection refused" || d.Found || d.Error != "" {
		t.Errorf("cell-c %+v, cell-d %+v", cc, d)
	}
	for _, secret := range []string{"s3cret", "partner.example", f.viewerTk} {
		if strings.Contains(body, secret) {
			t.Errorf("the answer holds %q: %s", secret, body)
		}
	}

	_, body = f.req(t, c, "GET", "/api/txn?partner=p-001&id=order-0000", "", nil)
	got = txnJSON{}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if got.Summary != "no cell that answered holds it" || !got.Complete || got.DecidedBy != "" || len(got.Cells) != 2 || got.Cells[0].Found {
		t.Fatalf("a transaction in no cell: %s", body)
	}
}

func TestTxnSummary(t *testing.T) {
	rec := func(id, state string, attempt int32) *adminproto.CellTransaction {
		return &adminproto.CellTransaction{CellId: id, Record: &cellproto.InspectResponse{Found: true, State: state, Attempt: attempt}}
	}
	for _, tc := range []struct {
		cells []*adminproto.CellTransaction
		want  string
	}{
		{[]*adminproto.CellTransaction{rec("cell-a", "abandoned", 1), rec("cell-b", "sending", 2)},
			"at the issuer through cell-b (attempt 2): outcome not known yet; stepped back from cell-a (attempt 1)"},
		{[]*adminproto.CellTransaction{rec("cell-a", "deciding", 1)}, "in progress in cell-a (attempt 1, deciding)"},
		{[]*adminproto.CellTransaction{rec("cell-b", "abandoned", 2), rec("cell-a", "abandoned", 1)},
			"not decided: every attempt found stepped back; stepped back from cell-a (attempt 1), cell-b (attempt 2)"},
		{[]*adminproto.CellTransaction{rec("cell-a", "declined", 1), {CellId: "cell-b", Error: "deadline exceeded"}},
			"declined by cell-a on attempt 1; did not answer: cell-b (it may hold more)"},
	} {
		if got := txnView(&adminproto.FindTransactionResponse{Cells: tc.cells}).Summary; got != tc.want {
			t.Errorf("summary %q, want %q", got, tc.want)
		}
	}
	for _, tc := range []struct {
		minor int64
		cur   string
		want  string
	}{{1250, "EUR", "12.50 EUR"}, {5, "EUR", "0.05 EUR"}, {-1250, "EUR", "-12.50 EUR"}, {1250, "JPY", "1250 JPY"},
		{1250, "KWD", "1.250 KWD"}, {1250, "XYZ", "1250 XYZ"}} {
		if got := amountText(tc.minor, tc.cur); got != tc.want {
			t.Errorf("amountText(%d, %s) = %q, want %q", tc.minor, tc.cur, got, tc.want)
		}
	}
}

func TestPreview(t *testing.T) {
	cell := &adminproto.CellStatus{Id: "cell-b", Weight: 100, TableWeight: 100, TrafficShare: 0.3}
	for _, tc := range []struct {
		req          changeReq
		to           int32
		after, moved float64
	}{
		{changeReq{Action: "drain", Percent: 30}, 70, 0.21, 0.09},
		{changeReq{Action: "drain", Percent: 100}, 0, 0, 0.3},
		{changeReq{Action: "weight", Weight: 50, Over: "10m"}, 50, 0.15, 0.15},
		{changeReq{Action: "restore"}, 100, 0.3, 0},
	} {
		p, err := preview(cell, tc.req)
		if err != nil || p.ToWeight != tc.to || !near(p.ShareAfter, tc.after) || !near(p.Moved, tc.moved) {
			t.Errorf("%+v: %+v, %v", tc.req, p, err)
		}
	}
	half := &adminproto.CellStatus{Id: "cell-b", Weight: 50, TableWeight: 100, TrafficShare: 0.15}
	if p, _ := preview(half, changeReq{Action: "restore"}); !near(p.ShareAfter, 0.3) || !near(p.Moved, 0.15) || !strings.Contains(p.Text, "come back") {
		t.Errorf("restore from 50: %+v", p)
	}
	zero := &adminproto.CellStatus{Id: "cell-b", Weight: 0, TableWeight: 100}
	if p, _ := preview(zero, changeReq{Action: "restore"}); p.Moved != -1 {
		t.Errorf("restore from 0: %+v, want unknown", p)
	}
	if _, err := preview(cell, changeReq{Action: "drain", Percent: 130}); err == nil {
		t.Error("drain 130%: no error")
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestRecent(t *testing.T) {
	now := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
	r := NewRecent(func() time.Time { return now })
	r.HealthChanged("cell-a", 100) // no change
	r.HealthChanged("cell-a", 0)
	r.HealthChanged("cell-a", 10) // back, ramping
	r.HealthChanged("cell-a", 40) // ramping: no event
	r.Rerouted("cell-b", status.Error(codes.Unavailable, "connection refused"), false)
	got := r.List(10)
	var kinds []string
	for _, e := range got {
		kinds = append(kinds, e.Cell+" "+e.Kind)
	}
	if strings.Join(kinds, ",") != "cell-b reroute,cell-a up,cell-a down" || !strings.Contains(got[0].Detail, "Unavailable: connection refused") {
		t.Fatalf("events %v", got)
	}
	for range recentSize + 10 {
		r.Rerouted("cell-c", errors.New("x"), true)
	}
	if all := r.List(1000); len(all) != recentSize || all[0].Cell != "cell-c" || all[len(all)-1].Cell != "cell-c" {
		t.Fatalf("after wrapping: %d events", len(all))
	}
	if l := r.List(-1); len(l) != 0 {
		t.Fatalf("List(-1): %d", len(l))
	}
	// The payment path's write allocates nothing.
	err := errors.New("refused")
	if n := testing.AllocsPerRun(100, func() { r.Rerouted("cell-a", err, false) }); n != 0 {
		t.Fatalf("Rerouted allocates %v times", n)
	}
}

// FindReference knows one reference, refused on replica gtr-b.
func (f *fakeAdmin) FindReference(ctx context.Context, req *adminproto.FindReferenceRequest, opts ...grpc.CallOption) (*adminproto.FindReferenceResponse, error) {
	if _, err := f.authorize(ctx, "FindReference", opts); err != nil {
		return nil, err
	}
	if req.GetRequestId() != "6553324a6b46f7af" {
		return nil, status.Error(codes.NotFound, "no refusal under reference "+req.GetRequestId())
	}
	return &adminproto.FindReferenceResponse{Replicas: []string{"gtr-a", "gtr-b"}, Refusals: []*adminproto.Refusal{{
		Replica: "gtr-b", RequestId: req.GetRequestId(), Time: timestamppb.New(time.Date(2026, 5, 4, 9, 58, 0, 0, time.UTC)),
		Method: "/cellpay.v1.Payments/SubmitTransaction", PartnerId: "p-001", TransactionId: "order-1842",
		Code: "Unavailable", Reason: "UNAVAILABLE", Message: "no cell could take the transaction: cell cell-b: connection refused"}}}, nil
}

// TestFindReference: /api/ref answers a viewer what the Admin API found
// under a reference, with the replicas searched; an unknown one is 404;
// without a session 401.
func TestFindReference(t *testing.T) {
	f := newFixture(t, Config{})
	c := f.browser(t)
	if resp, body := f.req(t, c, "GET", "/api/ref?id=6553324a6b46f7af", "", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("before login: %d %s, want 401", resp.StatusCode, body)
	}
	f.login(t, c, f.viewerTk)
	resp, body := f.req(t, c, "GET", "/api/ref?id=6553324a6b46f7af", "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("find: %d %s", resp.StatusCode, body)
	}
	var got struct {
		Refusals []refusals.Refusal `json:"refusals"`
		Replicas []string           `json:"replicas"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Refusals) != 1 || got.Refusals[0].Replica != "gtr-b" || got.Refusals[0].TransactionID != "order-1842" ||
		!strings.Contains(got.Refusals[0].Message, "connection refused") || len(got.Replicas) != 2 {
		t.Fatalf("got %+v", got)
	}
	if resp, body := f.req(t, c, "GET", "/api/ref?id=0000000000000000", "", nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown: %d %s, want 404", resp.StatusCode, body)
	}
}

// TestEventsMerged: with Events set, /api/events shows every replica's
// events merged newest first, each naming its replica.
func TestEventsMerged(t *testing.T) {
	t0 := time.Date(2026, 5, 4, 9, 58, 0, 0, time.UTC)
	a := []Event{{Time: t0.Add(3 * time.Second), Kind: "down", Cell: "cell-a", Replica: "gtr-a"}, {Time: t0, Kind: "reroute", Cell: "cell-a", Replica: "gtr-a"}}
	b := []Event{{Time: t0.Add(2 * time.Second), Kind: "reroute", Cell: "cell-b", Replica: "gtr-b"}}
	f := newFixture(t, Config{Events: func(_ context.Context, limit int) ([]Event, error) { return MergeEvents(limit, a, b), nil }})
	c := f.browser(t)
	f.login(t, c, f.viewerTk)
	resp, body := f.req(t, c, "GET", "/api/events", "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("events: %d %s", resp.StatusCode, body)
	}
	var got struct{ Events []Event }
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, e := range got.Events {
		order = append(order, e.Replica+":"+e.Kind)
	}
	if strings.Join(order, " ") != "gtr-a:down gtr-b:reroute gtr-a:reroute" {
		t.Fatalf("merged %v", order)
	}
	if got := MergeEvents(2, a, b); len(got) != 2 {
		t.Fatalf("MergeEvents(2) kept %d", len(got))
	}
}

// TestCellsBySite: the page's cells come a site's together, by site then
// cell ID, cells of no named site last, each naming its site and its
// replicas' sites.
func TestCellsBySite(t *testing.T) {
	cell := func(id, site string) *adminproto.CellStatus { return &adminproto.CellStatus{Id: id, Site: site} }
	in := []*adminproto.CellStatus{cell("cell-d", ""), cell("cell-c", "site-b"), cell("cell-b", "site-a"), cell("cell-a", "site-b"), cell("cell-e", "site-a")}
	in[1].Replicas = []*adminproto.ReplicaCellView{{Replica: "r2", Site: "site-b", HealthShare: 100}}
	var got []string
	out := cellsBySite(in)
	for _, c := range out {
		got = append(got, c.Site+"/"+c.ID)
	}
	if want := []string{"site-a/cell-b", "site-a/cell-e", "site-b/cell-a", "site-b/cell-c", "/cell-d"}; !slices.Equal(got, want) {
		t.Fatalf("order %q, want %q", got, want)
	}
	if r := out[3].Replicas; len(r) != 1 || r[0].Site != "site-b" {
		t.Fatalf("cell-c's replicas %+v", r)
	}
	b, _ := json.Marshal(out[4])
	if !strings.Contains(string(b), `"site":""`) {
		t.Fatalf("a cell of no site: %s", b)
	}
}
