package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/operators"
)

// TestTxnGet: a transaction fails over between cells (its home frozen
// as the GTR sends it: the attempt timer fires, the next cell approves it
// as attempt 2), and an operator finds it with gtrctl txn get through
// either access point: the record that decided it, on the cell that did,
// with its attempt and its callback; the home holds nothing past its PNR,
// at most its stepped-back attempt 1, and the GTR logged that re-route.
func TestTxnGet(t *testing.T) {
	ctx := ctxFor(t, 90*time.Second)
	home := partnerHome(t, ctx, "txnget-probe")
	req := request("txnget", freshPAN())
	proc := env.p.Process(home)
	thaw := freeze(t, proc, "the home cell")
	defer thaw()
	txn, err := env.payments.SubmitTransaction(ctx, req)
	thaw()
	if err != nil || txn.GetCellId() == home || txn.GetCellId() == "" {
		t.Fatalf("with %s frozen: %v from %q, want an answer from another cell", home, err, txn.GetCellId())
	}
	decided := txn.GetCellId()

	cfg := env.p.Config()
	for _, ap := range []struct{ name, addr string }{{"primary", cfg.AdminAddr}, {"backup", cfg.BackupAdminAddr}} {
		var found struct {
			PartnerID     string `json:"partnerId"`
			TransactionID string `json:"transactionId"`
			Cells         []struct {
				CellID string `json:"cellId"`
				Error  string `json:"error"`
				Record struct {
					Found     bool   `json:"found"`
					State     string `json:"state"`
					Attempt   int    `json:"attempt"`
					MaskedPan string `json:"maskedPan"`
					Callbacks []struct {
						EventID string `json:"eventId"`
					} `json:"callbacks"`
				} `json:"record"`
			} `json:"cells"`
		}
		// The home answers once the GTR reaches it again after the thaw.
		var out string
		testutil.Eventually(t, 20*time.Second, "gtrctl txn get through the "+ap.name+" access point, every cell answering", func() bool {
			code, o, _ := gtrctlAt(t, ap.addr, operators.RoleViewer, "txn", "get", req.GetPartnerId(), req.GetTransactionId(), "-o", "json")
			out = o
			if code != 0 || json.Unmarshal([]byte(o), &found) != nil {
				return false
			}
			for _, c := range found.Cells {
				if c.Error != "" {
					return false
				}
			}
			return true
		})
		if found.PartnerID != req.GetPartnerId() || found.TransactionID != req.GetTransactionId() || len(found.Cells) < 2 {
			t.Fatalf("%s: %s", ap.name, out)
		}
		for _, c := range found.Cells {
			r := c.Record
			switch {
			case c.CellID == decided:
				if !r.Found || r.State != "approved" || r.Attempt < 2 || r.MaskedPan == "" || len(r.Callbacks) != 1 {
					t.Errorf("%s: %s's record %+v, want approved by attempt 2 or later, its masked card and its callback", ap.name, decided, r)
				}
			case r.Found && r.State != "abandoned" && r.State != "received":
				t.Errorf("%s: %s holds it %s, want nothing past its PNR there", ap.name, c.CellID, r.State)
			case r.Found && c.CellID == home && r.Attempt != 1:
				t.Errorf("%s: the home %s holds it as attempt %d, want its stepped-back attempt 1", ap.name, home, r.Attempt)
			}
			if c.CellID == home && r.Found {
				t.Logf("%s: the home %s holds the stepped-back attempt %d, %s", ap.name, home, r.Attempt, r.State)
			}
		}
	}
	// The history has the step back: the GTR logged attempt 1's re-route
	// off the frozen home, before its point of no return, for this
	// transaction (whether the home, thawed, wrote a record of it too
	// depends on when it read the request: checked above when it did).
	testutil.Eventually(t, 5*time.Second, "the GTR's log of the re-route off "+home, func() bool {
		return reroutedIn(t, req.GetTransactionId(), home)
	})
	// The plain view names the cell and the attempt.
	code, out, errs := gtrctlAt(t, cfg.AdminAddr, operators.RoleViewer, "txn", "get", req.GetPartnerId(), req.GetTransactionId())
	if code != 0 || !containsAll(out, decided, "approved", "callbacks:") {
		t.Fatalf("gtrctl txn get: %d\n%s%s", code, out, errs)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// reroutedIn reports whether a GTR's log (gtr.log, or a replica's
// gtr-*.log) has the re-route of the transaction txnID off cell at its
// first attempt.
func reroutedIn(t *testing.T, txnID, cell string) bool {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(env.p.LogDir(), "gtr*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("the GTRs' logs in %s: %v", env.p.LogDir(), err)
	}
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			if !bytes.Contains(line, []byte(txnID)) {
				continue
			}
			var l struct {
				Msg           string `json:"msg"`
				TransactionID string `json:"transaction_id"`
				Cell          string `json:"cell"`
				Attempt       int    `json:"attempt"`
				Reason        string `json:"reason"`
			}
			if json.Unmarshal(line, &l) == nil && l.Msg == "re-routing before the point of no return" &&
				l.TransactionID == txnID && l.Cell == cell && l.Attempt == 1 && l.Reason != "" {
				return true
			}
		}
	}
	return false
}
