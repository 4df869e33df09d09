package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// TestRefdataOverNATS runs the replicator, a nats-server process and three
// cells as real processes: a snapshot reaches every cell, republishing it
// creates no version, an FX update changes the next settlement amount
// exactly, a malformed version is refused by every cell, and with NATS
// killed the cells approve on their last version, also after a restart from
// their own Postgres.
func TestRefdataOverNATS(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	e := startRefEnv(t, ctx, 3)
	source := filepath.Join(env.root, "config", "refdata")

	// A snapshot reaches every cell, and each reports it.
	if res := e.publish(ctx, "snapshot", "-source", source); res.Version != 1 || res.Unchanged {
		t.Fatalf("first snapshot: %+v", res)
	}
	e.waitCells(ctx, "version 1", func(s refdata.Status) bool { return s.Version == 1 && s.Source == "nats" })
	out, err := e.replicator(ctx, "status", "-json", "-wait", "1500ms")
	if err != nil {
		t.Fatal(err)
	}
	var status struct {
		Latest uint64                    `json:"latest"`
		Cells  map[string]refdata.Status `json:"cells"`
	}
	if err := json.Unmarshal(out, &status); err != nil || status.Latest != 1 || len(status.Cells) != 3 {
		t.Fatalf("replicator status: %s (%v)", out, err)
	}

	// Republishing the same snapshot creates no version.
	if res := e.publish(ctx, "snapshot", "-source", source); res.Version != 1 || !res.Unchanged {
		t.Fatalf("republished snapshot: %+v", res)
	}
	if n := e.streamMsgs(ctx); n != 1 {
		t.Fatalf("stream holds %d messages after a republish, want 1", n)
	}

	// p-002 settles in USD: 12.50 GBP converts with the rates of the
	// version the transaction used.
	v1 := sampleSnapshot(t, source, 1)
	first := submit(t, ctx, e, "rd-v1", "p-002", "5411")
	checkSettlement(t, first, v1, "1")

	res := e.publish(ctx, "update", "-rate", "USD=1.2345")
	if res.Version != 2 {
		t.Fatalf("update: %+v", res)
	}
	v2, err := v1.Apply(2, refdata.Update{FXRates: map[string]string{"USD": "1.2345"}})
	if err != nil {
		t.Fatal(err)
	}
	e.waitCells(ctx, "version 2", func(s refdata.Status) bool { return s.Version == 2 })
	second := submit(t, ctx, e, "rd-v2", "p-002", "5411")
	checkSettlement(t, second, v2, "2")
	if second.GetSettlementAmount().GetMinorUnits() == first.GetSettlementAmount().GetMinorUnits() {
		t.Fatal("the update did not change the settlement amount")
	}
	// The owning cell recorded the version it used.
	db := refCellDB(t, ctx, e, second.GetCellId())
	var recorded string
	var amount int64
	if err := db.QueryRow(ctx, `SELECT refdata_version, settlement_amount FROM transactions WHERE partner_id = $1 AND transaction_id = $2`,
		second.GetPartnerId(), second.GetTransactionId()).Scan(&recorded, &amount); err != nil || recorded != "2" || amount != second.GetSettlementAmount().GetMinorUnits() {
		t.Fatalf("recorded version %q amount %d (%v)", recorded, amount, err)
	}

	// A blocked category is declined by the cell.
	if got := submit(t, ctx, e, "rd-blocked", "p-002", "7995"); got.GetStatus() != cellpayv1.TransactionStatus_DECLINED || got.GetDeclineReason() != "blocked_category" {
		t.Fatalf("blocked category: %v", got)
	}

	// A malformed file: the replicator refuses it; published anyway
	// (-unchecked), every cell refuses it whole and keeps version 2.
	bad := v2.File()
	bad.FXRates["GBP"] = "-0.84"
	bad.MCC["5999"] = refdata.MCC{Category: "miscellaneous_retail", Risk: "extreme"}
	badFile := filepath.Join(e.dir, "bad.json")
	b, _ := json.Marshal(bad)
	if err := os.WriteFile(badFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.replicator(ctx, "snapshot", "-source", badFile); err == nil {
		t.Fatal("the replicator published a malformed file")
	}
	if res := e.publish(ctx, "snapshot", "-source", badFile, "-unchecked"); res.Version != 3 {
		t.Fatalf("unchecked publish: %+v", res)
	}
	e.waitCells(ctx, "the refusal of version 3", func(s refdata.Status) bool { return s.Refused >= 1 && s.Version == 2 })
	checkSettlement(t, submit(t, ctx, e, "rd-after-bad", "p-002", "5411"), v2, "2")

	// NATS down: every cell keeps approving on version 2. For the first
	// second of the outage a natural home cannot tell it from a slow
	// claim, and answers UNAVAILABLE (docs/design/transaction-directory.md):
	// the partner retries, as that answer asks.
	e.killNATS()
	for _, p := range []string{"p-001", "p-002", "p-003", "p-004", "p-005", "p-006"} {
		got := submitRetrying(t, ctx, e, "rd-nonats-"+p, p, "5411")
		if got.GetStatus() != cellpayv1.TransactionStatus_APPROVED || got.GetRefdataVersion() != "2" {
			t.Fatalf("without NATS, %s: %v", p, got)
		}
	}

	// Restart the cell that owns p-002 while NATS is down: it serves
	// version 2 from its own Postgres.
	owner := second.GetCellId()
	if err := e.p.Process(owner).Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// Until the GTR takes the owner back, p-002 goes elsewhere, and with
	// NATS down no other cell may take it (it cannot claim it in the
	// transaction directory): UNAVAILABLE, retry later, is the answer.
	for i := 0; ; i++ {
		req := request("rd-restarted-"+strconv.Itoa(i), approvedPAN)
		req.PartnerId, req.Merchant.Mcc = "p-002", "5411"
		got, err := e.payments.SubmitTransaction(ctx, req)
		switch {
		case err == nil && got.GetCellId() == owner:
			checkSettlement(t, got, v2, "2")
		case err != nil && grpcstatus.Code(err) != codes.Unavailable:
			t.Fatalf("p-002 while %s comes back: %v", owner, err)
		}
		if err == nil && got.GetCellId() == owner {
			break
		}
		if i == 40 {
			t.Fatalf("p-002 never came back to %s: last %v, %v", owner, got.GetCellId(), err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func sampleSnapshot(t *testing.T, source string, version uint64) *refdata.Snapshot {
	t.Helper()
	f, err := refdata.ReadSource(source)
	if err != nil {
		t.Fatal(err)
	}
	f.Version = version
	s, err := refdata.FromFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func submit(t *testing.T, ctx context.Context, e *refEnv, suffix, partner, mcc string) *cellpayv1.Transaction {
	t.Helper()
	req := request(suffix, approvedPAN)
	req.PartnerId = partner
	req.Merchant.Mcc = mcc
	got, err := e.payments.SubmitTransaction(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", suffix, err)
	}
	return got
}

// submitRetrying is submit by a partner who retries UNAVAILABLE under the
// same ID, every 250 ms for up to 5 s.
func submitRetrying(t *testing.T, ctx context.Context, e *refEnv, suffix, partner, mcc string) *cellpayv1.Transaction {
	t.Helper()
	req := request(suffix, approvedPAN)
	req.PartnerId = partner
	req.Merchant.Mcc = mcc
	for i := 0; ; i++ {
		got, err := e.payments.SubmitTransaction(ctx, req)
		switch {
		case err == nil:
			return got
		case grpcstatus.Code(err) != codes.Unavailable || i == 20:
			t.Fatalf("%s: %v (try %d)", suffix, err, i+1)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkSettlement checks an approved GBP 12.50 transaction against the
// conversion of the version it says it used.
func checkSettlement(t *testing.T, got *cellpayv1.Transaction, ref *refdata.Snapshot, version string) {
	t.Helper()
	cur := ref.SettlementCurrency("p-002")
	want, err := ref.Convert(1250, "GBP", cur)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetStatus() != cellpayv1.TransactionStatus_APPROVED || got.GetRefdataVersion() != version ||
		got.GetSettlementAmount().GetMinorUnits() != want || got.GetSettlementAmount().GetCurrency() != cur {
		t.Fatalf("want approved, version %s, settlement %d %s; got %v", version, want, cur, got)
	}
}
