package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// TestFollowUpOfReroutedOriginal: an authorization whose home cell was
// frozen while it was decided completes on the other cell; once the home
// is back, its captures and refunds (two of each) go to the home first,
// which does not hold the original (no record, or one short of its point
// of no return) and names the directory's owner; each is approved by the
// cell that holds the original (the authorization's answer's cell_id),
// the original's answer and the issuer hold exactly the amounts approved,
// each applied once, and the GTR counted the owner look-ups
// (cellpay_gtr_locates_total{op="follow_up",how="owner"}) and no
// follow-up found at the home; the checker finds every answer's amounts
// equal to the cells' records and the issuer's effects.
//
// A platform of its own: two cells, so that the re-route has one place
// to go, and the GTR's /metrics, which the shared platform does not serve.
func TestFollowUpOfReroutedOriginal(t *testing.T) {
	if platform.FindNATSServer(env.bin) == "" {
		t.Fatal("nats-server is not installed: the owner look-up is the transaction directory's, on NATS")
	}
	ctx := ctxFor(t, 3*time.Minute)
	dir := platformDir(t, "cellpay-fureroute-")
	ports, err := testutil.FreePorts(7)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	cells := []platform.CellSpec{{ID: "cell-a", Addr: addr(0)}, {ID: "cell-b", Addr: addr(1)}}
	table := "version: 1\ncells:\n"
	for _, c := range cells {
		table += fmt.Sprintf("  - {id: %s, addr: %q, pool: main}\n", c.ID, c.Addr)
	}
	table += "rules:\n  - {name: everything, pool: main, hash_on: partner}\n"
	gtrConfig := filepath.Join(dir, "gtr.yaml")
	if err := os.WriteFile(gtrConfig, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	pgBase, err := testutil.FreePortRun(2 * len(cells)) // primaries, then standbys
	if err != nil {
		t.Fatal(err)
	}
	gtrMetrics := addr(6)
	p, err := platform.Start(ctx, platform.Config{
		NoFsync: true, // tests: see platform.Config.NoFsync
		BinDir:  env.bin, DataDir: filepath.Join(dir, "data"), GTRConfig: gtrConfig,
		RefData: filepath.Join(env.root, "config", "refdata.json"), Cells: cells,
		IssuerAddr: addr(2), GTRAddr: addr(3), AdminAddr: addr(4), PGBasePort: pgBase, StandbyBasePort: pgBase + len(cells),
		// One access point, one NATS server: see natsServersHere.
		NoBackupGTR: true, NATS: true, NATSAddr: "127.0.0.1:" + strconv.Itoa(natsPortRun(t)), NATSServers: 1,
		RefDataSource: filepath.Join(env.root, "config", "refdata"), CallbackAddr: addr(5),
		Env: []string{"GTR_METRICS_LISTEN=" + gtrMetrics, "OTEL_EXPORTER_OTLP_ENDPOINT="},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })
	ownLogs(p)
	payments := cellpayv1.NewPaymentsClient(dialPlatformGTR(t, p, addr(3)))
	opsTLS, err := p.ClientTLS(platform.OpsCertName)
	if err != nil {
		t.Fatal(err)
	}
	issuer := issuerproto.NewIssuerClient(dial(addr(2), opsTLS))

	// p-001's home: the table hashes on the partner. A fresh platform may
	// answer UNAVAILABLE until its directory is open: retried, bounded.
	var home string
	testutil.Eventually(t, 60*time.Second, "a first authorization answered", func() bool {
		txn, err := payments.SubmitTransaction(ctx, request("fureroute-probe", freshPAN()))
		home = txn.GetCellId()
		return err == nil && home != ""
	})

	// The home frozen, the authorization is decided by the other cell.
	proc := p.Process(home)
	thaw := freeze(t, proc, "the home cell")
	defer thaw()
	req := request("fureroute", freshPAN())
	txn, err := payments.SubmitTransaction(ctx, req)
	thaw()
	if err != nil || txn.GetStatus() != cellpayv1.TransactionStatus_APPROVED || txn.GetCellId() == home || txn.GetCellId() == "" {
		t.Fatalf("with %s frozen: %v from %q, %v; want APPROVED by the other cell", home, txn.GetStatus(), txn.GetCellId(), err)
	}
	o := original{req: req, cell: txn.GetCellId(), txn: txn}
	t.Logf("home %s; the original decided by %s", home, o.cell)

	// The home serves again (a payment of p-001 decided there) before the
	// follow-ups, so that they go to it first.
	n := 0
	testutil.Eventually(t, 60*time.Second, "the home "+home+" deciding again", func() bool {
		n++
		txn, err := payments.SubmitTransaction(ctx, request(fmt.Sprintf("fureroute-back-%d", n), freshPAN()))
		return err == nil && txn.GetCellId() == home
	})
	located := func() (first, owner, fanout float64) {
		text := testutil.Scrape(t, gtrMetrics)
		at := func(how string) float64 {
			return sumMetric(text, "cellpay_gtr_locates_total", `op="follow_up"`, `how="`+how+`"`)
		}
		return at("first"), at("owner"), at("fanout")
	}
	first0, owner0, fanout0 := located()

	answers := &answerLog{}
	answers.add(req.GetPartnerId(), req.GetTransactionId(), txn, nil)
	captureAndRefund(t, ctx, [2]cellpayv1.PaymentsClient{payments, payments}, o, "rr", answers)

	first, owner, fanout := located()
	t.Logf("follow-ups located: first %v, owner %v, fanout %v", first-first0, owner-owner0, fanout-fanout0)
	if owner-owner0 < 1 || first != first0 {
		t.Errorf("follow-ups located by the owner %v times and at the home %v times, want at least once and never",
			owner-owner0, first-first0)
	}

	// The sums: in the original's answer, and at the issuer, each
	// follow-up applied once, for its amount.
	got, err := payments.GetTransaction(ctx, &cellpayv1.GetTransactionRequest{PartnerId: req.GetPartnerId(), TransactionId: req.GetTransactionId()})
	if err != nil {
		t.Fatal(err)
	}
	if c, r := got.GetCapturedAmount().GetMinorUnits(), got.GetRefundedAmount().GetMinorUnits(); c != 500 || r != 250 || got.GetCellId() != o.cell {
		t.Errorf("the original read back from %s: captured %d, refunded %d; want 500 and 250 from %s", got.GetCellId(), c, r, o.cell)
	}
	refs := make([]*issuerproto.TransactionRef, 0, len(answers.all))
	for _, a := range answers.all[1:] { // the follow-ups
		refs = append(refs, &issuerproto.TransactionRef{PartnerId: a.PartnerID, TransactionId: a.ID})
	}
	effs, err := issuer.Effects(ctx, &issuerproto.EffectsRequest{Transactions: refs})
	if err != nil {
		t.Fatal(err)
	}
	var sums [2]int64
	for _, e := range effs.GetEffects() {
		if e.GetEffects() != 1 || !e.GetApproved() || e.GetOriginalTransactionId() != req.GetTransactionId() {
			t.Errorf("issuer: %s applied %d times, approved %v, of %q", e.GetTransactionId(), e.GetEffects(), e.GetApproved(), e.GetOriginalTransactionId())
		}
		switch e.GetKind() {
		case issuerproto.AdjustKind_ADJUST_KIND_CAPTURE:
			sums[0] += e.GetAmountMinorUnits()
		case issuerproto.AdjustKind_ADJUST_KIND_REFUND:
			sums[1] += e.GetAmountMinorUnits()
		}
	}
	if len(effs.GetEffects()) != 4 || sums != [2]int64{500, 250} {
		t.Errorf("issuer: %d effects, captured and refunded %v; want 4 and [500 250]", len(effs.GetEffects()), sums)
	}

	// The checker over this platform: every answer, the authorization's
	// included, equal to its cell's record and the issuer's effect, to
	// the minor unit.
	target := faultTarget{p: p, payments: payments, issuer: issuer, cells: cells}
	report, err := checker.Check(ctx, target.checkerConfig(), answers.all)
	if err != nil {
		t.Fatal(err)
	}
	if !report.OK() || report.AmountMismatches != 0 {
		t.Fatalf("invariants broken:\n%s", report.String())
	}
}
