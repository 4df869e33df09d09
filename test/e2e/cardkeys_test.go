package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/internal/cardkeys"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// TestPANShortMasksAndKeyIDs sends card numbers of 12, 13, 14 and 15
// digits: each answer, and the row of the cell that decided it, shows the
// short PAN mask (at least 6 digits hidden), a replay gets the same
// answer, the row names the key IDs of the cells' ring (issue #18), and no
// log or table holds a card data master secret.
func TestPANShortMasksAndKeyIDs(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	raw, err := os.ReadFile(filepath.Join(env.p.Config().DataDir, "pan.key"))
	if err != nil {
		t.Fatal(err)
	}
	masters, err := cardkeys.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	ring, err := cardkeys.New(masters...)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{12, 13, 14, 15} {
		body := fmt.Sprintf("4%0*d", n-2, time.Now().UnixNano()%1_000_000_000)
		pan := body + string(card.CheckDigit(body))
		r := request(fmt.Sprintf("short-pan-%d", n), pan)
		got, err := env.payments.SubmitTransaction(ctx, r)
		if err != nil {
			t.Fatalf("%d digits: %v", n, err)
		}
		first, last := card.MaskShown(n)
		want := pan[:first] + strings.Repeat("*", n-first-last) + pan[n-last:]
		if got.GetMaskedPan() != want || got.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
			t.Fatalf("%d digits: %s %q, want APPROVED %q", n, got.GetStatus(), got.GetMaskedPan(), want)
		}
		again, err := env.payments.SubmitTransaction(ctx, r)
		if err != nil || again.GetAuthCode() != got.GetAuthCode() || again.GetMaskedPan() != want {
			t.Fatalf("%d digits: replay %v, %v", n, again, err)
		}
		var masked, panKey, fpKey string
		err = cellDB(t, ctx, got.GetCellId()).QueryRow(ctx, `SELECT masked_pan, pan_hash_key_id, fingerprint_key_id
			FROM transactions WHERE partner_id = $1 AND transaction_id = $2`, r.GetPartnerId(), r.GetTransactionId()).Scan(&masked, &panKey, &fpKey)
		if err != nil || masked != want || panKey != ring.PANHashKeyID() || fpKey != ring.FingerprintKeyID() {
			t.Fatalf("%d digits: row %q %q %q, %v; want %q %q %q", n, masked, panKey, fpKey, err, want, ring.PANHashKeyID(), ring.FingerprintKeyID())
		}
	}
	var secrets []string
	for _, m := range masters {
		secrets = append(secrets, fmt.Sprintf("%x", m), fmt.Sprintf("%X", m), string(m))
	}
	logs, err := filepath.Glob(filepath.Join(env.p.LogDir(), "*"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no logs to scan: %v", err)
	}
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets {
			if strings.Contains(string(b), s) {
				t.Errorf("log %s holds a card data master secret", filepath.Base(path))
			}
		}
	}
	for _, c := range env.cells {
		var hit bool
		err := cellDB(t, ctx, c.ID).QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM transactions t WHERE strpos(t::text, $1) > 0)`, secrets[0]).Scan(&hit)
		if err != nil || hit {
			t.Errorf("cell %s: a row holds a card data master secret (%v)", c.ID, err)
		}
	}
}
