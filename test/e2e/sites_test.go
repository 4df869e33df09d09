package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// TestEvacuateSite names two sites over the shared cells (cell-a and cell-b
// in site-a, cell-c in site-b) on two GTR replicas of its own and homes
// p-001 in site-a: its payments (hashed on the merchant) all land on
// site-a's cells, where a third would land on cell-c by the hash alone.
// Under partners' load through both replicas: a dry run of evacuating site-a says which
// share of the keys would move; the evacuation, ramped over 3 s, moves that
// share (of 10,000 keys, within 3 points), after which no transaction
// reaches site-a; restoring the site brings every key back home. No
// partner sees an error, and the checker finds every answer as the cells
// and the issuer hold it. Authorizations made on site-a before, captured
// and refunded in parts while it is evacuated, are answered by their own
// cells there, the sums exact in the answers and at the issuer.
func TestEvacuateSite(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	_, _, gtrs, admins := twoReplicas(t, "gtr-site")
	a1, a2 := admins[0], admins[1]
	site := map[string]string{"cell-a": "site-a", "cell-b": "site-a", "cell-c": "site-b"}
	tbl, err := a1.GetTable(ctx, &adminproto.GetTableRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tbl.Version++
	for _, c := range tbl.Cells {
		c.Site = site[c.Id]
	}
	if _, err := a1.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: tbl, ExpectedVersion: tbl.Version - 1}); err != nil {
		t.Fatal(err)
	}
	keys := drainKeys(10000)
	homes := func(a adminproto.AdminClient) []string {
		t.Helper()
		r, err := a.RouteKeys(ctx, &adminproto.RouteKeysRequest{Attrs: keys})
		if err != nil {
			t.Fatal(err)
		}
		return r.Home
	}
	// routesAll waits for both replicas to route every key as want says.
	routesAll := func(what string, want func(i int, cell string) bool) {
		t.Helper()
		testutil.Eventually(t, 15*time.Second, what, func() bool {
			for _, a := range admins {
				for i, h := range homes(a) {
					if !want(i, h) {
						return false
					}
				}
			}
			return true
		})
	}
	routesAll("both replicas on the table with sites", func(_ int, h string) bool { return h != "" })

	// p-001 homed in site-a (the replicas' own registry), through replica
	// 2: both route its keys to site-a's cells alone.
	if _, err := a2.SetPartnerHomeSite(ctx, &adminproto.SetPartnerHomeSiteRequest{PartnerId: "p-001", HomeSite: "site-a"}); err != nil {
		t.Fatal(err)
	}
	routesAll("p-001's keys on site-a on both replicas", func(_ int, h string) bool { return site[h] == "site-a" })
	// Authorizations on site-a's cells, captured and refunded once the
	// site is evacuated: two per cell.
	fus := &answerLog{}
	var originals []original
	perCell := map[string]int{}
	for i := range 24 {
		req := request(fmt.Sprintf("homed-%d", i), freshPAN())
		req.Merchant.Id = keys[i*97].MerchantId
		txn, err := gtrs[i%2].payments.SubmitTransaction(ctx, req)
		if err != nil {
			t.Fatalf("homed-%d: %v", i, err)
		}
		if site[txn.GetCellId()] != "site-a" {
			t.Fatalf("homed-%d of p-001, homed in site-a, served by %s", i, txn.GetCellId())
		}
		fus.add(req.GetPartnerId(), req.GetTransactionId(), txn, nil)
		if txn.GetStatus() == cellpayv1.TransactionStatus_APPROVED && perCell[txn.GetCellId()] < 2 {
			perCell[txn.GetCellId()]++
			originals = append(originals, original{req, txn.GetCellId(), txn})
		}
	}
	if len(originals) < 3 {
		t.Fatalf("approved authorizations on site-a's cells to follow up: %v", perCell)
	}
	// Back to no home site: the share below is the table's alone.
	if _, err := a2.SetPartnerHomeSite(ctx, &adminproto.SetPartnerHomeSiteRequest{PartnerId: "p-001"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "p-001 without a home site on both replicas", func() bool {
		for _, a := range admins {
			e, err := a.Explain(ctx, &adminproto.ExplainRequest{Attrs: keys[0]})
			if err != nil || e.GetHomeSite() != "" {
				return false
			}
		}
		return true
	})
	base := homes(a1)
	onA := 0
	for _, h := range base {
		if site[h] == "site-a" {
			onA++
		}
	}

	dry, err := a2.EvacuateSite(ctx, &adminproto.EvacuateSiteRequest{Site: "site-a", DryRun: true, Samples: 20000})
	if err != nil {
		t.Fatal(err)
	}
	shown := 0.0
	for _, m := range dry.GetMoves() {
		if m.GetFromCell() != m.GetToCell() {
			if m.GetToCell() != "cell-c" {
				t.Fatalf("the dry run moves keys from %s to %s, not to site-b", m.GetFromCell(), m.GetToCell())
			}
			shown += m.GetShare()
		}
	}
	if dry.GetApplied() {
		t.Fatal("a dry run applied")
	}

	// Partners' load through both replicas, as a partner sends (the
	// client resends an UNAVAILABLE under the same ID), for the whole of
	// the evacuation and the restore.
	var (
		mu      sync.Mutex
		answers []checker.Answer
		errs    []string
		late    = map[string]int{} // cells of transactions sent after the evacuation settled
		settled time.Time
	)
	done := make(chan load.Report, 1)
	go func() {
		rep, err := load.Run(ctx, load.Config{
			Target: load.TargetGTR, Endpoints: []string{gtrs[0].Addr, gtrs[1].Addr}, DialOptions: env.gtrOpts, Mode: load.ModeOpen,
			Client: client.Config{CallTimeout: 12 * time.Second}, PerRequestTimeout: 30 * time.Second,
			Rate: 40, Concurrency: 64, Count: 1000, Duration: 20 * time.Second, Seed: 39, RunID: runID + "-evacuate",
			OnResult: func(r load.Result) {
				mu.Lock()
				defer mu.Unlock()
				answers = append(answers, checker.AnswerOf(r.PartnerID, r.Request.GetTransactionId(), r.Transaction, r.Err))
				if r.Err != nil {
					if len(errs) < 5 {
						errs = append(errs, fmt.Sprintf("%s: %v", r.Request.GetTransactionId(), r.Err))
					}
					return
				}
				if !settled.IsZero() && r.Sent.After(settled) {
					late[r.Transaction.GetCellId()]++
				}
			},
		}, nil)
		if err != nil {
			t.Error(err)
		}
		done <- rep
	}()
	time.Sleep(3 * time.Second)
	ev, err := a1.EvacuateSite(ctx, &adminproto.EvacuateSiteRequest{Site: "site-a", Over: durationpb.New(3 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if !ev.GetApplied() || len(ev.GetCells()) != 2 {
		t.Fatalf("evacuation: %v", ev)
	}
	routesAll("every key routed to site-b on both replicas", func(_ int, h string) bool { return h == "cell-c" })
	mu.Lock()
	settled = time.Now()
	mu.Unlock()
	moved := 0
	for _, h := range base {
		if h != "cell-c" {
			moved++
		}
	}
	got := float64(moved) / float64(len(base))
	t.Logf("evacuating site-a: the dry run showed %.1f%% of keys moving, %.1f%% of 10,000 keys moved (%d were on site-a)", 100*shown, 100*got, onA)
	if got < shown-0.03 || got > shown+0.03 {
		t.Errorf("%.3f of the keys moved, the dry run showed %.3f", got, shown)
	}
	// With site-a evacuated, the authorizations it holds are captured and
	// refunded in parts, through both replicas: each follow-up is
	// answered by its original's cell, in the evacuated site, and the
	// sums are exact in the answers and at the issuer.
	evacuated := time.Now()
	via := [2]cellpayv1.PaymentsClient{gtrs[0].payments, gtrs[1].payments}
	want := map[string][2]int64{}
	for _, o := range originals {
		captureAndRefund(t, ctx, via, o, "evacuated", fus)
		want[o.req.GetTransactionId()] = [2]int64{500, 250}
	}
	checkSums(t, ctx, via[0], want)
	time.Sleep(time.Until(evacuated.Add(5 * time.Second))) // transactions sent with site-a empty
	if _, err := a2.RestoreSite(ctx, &adminproto.RestoreSiteRequest{Site: "site-a", Over: durationpb.New(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	afterEvacuation := map[string]int{}
	for c, n := range late {
		afterEvacuation[c] = n
	}
	settled = time.Time{}
	mu.Unlock()
	routesAll("every key home again on both replicas", func(i int, h string) bool { return h == base[i] })
	rep := <-done

	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 || rep.Completed < 700 {
		t.Fatalf("the load: %d completed, errors %v; the first: %v", rep.Completed, rep.Errors, errs)
	}
	if afterEvacuation["cell-a"]+afterEvacuation["cell-b"] != 0 || afterEvacuation["cell-c"] < 50 {
		t.Fatalf("transactions sent after the evacuation settled, by cell: %v; want every one on cell-c", afterEvacuation)
	}
	keysOf := make([]idempotency.Key, 0, len(answers))
	for _, a := range answers {
		keysOf = append(keysOf, a.Key())
	}
	if _, err := checker.WaitResolved(ctx, checkerConfig(), keysOf, 30*time.Second); err != nil {
		t.Fatalf("PENDING not resolved within 30 s: %v", err)
	}
	answers = append(answers, fus.all...)
	report, err := checker.Check(ctx, checkerConfig(), answers)
	if err != nil {
		t.Fatal(err)
	}
	if !report.OK() || report.Pending != 0 {
		t.Fatalf("invariants broken:\n%s", report.String())
	}
	t.Logf("evacuation and restore under load: %d transactions, none failed; after the evacuation settled %v; %d authorizations of site-a captured and refunded there (%v); checker: %s",
		rep.Completed, afterEvacuation, len(originals), perCell, strings.ReplaceAll(report.String(), "\n", "; "))
}
