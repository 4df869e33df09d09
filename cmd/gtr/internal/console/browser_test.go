package console_test

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/cmd/gtr/internal/admin"
	"github.com/cellpay/cellpay/cmd/gtr/internal/gtr"
	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/operators"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/api/apierr"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/client"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write the console's screenshot to docs/console.png")

// fakeCell serves gRPC health SERVING on loopback, in plaintext: the
// simplest cell the GTR's health monitor counts as up; and Inspect, for
// the search (inspectCell).
func fakeCell(t *testing.T, id string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, grpchealth.NewServer())
	cellproto.RegisterCellServer(gs, inspectCell{id: id})
	go gs.Serve(l)
	t.Cleanup(gs.Stop)
	return l.Addr().String()
}

// inspectCell answers Inspect as the cells hold p-001's order-1842: its
// first attempt, on cell-a, stepped back; its second, on cell-b, was
// approved and its callback delivered; cell-c does not answer. Its other
// methods are unimplemented.
type inspectCell struct {
	cellproto.UnimplementedCellServer
	id string
}

func (c inspectCell) Inspect(_ context.Context, req *cellproto.GetRequest) (*cellproto.InspectResponse, error) {
	if req.GetPartnerId() != "p-001" || req.GetTransactionId() != "order-1842" {
		return &cellproto.InspectResponse{}, nil
	}
	at := timestamppb.Now()
	rec := &cellproto.InspectResponse{Found: true, Attempt: 1, CellId: c.id, RouteRule: "all", MaskedPan: "411111******1111",
		AmountMinorUnits: 1250, Currency: "EUR", PaymentType: "authorization", CreatedAt: at, UpdatedAt: at}
	switch c.id {
	case "cell-a":
		rec.State = "abandoned"
	case "cell-b":
		rec.State, rec.Attempt, rec.AuthCode = "approved", 2, "A1B2C3"
		rec.Callbacks = []*cellproto.CallbackEvent{{EventId: "evt-1", Status: "delivered", Attempts: 2, LastError: "HTTP 503"}}
	default:
		return nil, status.Error(codes.Unavailable, "database unreachable")
	}
	return rec, nil
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// consoleGTR runs a GTR with three healthy cells in two sites (cell-a and
// cell-c in site-a, cell-b in site-b) and two operators, and
// returns its admin address, the CA file and the two tokens, and its
// partners' address.
func consoleGTR(t *testing.T) (addr, ca, operatorTok, viewerTok, partners string) {
	t.Helper()
	dir := t.TempDir()
	var yml strings.Builder
	yml.WriteString("version: 1\ncells:\n")
	for _, id := range []string{"cell-a", "cell-b", "cell-c"} {
		site := map[string]string{"cell-b": "site-b"}[id]
		fmt.Fprintf(&yml, "  - {id: %s, addrs: [%q], pool: main, site: %s}\n", id, fakeCell(t, id), cmp.Or(site, "site-a"))
	}
	yml.WriteString("rules:\n  - {name: all, pool: main}\n")
	cfgFile := filepath.Join(dir, "gtr.yaml")
	if err := os.WriteFile(cfgFile, []byte(yml.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var ops []operators.Operator
	tok := func(id string, role operators.Role) string {
		tk, op, err := operators.NewToken(nil, id, role)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, op)
		return tk
	}
	operatorTok, viewerTok = tok("otto", operators.RoleOperator), tok("vera", operators.RoleViewer)
	opsFile := filepath.Join(dir, "operators.yaml")
	if err := operators.WriteFile(opsFile, &operators.File{Operators: ops}); err != nil {
		t.Fatal(err)
	}
	cert, key, ca, err := pki.Loopback(filepath.Join(dir, "pki"), "gtr")
	if err != nil {
		t.Fatal(err)
	}
	cfg := gtr.Config{Listen: freeAddr(t), AdminListen: freeAddr(t), ConfigFile: cfgFile, OperatorsFile: opsFile,
		AuditFile: filepath.Join(dir, "audit.jsonl"), StateFile: filepath.Join(dir, "state.json"), ReplicaID: "r1",
		ShutdownTimeout: time.Second, TLSCertFile: cert, TLSKeyFile: key, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	g, err := gtr.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return cfg.AdminListen, ca, operatorTok, viewerTok, cfg.Listen
}

// adminClient is gtrctl's way in: gRPC over TLS with a token.
func adminClient(t *testing.T, addr, ca, tok string) adminproto.AdminClient {
	t.Helper()
	tlsOpt, err := client.TLS(ca)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, tlsOpt, grpc.WithPerRPCCredentials(admin.TokenCredentials(tok)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return adminproto.NewAdminClient(conn)
}

// browser starts headless Chromium. A machine without it fails the test:
// the console is not tested otherwise.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not on PATH: the console's test needs it (apt-get install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1280, 1000),
		// The GTR's certificate is a test CA's, which Chromium does not
		// know; the Secure cookie still needs https, which this keeps.
		chromedp.Flag("ignore-certificate-errors", true))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses to run as root
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	if err := chromedp.Do(bctx); err != nil { // start the browser with no timeout of its own
		bcancel()
		acancel()
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() { bcancel(); acancel() })
	return bctx
}

// within runs steps on the browser, bounded.
func within(t *testing.T, b context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		dctx, dcancel := context.WithTimeout(b, 5*time.Second)
		defer dcancel()
		page, _ := chromedp.Run(dctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("%s: %v; the page shows:\n%s", what, err, page)
	}
}

func eval[T any](t *testing.T, b context.Context, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// shareOf is the share text of a cell's row, as a number (33.4).
const shareOf = `parseFloat(document.querySelector('#cells tr[data-cell="%s"] .share-text').textContent)`

func login(t *testing.T, b context.Context, url, tok string) {
	t.Helper()
	within(t, b, "log in",
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), tok+"\r"), // Enter submits: the keyboard is enough
		chromedp.WaitVisible(chromedp.CSS(`#cells tr[data-cell="cell-c"]`)))
}

// TestConsoleInBrowser: an operator logs in, sees three cells grouped by
// site, drains one
// by 30% after its preview and sees its share fall (and the table change
// through the Admin API, audited as the operator's), finds a transaction
// in every cell and a partner's refused call by its reference; a viewer
// sees no drain control, and a drain posted by hand is refused 403 and
// audited as refused.
func TestConsoleInBrowser(t *testing.T) {
	addr, ca, operatorTok, viewerTok, partners := consoleGTR(t)
	api := adminClient(t, addr, ca, operatorTok)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := api.ListCells(ctx, &adminproto.ListCellsRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("gtrctl's path to the admin listener: %v", err)
	}
	b := browser(t)
	url := "https://" + addr + "/"

	login(t, b, url, operatorTok)
	if n := eval[int](t, b, `document.querySelectorAll('#cells tbody tr[data-cell]').length`); n != 3 {
		t.Fatalf("%d cells shown, want 3", n)
	}
	// A group per site, headed by its name, its cells by ID.
	groups := eval[string](t, b, `[...document.querySelectorAll('#cells tbody')].map((g) => g.querySelector('tr.site th').textContent + ': ' +
		[...g.querySelectorAll('tr[data-cell]')].map((tr) => tr.dataset.cell).join(' ')).join(' | ')`)
	if want := "Site site-a · 2 cells: cell-a cell-c | Site site-b · 1 cell: cell-b"; groups != want {
		t.Fatalf("cells grouped as %q, want %q", groups, want)
	}
	if who := eval[string](t, b, `document.getElementById('who-text').textContent`); who != "otto (operator)" {
		t.Fatalf("logged in as %q", who)
	}
	if html := eval[string](t, b, `document.documentElement.outerHTML`); strings.Contains(html, operatorTok) {
		t.Fatal("the page holds the operator's token")
	}
	before := eval[float64](t, b, fmt.Sprintf(shareOf, "cell-b"))
	if before < 25 || before > 42 {
		t.Fatalf("cell-b's share %.1f%%, want about a third", before)
	}

	within(t, b, "preview a 30% drain of cell-b",
		chromedp.SetValue(chromedp.ID("cell"), "cell-b"),
		chromedp.SetValue(chromedp.ID("action"), "drain"),
		chromedp.SetValue(chromedp.ID("amount"), "30"),
		chromedp.SendKeys(chromedp.ID("amount"), "\r"), // Enter in the form previews
		chromedp.WaitEnabled(chromedp.ID("confirm")))
	if f := eval[string](t, b, `document.activeElement.id`); f != "confirm" {
		t.Fatalf("after the preview the focus is on %q, want the Confirm button", f)
	}
	if p := eval[string](t, b, `document.getElementById('preview-text').textContent`); !strings.Contains(p, "weight 100 → 70") ||
		!strings.Contains(p, "move away from cell-b") {
		t.Fatalf("preview %q", p)
	}
	within(t, b, "confirm from the keyboard", chromedp.SendKeys(chromedp.ID("confirm"), "\r"))
	pctx, pcancel := context.WithTimeout(b, 20*time.Second)
	after, err := chromedp.Run(pctx, chromedp.Poll[float64](fmt.Sprintf(`(() => { const s = `+shareOf+`; return s < %f ? s : 0 })()`, "cell-b", before*0.85)))
	pcancel()
	if err != nil {
		t.Fatalf("cell-b's share did not fall from %.1f%%: %v", before, err)
	}
	if after < before*0.55 || after > before*0.85 {
		t.Fatalf("cell-b's share %.1f%% -> %.1f%%, want about 70%% of it", before, after)
	}
	list, err := api.ListCells(ctx, &adminproto.ListCellsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list.GetCells() {
		want := int32(100)
		if c.GetId() == "cell-b" {
			want = 70
		}
		if c.GetWeight() != want {
			t.Fatalf("%s: weight %d after the drain, want %d", c.GetId(), c.GetWeight(), want)
		}
	}
	within(t, b, "the drain in the audit log",
		chromedp.Poll[chromedp.Void](`document.querySelector('#audit tbody').textContent.includes('Drain')`))

	within(t, b, "find a transaction",
		chromedp.SetValue(chromedp.ID("txn-partner"), "p-001"),
		chromedp.SetValue(chromedp.ID("txn-id"), "order-1842"),
		chromedp.SendKeys(chromedp.ID("txn-id"), "\r"), // Enter in the form finds
		chromedp.WaitVisible(chromedp.CSS(`#txn tr[data-cell="cell-c"]`)))
	rows := eval[string](t, b, `[...document.querySelectorAll('#txn tbody tr')].map((tr) => tr.dataset.cell + ' ' + tr.className).join(',')`)
	if rows != "cell-a step-stepped-back,cell-b step-decided,cell-c no-answer" {
		t.Fatalf("the search's rows %q: want cell-a stepped back, cell-b decided, cell-c without an answer", rows)
	}
	for sel, want := range map[string][]string{
		`#txn-summary`:                   {"approved by cell-b on attempt 2", "stepped back from cell-a (attempt 1)", "did not answer: cell-c"},
		`#txn tr[data-cell="cell-b"]`:    {"approved", "A1B2C3", "12.50 EUR", "411111******1111", "evt-1: delivered, 2 attempts (last error: HTTP 503)"},
		`#txn tr[data-cell="cell-a"]`:    {"abandoned", "stepped back"},
		`#txn tr[data-cell="cell-c"] td`: {"did not answer", "database unreachable"},
	} {
		text := eval[string](t, b, fmt.Sprintf(`document.querySelector(%q).textContent`, sel))
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("%s shows %q, want %q in it", sel, text, w)
			}
		}
	}
	// A partner's call refused (no API key) is found by its reference.
	tlsOpt, err := client.TLS(ca)
	if err != nil {
		t.Fatal(err)
	}
	pconn, err := grpc.NewClient(partners, tlsOpt)
	if err != nil {
		t.Fatal(err)
	}
	defer pconn.Close()
	_, perr := cellpayv1.NewPaymentsClient(pconn).GetTransaction(ctx, &cellpayv1.GetTransactionRequest{PartnerId: "p-001", TransactionId: "order-1842"})
	ref := apierr.RequestIDOf(perr)
	if status.Code(perr) != codes.Unauthenticated || ref == "" {
		t.Fatalf("a call without a key: %v (reference %q), want UNAUTHENTICATED with a reference", perr, ref)
	}
	within(t, b, "find an error by its reference",
		chromedp.SetValue(chromedp.ID("ref-id"), ref),
		chromedp.SendKeys(chromedp.ID("ref-id"), "\r"),
		chromedp.WaitVisible(chromedp.CSS(`#ref tbody tr`)))
	if text := eval[string](t, b, `document.querySelector('#ref tbody tr').textContent`); !strings.Contains(text, "Unauthenticated") ||
		!strings.Contains(text, "r1") || !strings.Contains(text, "GetTransaction") {
		t.Fatalf("the reference's row %q: want the replica r1's UNAUTHENTICATED GetTransaction", text)
	}
	if *updateScreenshot {
		shot, err := chromedp.Run(b, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "..", "..", "..", "docs", "console.png"), shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	within(t, b, "log out", chromedp.Click(chromedp.ID("logout")), chromedp.WaitVisible(chromedp.ID("token")))
	login(t, b, url, viewerTok)
	if hidden := eval[bool](t, b, `document.getElementById('change').hidden && !document.getElementById('change-denied').hidden`); !hidden {
		t.Fatal("a viewer is shown the drain form")
	}
	code := eval[int](t, b, `fetch('/api/change', {method: 'POST', headers: {'X-Cellpay-Console': '1', 'Content-Type': 'application/json'},
		body: JSON.stringify({cell: 'cell-c', action: 'drain', percent: 30})}).then(r => r.status)`)
	if code != 403 {
		t.Fatalf("a viewer's drain posted by hand: HTTP %d, want 403", code)
	}
	recs, err := api.ListAudit(ctx, &adminproto.ListAuditRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var drained, refused bool
	for _, r := range recs.GetRecords() {
		drained = drained || r.GetMethod() == "Drain" && r.GetActor() == "otto" && r.GetOutcome() == "OK"
		refused = refused || r.GetMethod() == "Drain" && r.GetActor() == "vera" && r.GetOutcome() == "PermissionDenied"
	}
	if !drained || !refused {
		t.Fatalf("audit: otto's drain %v, vera's refusal %v: %v", drained, refused, recs.GetRecords())
	}
	list, err = api.ListCells(ctx, &adminproto.ListCellsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if c := list.GetCells()[2]; c.GetId() != "cell-c" || c.GetWeight() != 100 {
		t.Fatalf("cell-c after the viewer's attempt: %v", c)
	}
}
