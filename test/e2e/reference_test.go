package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/operators"
	"github.com/cellpay/cellpay/pkg/api/apierr"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// TestReferenceFoundOnEveryReplica: a partner's call refused by the backup
// access point (a transaction ID reused with another amount) is found by
// the reference its error quotes through the primary's admin API (gtrctl
// ref), which asks every replica over NATS: the replica that refused it,
// the partner, the transaction, the reason; an unknown reference is not
// found, naming the replicas searched.
func TestReferenceFoundOnEveryReplica(t *testing.T) {
	ctx := ctxFor(t, 60*time.Second)
	backup := cellpayv1.NewPaymentsClient(dialGTR(env.backupAddr))
	req := request("reference", freshPAN())
	if _, err := backup.SubmitTransaction(ctx, req); err != nil {
		t.Fatal(err)
	}
	req.Amount.MinorUnits++
	_, err := backup.SubmitTransaction(ctx, req)
	ref := apierr.RequestIDOf(err)
	if err == nil || ref == "" {
		t.Fatalf("the reused ID with another amount: %v, want a refusal with a reference", err)
	}
	cfg := env.p.Config()
	var found struct {
		Refusals []struct {
			Replica       string `json:"replica"`
			RequestID     string `json:"requestId"`
			PartnerID     string `json:"partnerId"`
			TransactionID string `json:"transactionId"`
			Reason        string `json:"reason"`
		} `json:"refusals"`
		Replicas []string `json:"replicas"`
	}
	var out string
	testutil.Eventually(t, 20*time.Second, "gtrctl ref through the primary, both replicas answering", func() bool {
		code, o, _ := gtrctlAt(t, cfg.AdminAddr, operators.RoleViewer, "ref", ref, "-o", "json")
		out = o
		return code == 0 && json.Unmarshal([]byte(o), &found) == nil && len(found.Replicas) >= 2
	})
	if len(found.Refusals) != 1 {
		t.Fatalf("%s", out)
	}
	r := found.Refusals[0]
	if r.RequestID != ref || r.PartnerID != req.GetPartnerId() || r.TransactionID != req.GetTransactionId() ||
		r.Reason != string(apierr.ReasonOf(err)) || r.Replica != platform.GTRBackup {
		t.Fatalf("found %+v, want %s's refusal of %s/%s (%s): %s", r, platform.GTRBackup, req.GetPartnerId(), req.GetTransactionId(), apierr.ReasonOf(err), out)
	}
	code, _, errOut := gtrctlAt(t, cfg.AdminAddr, operators.RoleViewer, "ref", "0000000000000000")
	if code == 0 || !strings.Contains(errOut, "no refusal under reference 0000000000000000") {
		t.Fatalf("an unknown reference: exit %d, %s", code, errOut)
	}
}

// TestCellsSeenByEveryReplica: gtrctl cells through either access point
// shows each cell as every GTR replica's own health monitor judges it,
// each replica naming its site.
func TestCellsSeenByEveryReplica(t *testing.T) {
	cfg := env.p.Config()
	for _, addr := range []string{cfg.AdminAddr, cfg.BackupAdminAddr} {
		var out string
		testutil.Eventually(t, 20*time.Second, "every cell seen up by both replicas through "+addr, func() bool {
			code, o, _ := gtrctlAt(t, addr, operators.RoleViewer, "cells", "-o", "json")
			out = o
			var resp struct {
				Cells []struct {
					ID       string `json:"id"`
					Replicas []struct {
						Replica     string `json:"replica"`
						Site        string `json:"site"`
						HealthShare int    `json:"healthShare"`
					} `json:"replicas"`
				} `json:"cells"`
			}
			if code != 0 || json.Unmarshal([]byte(o), &resp) != nil || len(resp.Cells) == 0 {
				return false
			}
			for _, c := range resp.Cells {
				seen := map[string]bool{}
				for _, r := range c.Replicas {
					// Each replica names its access point's site (-site).
					seen[r.Replica] = r.HealthShare > 0 && r.Site == platform.Site
				}
				if len(seen) != 2 || !seen[platform.GTR] || !seen[platform.GTRBackup] {
					return false
				}
			}
			return true
		})
		if !strings.Contains(out, platform.GTRBackup) {
			t.Fatalf("%s", out)
		}
	}
}
