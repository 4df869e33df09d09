package routing

import (
	"strconv"
	"testing"
)

// benchTable builds a table of nRules rules over one pool of nCells cells,
// a few of them draining, and attributes that spread over all the rules
// (about half fall through to the last, catch-all rule).
func benchTable(tb testing.TB, nRules, nCells int) (*Table, []Attrs) {
	s := Spec{Version: 1}
	for i := range nCells {
		w := 100
		if i%3 == 1 {
			w = 50
		}
		s.Cells = append(s.Cells, Cell{ID: "cell-" + strconv.Itoa(i), Addr: "10.0.0." + strconv.Itoa(i) + ":7000", Pool: "main", Weight: w})
	}
	markets := []string{"DE", "FR", "IT", "ES", "NL", "BE", "AT", "PL", "SE", "DK", "FI", "PT", "IE", "GR", "CZ", "HU", "RO", "BG", "HR", "SK"}
	for i := range nRules - 1 {
		s.Rules = append(s.Rules, Rule{
			Name:         "rule-" + strconv.Itoa(i),
			Markets:      []string{markets[i%len(markets)]},
			PaymentTypes: []string{PaymentCardAuthorization, PaymentCardRefund},
			Pool:         "main",
			HashOn:       HashField(i % 4),
		})
	}
	s.Rules = append(s.Rules, Rule{Name: "default", Pool: "main"})
	tbl, err := Compile(s)
	if err != nil {
		tb.Fatal(err)
	}
	attrs := make([]Attrs, 1024)
	for i := range attrs {
		attrs[i] = Attrs{
			TransactionID: "txn-" + strconv.Itoa(i*7919),
			PartnerID:     "partner-" + strconv.Itoa(i%37),
			Market:        markets[i%len(markets)],
			PaymentType:   paymentTypes[i%len(paymentTypes)],
			MerchantID:    "merchant-" + strconv.Itoa(i%101),
		}
	}
	return tbl, attrs
}

func BenchmarkRoute(b *testing.B) {
	for _, n := range []int{10, 3} {
		b.Run("rules=10/cells="+strconv.Itoa(n), func(b *testing.B) {
			tbl, attrs := benchTable(b, 10, n)
			dst := make([]Choice, 0, tbl.MaxPoolSize())
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_, _ = tbl.Route(&attrs[i&1023], dst)
				i++
			}
		})
	}
}

func BenchmarkExplain(b *testing.B) {
	tbl, attrs := benchTable(b, 10, 10)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_, _ = tbl.Explain(&attrs[i&1023])
		i++
	}
}

func BenchmarkCompile(b *testing.B) {
	tbl, _ := benchTable(b, 10, 10)
	s := tbl.Spec()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile(s); err != nil {
			b.Fatal(err)
		}
	}
}
