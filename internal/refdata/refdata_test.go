package refdata

import (
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
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
	if s.Version() != "0" || s.SettlementCurrency("p-001") != "GBP" || s.SettlementCurrency("p-999") != "EUR" {
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

// TestConvertProperty checks Convert against an independent computation
// with math/big rationals built from the decimal strings themselves:
// amount / 10^ef / rf * rt * 10^et, rounded half to even by comparing twice
// the remainder with the denominator. It covers every pair of the exponents
// 0 (JPY), 2 (GBP, EUR) and 3 (KWD), both directions, with rates of up to 6
// decimals on either side of 1 and amounts up to 10^12 minor units.
func TestConvertProperty(t *testing.T) {
	exps := map[string]int64{"JPY": 0, "GBP": 2, "EUR": 2, "KWD": 3}
	curs := []string{"JPY", "GBP", "EUR", "KWD"}
	rapid.Check(t, func(t *rapid.T) {
		rates := map[string]string{"EUR": "1"}
		for _, c := range []string{"JPY", "GBP", "KWD"} {
			rates[c] = micro(rapid.Int64Range(1, 1_000_000_000).Draw(t, "rate_"+c))
		}
		from := rapid.SampledFrom(curs).Draw(t, "from")
		to := rapid.SampledFrom(curs).Draw(t, "to")
		minor := rapid.Int64Range(1, 1_000_000_000_000).Draw(t, "minor")
		s, err := FromFile(File{
			Version: 1, BaseCurrency: "EUR", DefaultSettlementCurrency: "EUR",
			Currencies: map[string]Currency{"EUR": {MinorUnits: 2}, "GBP": {MinorUnits: 2}, "JPY": {MinorUnits: 0}, "KWD": {MinorUnits: 3}},
			FXRates:    rates,
		})
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Convert(minor, from, to)

		// Independent: numerator and denominator as integers.
		// value = minor * rt * 10^et / (rf * 10^ef)
		rf, _ := new(big.Rat).SetString(rates[from])
		rt, _ := new(big.Rat).SetString(rates[to])
		num := new(big.Int).Mul(big.NewInt(minor), rt.Num())
		num.Mul(num, rf.Denom())
		num.Mul(num, new(big.Int).Exp(big.NewInt(10), big.NewInt(exps[to]), nil))
		den := new(big.Int).Mul(rf.Num(), rt.Denom())
		den.Mul(den, new(big.Int).Exp(big.NewInt(10), big.NewInt(exps[from]), nil))
		q, r := new(big.Int).QuoRem(num, den, new(big.Int))
		r2 := new(big.Int).Lsh(r, 1)
		if c := r2.Cmp(den); c > 0 || c == 0 && q.Bit(0) == 1 {
			q.Add(q, big.NewInt(1))
		}
		if from == to {
			q = big.NewInt(minor)
		}
		if !q.IsInt64() {
			if err == nil {
				t.Fatalf("Convert(%d %s -> %s) = %d, want an overflow error", minor, from, to, got)
			}
			return
		}
		if err != nil || got != q.Int64() {
			t.Fatalf("Convert(%d %s -> %s) = %d, %v; want %d", minor, from, to, got, err, q.Int64())
		}
		// Rounding is to the nearest: the error is at most half a minor unit.
		exact := new(big.Rat).SetFrac(num, den)
		diff := new(big.Rat).Sub(exact, new(big.Rat).SetInt64(got))
		if from != to && diff.Abs(diff).Cmp(big.NewRat(1, 2)) > 0 {
			t.Fatalf("Convert(%d %s -> %s) = %d is more than half a unit from %s", minor, from, to, got, exact.FloatString(6))
		}
	})
}

// TestConvertTies pins half-to-even on exact ties in each exponent pair.
func TestConvertTies(t *testing.T) {
	s, err := FromFile(File{
		Version: 1, BaseCurrency: "EUR", DefaultSettlementCurrency: "EUR",
		Currencies: map[string]Currency{"EUR": {MinorUnits: 2}, "JPY": {MinorUnits: 0}, "KWD": {MinorUnits: 3}, "USD": {MinorUnits: 2}},
		FXRates:    map[string]string{"EUR": "1", "JPY": "100", "KWD": "0.5", "USD": "0.5"},
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		minor    int64
		from, to string
		want     int64
	}{
		{1, "EUR", "USD", 0},     // 0.5 cent -> 0 (even)
		{3, "EUR", "USD", 2},     // 1.5 -> 2
		{5, "EUR", "USD", 2},     // 2.5 -> 2
		{250, "JPY", "EUR", 250}, // 2.50 EUR exactly
		{1, "JPY", "EUR", 1},     // 0.01 EUR
		{1, "KWD", "JPY", 0},     // 0.001 KWD = 0.2 JPY -> 0
		{5, "KWD", "JPY", 1},     // 1.0 JPY
		{25, "KWD", "JPY", 5},    // 5.0
		{1, "EUR", "KWD", 5},     // 0.01 EUR = 0.005 KWD = 5 fils
		{5, "JPY", "USD", 2},     // 0.05 EUR = 0.025 USD = 2.5 cents -> 2
		{7, "JPY", "USD", 4},     // 3.5 cents -> 4
	}
	for _, c := range cases {
		got, err := s.Convert(c.minor, c.from, c.to)
		if err != nil || got != c.want {
			t.Errorf("Convert(%d %s -> %s) = %d, %v; want %d", c.minor, c.from, c.to, got, err, c.want)
		}
	}
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
		"text version":  {`"version": 0`, `"version": "2026-11-29.1"`, "version"},
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
	f.Add([]byte(`{"version":1,"base_currency":"EUR","default_settlement_currency":"EUR","fx_rates":{"EUR":"1"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err == nil && s.Version() != strconv.FormatUint(s.Seq(), 10) {
			t.Fatalf("version %q does not render seq %d", s.Version(), s.Seq())
		}
	})
}

func sampleDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "config", "refdata")
}

func TestSampleSource(t *testing.T) {
	f, err := ReadSource(sampleDir())
	if err != nil {
		t.Fatal(err)
	}
	f.Version = 7
	s, err := FromFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if s.Version() != "7" || len(f.MCC) < 250 || len(f.Currencies) < 20 {
		t.Fatalf("sample: version %s, %d MCCs, %d currencies", s.Version(), len(f.MCC), len(f.Currencies))
	}
	for cur, want := range map[string]int{"EUR": 2, "JPY": 0, "KWD": 3, "BHD": 3, "ISK": 0} {
		if e, ok := s.Exponent(cur); !ok || e != want {
			t.Errorf("exponent %s = %d, %v; want %d", cur, e, ok, want)
		}
	}
	if m, ok := s.MCC("7995"); !ok || m.Category != "betting_gambling" || m.Risk != RiskHigh || !s.Blocked(m.Category) {
		t.Errorf("7995 = %+v, %v, blocked %v", m, ok, s.Blocked(m.Category))
	}
	if m, ok := s.MCC("5411"); !ok || m.Risk != RiskLow || s.Blocked(m.Category) {
		t.Errorf("5411 = %+v, %v", m, ok)
	}
	// 100.00 EUR to KWD: 33.347 KWD = 33347 fils.
	if got, err := s.Convert(10000, "EUR", "KWD"); err != nil || got != 33347 {
		t.Errorf("Convert = %d, %v", got, err)
	}
}

func TestApplyUpdate(t *testing.T) {
	f, err := ReadSource(sampleDir())
	if err != nil {
		t.Fatal(err)
	}
	f.Version = 1
	s, err := FromFile(f)
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.Apply(2, Update{FXRates: map[string]string{"GBP": "0.9"}, MCC: map[string]MCC{"1234": {Category: "new", Risk: RiskLow}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := n.Convert(1000, "EUR", "GBP"); got != 900 || n.Version() != "2" {
		t.Fatalf("after update: %d, version %s", got, n.Version())
	}
	if got, _ := s.Convert(1000, "EUR", "GBP"); got != 841 {
		t.Fatalf("the base changed: %d", got)
	}
	if _, ok := n.MCC("1234"); !ok {
		t.Fatal("MCC 1234 not added")
	}
	for name, u := range map[string]Update{
		"bad rate":     {FXRates: map[string]string{"GBP": "0"}},
		"bad currency": {FXRates: map[string]string{"XXX": "1"}},
		"bad risk":     {MCC: map[string]MCC{"5411": {Category: "x", Risk: "extreme"}}},
		"empty":        {},
	} {
		if _, err := s.Apply(2, u); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := s.Apply(1, Update{FXRates: map[string]string{"GBP": "0.9"}}); !errors.Is(err, ErrInconsistent) {
		t.Errorf("same version: err = %v", err)
	}
}

func TestDecodeMessage(t *testing.T) {
	good := []string{
		`{"version":3,"kind":"snapshot","snapshot":{"version":3},"published_at":"2026-01-01T00:00:00Z","hash":"x"}`,
		`{"version":3,"kind":"update","base":2,"update":{"fx_rates":{"GBP":"1"}},"published_at":"2026-01-01T00:00:00Z","hash":"x"}`,
	}
	for _, g := range good {
		if _, err := DecodeMessage([]byte(g)); err != nil {
			t.Errorf("%s: %v", g, err)
		}
	}
	bad := []string{
		`{"version":3,"kind":"snapshot","snapshot":{"version":2}}`,
		`{"version":3,"kind":"update","base":3,"update":{}}`,
		`{"version":0,"kind":"snapshot","snapshot":{"version":0}}`,
		`{"version":3,"kind":"update","snapshot":{"version":3}}`,
		`{"version":3,"kind":"snapshot","snapshot":{"version":3},"extra":1}`,
		`not json`,
	}
	for _, b := range bad {
		if _, err := DecodeMessage([]byte(b)); err == nil {
			t.Errorf("%s: accepted", b)
		}
	}
}

func TestContentHashIgnoresVersion(t *testing.T) {
	f, err := ReadSource(sampleDir())
	if err != nil {
		t.Fatal(err)
	}
	g := f
	g.Version = 9
	if ContentHash(f) != ContentHash(g) {
		t.Fatal("hash depends on the version")
	}
	g.FXRates = map[string]string{"EUR": "1"}
	if ContentHash(f) == ContentHash(g) {
		t.Fatal("hash ignores the rates")
	}
}
