package refdata

import (
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func sampleFile(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "config", "refdata.json")
}

func TestLoadSample(t *testing.T) {
	s, err := Load(sampleFile(t))
	if err != nil {
		t.Fatal(err)
	}
	if s.Version() == "" || s.SettlementCurrency("p-001") != "GBP" || s.SettlementCurrency("p-999") != "EUR" {
		t.Fatalf("unexpected snapshot: version %q", s.Version())
	}
	if m, ok := s.MCC("5411"); !ok || m.Risk != RiskLow {
		t.Fatalf("MCC 5411 = %+v, %v", m, ok)
	}
}

func TestConvert(t *testing.T) {
	s, err := Load(sampleFile(t))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		minor    int64
		from, to string
		want     int64
	}{
		{1000, "EUR", "EUR", 1000},
		{1000, "EUR", "GBP", 841},   // 8.412 -> 8.41
		{10000, "EUR", "GBP", 8412}, // exact
		{1000, "EUR", "JPY", 1632},  // 1632.1 yen, JPY has no minor units
		{1250, "GBP", "EUR", 1486},  // 14.8597...
		{100, "EUR", "KWD", 333},    // 0.33347 KWD = 333.47 fils
		{1, "JPY", "EUR", 1},        // 0.00612... EUR = 0.61 cent -> 1
		{841, "GBP", "USD", 1084},   // 10.8396... -> 1084
		{1_000_000, "USD", "USD", 1_000_000},
	}
	for _, c := range cases {
		got, err := s.Convert(c.minor, c.from, c.to)
		if err != nil || got != c.want {
			t.Errorf("Convert(%d %s -> %s) = %d, %v; want %d", c.minor, c.from, c.to, got, err, c.want)
		}
	}
	if _, err := s.Convert(100, "EUR", "BRL"); !errors.Is(err, ErrNoRate) {
		t.Errorf("missing rate: err = %v, want ErrNoRate", err)
	}
}

func TestRoundHalfEven(t *testing.T) {
	cases := []struct {
		num, den int64
		want     int64
	}{
		{5, 2, 2}, {7, 2, 4}, {-5, 2, -2}, {-7, 2, -4}, {1, 3, 0}, {2, 3, 1}, {-2, 3, -1}, {4, 1, 4}, {0, 1, 0},
	}
	for _, c := range cases {
		if got := RoundHalfEven(big.NewRat(c.num, c.den)); got.Int64() != c.want {
			t.Errorf("RoundHalfEven(%d/%d) = %v, want %d", c.num, c.den, got, c.want)
		}
	}
}

// TestConvertProperty checks Convert against an independent computation on
// scaled integers: with rates of at most 6 decimals, amount * rt * 10^et *
// 10^6 / (rf * 10^ef * 10^6) is rounded half to even by integer division.
func TestConvertProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rfMicro := rapid.Int64Range(1, 1_000_000_000).Draw(t, "rf")
		rtMicro := rapid.Int64Range(1, 1_000_000_000).Draw(t, "rt")
		minor := rapid.Int64Range(1, 1_000_000_000_000).Draw(t, "minor")
		s, err := FromFile(File{
			Version: "p", BaseCurrency: "EUR", DefaultSettlementCurrency: "EUR",
			FXRates: map[string]string{"EUR": "1", "GBP": micro(rfMicro), "JPY": micro(rtMicro)},
		})
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Convert(minor, "GBP", "JPY") // exponents 2 -> 0
		if err != nil {
			t.Fatal(err)
		}
		num := new(big.Int).Mul(big.NewInt(minor), big.NewInt(rtMicro))
		den := new(big.Int).Mul(big.NewInt(rfMicro), big.NewInt(100))
		q, r := new(big.Int).QuoRem(num, den, new(big.Int))
		r2 := new(big.Int).Lsh(r, 1)
		if c := r2.Cmp(den); c > 0 || c == 0 && q.Bit(0) == 1 {
			q.Add(q, big.NewInt(1))
		}
		if !q.IsInt64() {
			return
		}
		if got != q.Int64() {
			t.Fatalf("Convert(%d) = %d, want %d", minor, got, q.Int64())
		}
	})
}

func micro(v int64) string {
	return new(big.Rat).SetFrac64(v, 1_000_000).FloatString(6)
}

func TestParseRefusesWhole(t *testing.T) {
	b, err := os.ReadFile(sampleFile(t))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct{ from, to, want string }{
		"bad rate":      {`"GBP": "0.8412"`, `"GBP": "-1"`, "fx_rates.GBP"},
		"bad currency":  {`"GBP": "0.8412"`, `"GBX": "0.8412"`, `"GBX"`},
		"bad risk":      {`"risk": "high"`, `"risk": "extreme"`, "risk"},
		"unknown field": {`"version"`, `"versio"`, "unknown field"},
		"partner rate":  {`"p-005": "CHF"`, `"p-005": "BRL"`, "partners.p-005"},
		"mcc digits":    {`"5999"`, `"59x9"`, "four digits"},
		"not json":      {`{`, `[`, "parse"},
	}
	for name, c := range cases {
		bad := strings.Replace(string(b), c.from, c.to, 1)
		if bad == string(b) {
			t.Fatalf("%s: mutation did not apply", name)
		}
		if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, c.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"version":"1","base_currency":"EUR","default_settlement_currency":"EUR","fx_rates":{"EUR":"1"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err == nil && s.Version() == "" {
			t.Fatal("accepted a snapshot without a version")
		}
	})
}
