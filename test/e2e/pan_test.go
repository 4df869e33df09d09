package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// TestNoFullPANStoredOrLogged sends transactions with card numbers used
// nowhere else, including ones that fail and are declined, then scans every
// log file and every table of every cell's database for them.
func TestNoFullPANStoredOrLogged(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	var pans []string
	for i := range 12 {
		pans = append(pans, luhnPAN(fmt.Sprintf("5%014d", 31337000+i)))
	}
	for i, pan := range pans {
		r := request(fmt.Sprintf("pan-%d", i), pan)
		r.PartnerId = fmt.Sprintf("p-%03d", i+1) // spread over the cells
		switch i % 4 {
		case 1:
			r.Amount.MinorUnits = 10_000_000 // over the amount limit: declined by the cell
		case 2:
			r.Card.ExpiryYear = 2020 // rejected by validation
		case 3:
			r.PaymentType = cellpayv1.PaymentType_CARD_REFUND
		}
		_, _ = env.payments.SubmitTransaction(ctx, r)
	}
	time.Sleep(200 * time.Millisecond) // let the children flush their logs

	logs, err := filepath.Glob(filepath.Join(env.p.LogDir(), "*"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no logs to scan in %s: %v", env.p.LogDir(), err)
	}
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, pan := range append(pans, approvedPAN) {
			if strings.Contains(string(b), pan) {
				t.Errorf("log %s contains a full card number", filepath.Base(path))
			}
		}
	}
	scanned := 0
	for _, c := range env.cells {
		db := cellDB(t, ctx, c.ID)
		rows, err := db.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'`)
		if err != nil {
			t.Fatal(err)
		}
		var tables []string
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			tables = append(tables, name)
		}
		rows.Close()
		for _, table := range tables {
			rows, err := db.Query(ctx, fmt.Sprintf(`SELECT t::text FROM %q t`, table))
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var row string
				if err := rows.Scan(&row); err != nil {
					t.Fatal(err)
				}
				scanned++
				for _, pan := range append(pans, approvedPAN) {
					if strings.Contains(row, pan) {
						t.Errorf("cell %s table %s holds a full card number", c.ID, table)
					}
				}
				if strings.Contains(row, card.Mask(pans[0])) {
					scanned += 0 // masked numbers are expected
				}
			}
			rows.Close()
		}
	}
	if scanned < len(pans)/2 {
		t.Fatalf("scanned only %d rows: the scan would not have caught anything", scanned)
	}
}

// luhnPAN appends the Luhn check digit to body.
func luhnPAN(body string) string { return body + string(card.CheckDigit(body)) }
