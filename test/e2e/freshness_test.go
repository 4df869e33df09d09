package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// TestFreshnessGating runs a GTR whose rule for partner p-002 needs
// reference data v2 in front of three cells on a real nats-server that
// serve v1: p-002's transactions get UNAVAILABLE and Explain names every
// cell as stale, while other partners route as usual. Once the replicator
// publishes v2 and the cells report it, p-002 routes again within seconds,
// on v2.
func TestFreshnessGating(t *testing.T) {
	ctx := ctxFor(t, 90*time.Second)
	e := startRefEnv(t, ctx, 3)
	if res := e.publish(ctx, "snapshot", "-source", filepath.Join(env.root, "config", "refdata")); res.Version != 1 {
		t.Fatalf("snapshot: %+v", res)
	}
	e.waitCells(ctx, "version 1", func(s refdata.Status) bool { return s.Version == 1 })

	// A GTR of our own, on the same NATS, with the gated rule. (The refEnv
	// platform's GTR runs without NATS and keeps its plain table.)
	table := "version: 1\ncells:\n"
	for _, c := range e.cells {
		table += fmt.Sprintf("  - {id: %s, addr: %q, pool: main}\n", c.ID, c.Addr)
	}
	table += "rules:\n" +
		"  - {name: fresh-fx, partners: [p-002], pool: main, min_refdata_version: 2}\n" +
		"  - {name: everything, pool: main}\n"
	cfg := filepath.Join(e.dir, "gtr-fresh.yaml")
	if err := os.WriteFile(cfg, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	g := newGTR(t, e.dir, "gtr-fresh", cfg, e.natsURL, drainToken)
	g.cellsOf(e.p)
	g.Start(t)
	adm := adminClient(t, g.AdminAddr)

	// The GTR hears every cell at v1 (the cells report every second). What
	// it last showed is logged if it does not, so that a failure says
	// whether the GTR missed the reports or the cells.
	var seen string
	defer func() {
		if t.Failed() {
			t.Logf("the GTR last showed: %s; its log: %s", seen, tail(g.logPath))
		}
	}()
	testutil.Eventually(t, 10*time.Second, "the GTR hears every cell at v1", func() bool {
		l, err := adm.ListCells(ctx, &adminproto.ListCellsRequest{})
		if err != nil {
			seen = "ListCells: " + err.Error()
			return false
		}
		var b strings.Builder
		for _, c := range l.GetCells() {
			fmt.Fprintf(&b, "%s at v%d since %v; ", c.GetId(), c.GetRefdataVersion(), c.GetRefdataSince().AsTime())
		}
		seen = b.String()
		if len(l.GetCells()) != len(e.cells) {
			return false
		}
		for _, c := range l.GetCells() {
			if c.GetRefdataVersion() != 1 || c.GetRefdataSince() == nil {
				return false
			}
		}
		return true
	})

	submit := func(suffix, partner string) (*cellpayv1.Transaction, error) {
		req := request("fresh-"+suffix, approvedPAN)
		req.PartnerId = partner
		return g.payments.SubmitTransaction(ctx, req)
	}
	// Stale everywhere: no cell for p-002, and nothing else affected.
	if got, err := submit("stale", "p-002"); status.Code(err) != codes.Unavailable {
		t.Fatalf("p-002 with every cell on v1: %v, %v; want UNAVAILABLE", got, err)
	}
	if got, err := submit("other", "p-001"); err != nil || got.GetStatus() != cellpayv1.TransactionStatus_APPROVED || got.GetRefdataVersion() != "1" {
		t.Fatalf("p-001 (no minimum): %v, %v", got, err)
	}
	ex, err := adm.Explain(ctx, &adminproto.ExplainRequest{Attrs: &adminproto.Attrs{PartnerId: "p-002", Market: "GB", PaymentType: "CARD_AUTHORIZATION"}})
	if err != nil {
		t.Fatal(err)
	}
	if ex.GetRule() != "fresh-fx" || ex.GetMinRefdataVersion() != 2 || ex.GetError() != "routing: no cell available" || len(ex.GetCells()) != len(e.cells) {
		t.Fatalf("explain:\n%s%v", ex.GetText(), ex)
	}
	for _, c := range ex.GetCells() {
		if c.GetVerdict() != "skipped: stale reference data" || c.GetWhy() != "skipped: serves reference data v1, rule needs v2" || c.GetRank() != 0 {
			t.Fatalf("explain: cell %s: %v", c.GetCellId(), c)
		}
		if !strings.Contains(ex.GetText(), c.GetCellId()) {
			t.Fatalf("explain text does not name %s:\n%s", c.GetCellId(), ex.GetText())
		}
	}
	t.Logf("explain before v2:\n%s", ex.GetText())

	// v2 through the replicator: p-002 routes again within a few seconds.
	if res := e.publish(ctx, "update", "-rate", "USD=1.2345"); res.Version != 2 {
		t.Fatalf("update: %+v", res)
	}
	published := time.Now()
	var got *cellpayv1.Transaction
	for i := 0; ; i++ {
		got, err = submit(fmt.Sprintf("retry-%d", i), "p-002")
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("p-002 after v2: %v", err)
		}
		if time.Since(published) > 5*time.Second {
			t.Fatalf("p-002 still unroutable %v after v2 was published: %v", time.Since(published), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("p-002 routed again %v after v2 was published", time.Since(published).Round(time.Millisecond))
	if got.GetStatus() != cellpayv1.TransactionStatus_APPROVED || got.GetRefdataVersion() != "2" || got.GetRouteRule() != "fresh-fx" {
		t.Fatalf("p-002 after v2: %v", got)
	}
	// The first routable transaction went to whichever cell reported v2
	// first. Once all three serve it, p-002 goes home, as Explain says.
	attrs := &adminproto.Attrs{PartnerId: "p-002", Market: "GB", PaymentType: "CARD_AUTHORIZATION"}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ex, err = adm.Explain(ctx, &adminproto.ExplainRequest{Attrs: attrs})
		if err != nil {
			t.Fatal(err)
		}
		all := len(ex.GetCells()) == 3
		for _, c := range ex.GetCells() {
			all = all && c.GetRefdataVersion() >= 2
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not every cell reported v2 within 5 s:\n%s", ex.GetText())
		}
		time.Sleep(100 * time.Millisecond)
	}
	home := ""
	for _, c := range ex.GetCells() {
		if c.GetRank() == 1 {
			home = c.GetCellId()
		}
	}
	got, err = submit("after-all-v2", "p-002")
	if err != nil || ex.GetError() != "" || home != got.GetCellId() {
		t.Fatalf("after every cell serves v2, p-002 went to %s, Explain's home is %s:\n%s%v", got.GetCellId(), home, ex.GetText(), err)
	}
}
