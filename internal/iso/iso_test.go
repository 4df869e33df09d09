package iso

import "testing"

func TestCountries(t *testing.T) {
	if got := len(countries); got != 249 {
		t.Fatalf("countries: got %d codes, want the 249 assigned alpha-2 codes", got)
	}
	for _, c := range []string{"GB", "DE", "US", "ZW", "AD"} {
		if !IsCountry(c) {
			t.Errorf("IsCountry(%q) = false", c)
		}
	}
	for _, c := range []string{"", "XX", "gb", "GBR", "UK"} {
		if IsCountry(c) {
			t.Errorf("IsCountry(%q) = true", c)
		}
	}
}

func TestCurrencies(t *testing.T) {
	cases := []struct {
		code string
		exp  int
		ok   bool
	}{
		{"GBP", 2, true}, {"JPY", 0, true}, {"KWD", 3, true}, {"EUR", 2, true},
		{"XXX", 0, false}, {"gbp", 0, false}, {"", 0, false},
	}
	for _, c := range cases {
		exp, ok := CurrencyExponent(c.code)
		if exp != c.exp || ok != c.ok {
			t.Errorf("CurrencyExponent(%q) = %d, %v; want %d, %v", c.code, exp, ok, c.exp, c.ok)
		}
	}
}
