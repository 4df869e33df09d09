package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// TestTelemetryScrape runs a platform of its own (one cell, the issuer, the
// GTR) with every process's metrics listener set through the environment
// (one cell, so one CELL_METRICS_LISTEN), sends transactions with card
// numbers, and scrapes /metrics: the GTR counts them by outcome, the cell
// by final state with its ID as a label, and no full card number appears in
// any process's metrics. The cell's check of the issuer's record (every
// second here) finds every effect recorded, then, once a row is deleted
// from its database (a commit lost, as with a site), records it again
// from the issuer's record, which the partner then reads.
func TestTelemetryScrape(t *testing.T) {
	ctx := ctxFor(t, 60*time.Second)
	dir := platformDir(t, "cellpay-telemetry-")
	ports, err := testutil.FreePorts(7)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	cell := platform.CellSpec{ID: "cell-m", Addr: addr(0)}
	gtrMetrics, cellMetrics, issuerMetrics := addr(4), addr(5), addr(6)
	gtrConfig := filepath.Join(dir, "gtr.yaml")
	table := fmt.Sprintf("version: 1\ncells:\n  - {id: %s, addr: %q, pool: main}\nrules:\n  - {name: everything, pool: main, hash_on: partner}\n", cell.ID, cell.Addr)
	if err := os.WriteFile(gtrConfig, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	pgBase, err := testutil.FreePortRun(2 * 1) // primaries, then standbys
	if err != nil {
		t.Fatal(err)
	}
	p, err := platform.Start(ctx, platform.Config{
		NoFsync:         true, // tests: see platform.Config.NoFsync
		BinDir:          env.bin,
		DataDir:         filepath.Join(dir, "data"),
		GTRConfig:       gtrConfig,
		RefData:         filepath.Join(env.root, "config", "refdata.json"),
		Cells:           []platform.CellSpec{cell},
		IssuerAddr:      addr(1),
		GTRAddr:         addr(2),
		AdminAddr:       addr(3),
		PGBasePort:      pgBase,
		StandbyBasePort: pgBase + 1,
		// One access point: these tests look at one GTR.
		NoBackupGTR: true,
		Env: []string{
			"GTR_METRICS_LISTEN=" + gtrMetrics,
			"CELL_METRICS_LISTEN=" + cellMetrics,
			"ISSUERSIM_METRICS_LISTEN=" + issuerMetrics,
			// Checks every second, each over the last 10 minutes: the row
			// deleted below is of an effect older than two seconds.
			"CELL_ISSUER_CHECK_EVERY=1s", "CELL_ISSUER_CHECK_LOOKBACK=10m",
			"OTEL_EXPORTER_OTLP_ENDPOINT=", // no collector: the no-op tracer
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })
	payments := cellpayv1.NewPaymentsClient(dialPlatformGTR(t, p, addr(2)))

	const n = 5
	pans := []string{approvedPAN}
	for i := range n - 1 {
		pans = append(pans, luhnPAN(fmt.Sprintf("5%014d", 42424200+i)))
	}
	var (
		first    string // the first transaction's ID
		firstReq *cellpayv1.SubmitTransactionRequest
		firstTxn *cellpayv1.Transaction
	)
	for i, pan := range pans {
		req := request(fmt.Sprintf("telemetry-%d", i), pan)
		txn, err := payments.SubmitTransaction(ctx, req)
		// A fresh cell whose transaction directory is not open yet
		// re-routes (UNAVAILABLE, retry unchanged): the partner retries,
		// bounded (seen once under make test's load).
		for try := 0; status.Code(err) == codes.Unavailable && try < 20; try++ {
			time.Sleep(250 * time.Millisecond)
			txn, err = payments.SubmitTransaction(ctx, req)
		}
		if i == 0 {
			first, firstReq, firstTxn = txn.GetTransactionId(), req, txn
		}
		if err != nil {
			t.Fatalf("transaction %d: %v", i, err)
		}
		if txn.GetCellId() != cell.ID {
			t.Fatalf("transaction %d on %q", i, txn.GetCellId())
		}
	}

	gtr := testutil.Scrape(t, gtrMetrics)
	if got := sumMetric(gtr, "cellpay_gtr_transactions_total", `code="OK"`); got != n {
		t.Errorf("cellpay_gtr_transactions_total{code=OK} = %v, want %d\n%s", got, n, grep(gtr, "cellpay_gtr_"))
	}
	if got := sumMetric(gtr, "cellpay_gtr_cell_health_share", `cell="cell-m"`); got != 100 {
		t.Errorf("cellpay_gtr_cell_health_share{cell-m} = %v\n%s", got, grep(gtr, "cellpay_gtr_"))
	}
	if !strings.Contains(gtr, `service_name="gtr"`) || !strings.Contains(gtr, "rpc_server_") || !strings.Contains(gtr, "rpc_client_") {
		t.Errorf("GTR metrics lack the service label or gRPC metrics:\n%s", gtr)
	}

	cellText := testutil.Scrape(t, cellMetrics)
	if got := sumMetric(cellText, "cellpay_cell_transactions_total", `cell="cell-m"`); got != n {
		t.Errorf("cellpay_cell_transactions_total = %v, want %d\n%s", got, n, grep(cellText, "cellpay_"))
	}
	if got := sumMetric(cellText, "cellpay_cell_pnr_total", `result="confirmed"`); got != n {
		t.Errorf("cellpay_cell_pnr_total{confirmed} = %v, want %d", got, n)
	}
	if got := sumMetric(cellText, "cellpay_cell_issuer_duration_seconds_count", `method="authorize"`); got != n {
		t.Errorf("issuer calls = %v, want %d", got, n)
	}
	if got := sumMetric(cellText, "cellpay_refdata_serving", `cell="cell-m"`); got != 1 {
		t.Errorf("cellpay_refdata_serving = %v\n%s", got, grep(cellText, "cellpay_refdata_"))
	}

	// The issuer check: a check after the last answer finds nothing
	// missing; with the first transaction's row gone from the database,
	// it finds that one.
	answered := float64(time.Now().Unix())
	checked := func(missing float64) func() bool {
		return func() bool {
			text := testutil.Scrape(t, cellMetrics)
			return sumMetric(text, "cellpay_cell_issuer_check_timestamp_seconds") > answered &&
				sumMetric(text, "cellpay_cell_issuer_discrepancies", `kind="missing"`) == missing &&
				sumMetric(text, "cellpay_cell_issuer_discrepancies", `kind="differs"`) == 0
		}
	}
	testutil.Eventually(t, 20*time.Second, "a check of the issuer's record finding every effect recorded", checked(0))
	db, err := pgx.Connect(ctx, p.Postgres(cell.ID).URL("cellpay"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	if tag, err := db.Exec(ctx, "DELETE FROM transactions WHERE transaction_id = $1", first); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("deleting %s: %v, %v", first, tag, err)
	}
	// The check records it again from the issuer's record (no card data,
	// no fingerprint), and the next finds nothing missing; the partner
	// reads the answer it was given, and a replay gets it too.
	testutil.Eventually(t, 20*time.Second, "the deleted transaction recorded again from the issuer's record", func() bool {
		var state, auth, keyID string
		err := db.QueryRow(ctx, "SELECT state, auth_code, fingerprint_key_id FROM transactions WHERE transaction_id = $1", first).Scan(&state, &auth, &keyID)
		return err == nil && state == "approved" && auth == firstTxn.GetAuthCode() && keyID == "recovered"
	})
	answered = float64(time.Now().Unix())
	testutil.Eventually(t, 20*time.Second, "a check of the issuer's record finding nothing missing after the recovery", checked(0))
	got, err := payments.GetTransaction(ctx, &cellpayv1.GetTransactionRequest{PartnerId: firstReq.GetPartnerId(), TransactionId: first})
	if err != nil || got.GetStatus() != cellpayv1.TransactionStatus_APPROVED || got.GetAuthCode() != firstTxn.GetAuthCode() {
		t.Fatalf("reading the recovered transaction: %v, %v; answered %v", got, err, firstTxn)
	}
	if again, err := payments.SubmitTransaction(ctx, firstReq); err != nil || again.GetAuthCode() != firstTxn.GetAuthCode() {
		t.Fatalf("replaying the recovered transaction: %v, %v", again, err)
	}
	firstReq.Amount.MinorUnits++
	if _, err := payments.SubmitTransaction(ctx, firstReq); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("another payload under the recovered transaction's ID: %v, want ALREADY_EXISTS", err)
	}

	issuer := testutil.Scrape(t, issuerMetrics)
	if !strings.Contains(issuer, `service_name="issuersim"`) || !strings.Contains(issuer, "rpc_server_") {
		t.Errorf("issuer simulator metrics:\n%s", issuer)
	}

	for name, text := range map[string]string{"gtr": gtr, "cell": cellText, "issuersim": issuer} {
		for _, pan := range pans {
			if strings.Contains(text, pan) {
				t.Errorf("a full card number in the %s metrics", name)
			}
		}
	}
}

// sumMetric adds the samples of name (exactly: not its _bucket or _sum)
// whose labels contain every one of labels.
func sumMetric(text, name string, labels ...string) float64 {
	var sum float64
	for line := range strings.Lines(text) {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		i := strings.LastIndexByte(rest, '}')
		if i < 0 {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(rest[:i], l)
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(rest[i+1:]), 64); match && err == nil {
			sum += v
		}
	}
	return sum
}

// grep keeps the lines of text that start with prefix.
func grep(text, prefix string) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, prefix) {
			b.WriteString(line)
		}
	}
	return b.String()
}
