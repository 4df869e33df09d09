package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
)

// TestNoFullPANStoredOrLogged sends transactions with card numbers used
// nowhere else, including ones that fail and are declined, and calls with
// wrong, malformed and misused API keys, then scans every log file and every
// table of every cell's database for the card numbers and for every API key
// (whole, or its secret half).
func TestNoFullPANStoredOrLogged(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	keys, err := env.p.PartnerKeys()
	if err != nil {
		t.Fatal(err)
	}
	var secrets []string
	for _, k := range keys {
		secrets = append(secrets, k, k[len(k)-64:])
	}
	// A wrong key of the right shape, and one partner's key used for another.
	wrong := keys["p-001"][:len(keys["p-001"])-64] + strings.Repeat("ab", 32)
	secrets = append(secrets, wrong, wrong[len(wrong)-64:])
	raw := dialRaw(t)
	for i, k := range []string{wrong, "not-a-key-" + strings.Repeat("x", 70), keys["p-002"]} {
		r := request(fmt.Sprintf("pan-key-%d", i), luhnPAN("4111111111111"+fmt.Sprintf("%02d", i)))
		md := metadata.Pairs("authorization", "Bearer "+k)
		if _, err := raw.SubmitTransaction(metadata.NewOutgoingContext(ctx, md), r); status.Code(err) != codes.Unauthenticated && status.Code(err) != codes.PermissionDenied {
			t.Errorf("call %d with a bad key: %v", i, err)
		}
	}
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
		for _, sec := range secrets {
			if strings.Contains(string(b), sec) {
				t.Errorf("log %s contains an API key", filepath.Base(path))
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
				for _, sec := range secrets {
					if strings.Contains(row, sec) {
						t.Errorf("cell %s table %s holds an API key", c.ID, table)
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

// dialRaw connects to the GTR over TLS with no API key of its own: the
// caller sets the authorization header.
func dialRaw(t *testing.T) cellpayv1.PaymentsClient {
	t.Helper()
	tlsOpt, err := client.TLS(env.p.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(env.gtrAddr, tlsOpt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return cellpayv1.NewPaymentsClient(conn)
}
