package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/operators"
)

// TestTxnGet: a transaction fails over between cells (its home frozen
// as the GTR sends it: the attempt timer fires, the next cell approves it
// as attempt 2), and an operator finds it with gtrctl txn get through
// either access point: the record that decided it, on the cell that did,
// with its attempt and its callback; the home holds nothing past its PNR.
func TestTxnGet(t *testing.T) {
	ctx := ctxFor(t, 90*time.Second)
	home := partnerHome(t, ctx, "txnget-probe")
	req := request("txnget", freshPAN())
	proc := env.p.Process(home)
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := proc.Signal(syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
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
			}
		}
	}
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
