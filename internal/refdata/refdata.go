// Package refdata is the reference data a cell needs to price and check a
// transaction without asking anyone: FX rates, merchant category codes with
// their categories and risk classes, and each partner's settlement currency.
//
// A Snapshot is immutable once parsed and safe to share between goroutines.
// Money is integer minor units; FX conversion is exact rational arithmetic
// with one rounding step at the end, half to even (see Convert).
//
// Versions are positive integers assigned by the replicator, one sequence
// for snapshots and updates alike, at most MaxVersion; 0 means
// "unversioned" (a source file, or a bootstrap file served before any
// published version). The package does
// no network I/O: wire.go describes the messages, cmd/replicator and the
// cell's refsync move them.
package refdata

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"os"
	"slices"
	"sort"
	"strconv"

	"github.com/cellpay/cellpay/internal/iso"
)

// Risk classes of merchant categories.
const (
	RiskLow    = "low"
	RiskMedium = "medium"
	RiskHigh   = "high"
)

// Sentinel errors callers branch on.
var (
	ErrNoRate = errors.New("refdata: no FX rate for currency")
)

// MCC describes one merchant category code.
type MCC struct {
	Category string `json:"category"`
	Risk     string `json:"risk"`
}

// Currency is one ISO 4217 currency of the reference data.
type Currency struct {
	// MinorUnits is the number of decimal digits of the minor unit (0 to 4):
	// 2 for EUR, 0 for JPY, 3 for KWD.
	MinorUnits int    `json:"minor_units"`
	Name       string `json:"name,omitempty"`
}

// File is the JSON form of a snapshot, on disk and on the wire. Rates are
// decimal strings giving the units of a currency per one unit of the base
// currency; they are strings so that no value passes through a float.
//
// Currencies lists the currencies with their minor units; when it is empty
// (an older file) the compiled-in ISO 4217 list of package iso is used.
// BlockedCategories names MCC categories that transactions are declined for.
type File struct {
	Version                   uint64              `json:"version"`
	BaseCurrency              string              `json:"base_currency"`
	DefaultSettlementCurrency string              `json:"default_settlement_currency"`
	Currencies                map[string]Currency `json:"currencies,omitempty"`
	Partners                  map[string]string   `json:"partners"`
	FXRates                   map[string]string   `json:"fx_rates"`
	MCC                       map[string]MCC      `json:"mcc"`
	BlockedCategories         []string            `json:"blocked_categories,omitempty"`
}

// Snapshot is one validated version of the reference data.
type Snapshot struct {
	file              File // as validated; never modified
	version           string
	base              string
	defaultSettlement string
	partners          map[string]string
	rates             map[string]*big.Rat
	exps              map[string]int
	mcc               map[string]MCC
	blocked           map[string]bool
}

// Load reads and parses the JSON file at path.
func Load(path string) (*Snapshot, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("refdata: load: %w", err)
	}
	return Parse(b)
}

// Parse decodes and validates a JSON snapshot. Unknown fields are refused.
// A snapshot with any problem is refused whole.
func Parse(b []byte) (*Snapshot, error) {
	var f File
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("refdata: parse: %w", err)
	}
	return FromFile(f)
}

// FromFile validates f and builds a Snapshot.
func FromFile(f File) (*Snapshot, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	s := &Snapshot{
		file:              f,
		version:           strconv.FormatUint(f.Version, 10),
		base:              f.BaseCurrency,
		defaultSettlement: f.DefaultSettlementCurrency,
		partners:          make(map[string]string, len(f.Partners)),
		rates:             make(map[string]*big.Rat, len(f.FXRates)),
		exps:              make(map[string]int, len(f.FXRates)),
		mcc:               make(map[string]MCC, len(f.MCC)),
		blocked:           make(map[string]bool, len(f.BlockedCategories)),
	}
	if f.Version > MaxVersion {
		errs = append(errs, CheckVersion("version", f.Version))
	}
	for _, cur := range sortedKeys(f.Currencies) {
		c := f.Currencies[cur]
		if !iso.IsCurrency(cur) {
			bad("currencies: %q is not an ISO 4217 currency", cur)
		}
		if c.MinorUnits < 0 || c.MinorUnits > 4 {
			bad("currencies.%s.minor_units: %d is not 0 to 4", cur, c.MinorUnits)
		}
	}
	// exponent is the currency's minor units from the file, or from the
	// compiled-in ISO list when the file lists no currencies.
	exponent := func(cur string) (int, bool) {
		if len(f.Currencies) == 0 {
			return iso.CurrencyExponent(cur)
		}
		c, ok := f.Currencies[cur]
		return c.MinorUnits, ok && iso.IsCurrency(cur)
	}
	if _, ok := exponent(f.BaseCurrency); !ok {
		bad("base_currency: %q is not a known ISO 4217 currency", f.BaseCurrency)
	}
	for _, cur := range sortedKeys(f.FXRates) {
		e, ok := exponent(cur)
		if !ok {
			bad("fx_rates: %q is not a known ISO 4217 currency", cur)
			continue
		}
		s.exps[cur] = e
		r, ok := parseRate(f.FXRates[cur])
		if !ok {
			bad("fx_rates.%s: %q is not a positive decimal", cur, f.FXRates[cur])
			continue
		}
		s.rates[cur] = r
	}
	if r, ok := s.rates[f.BaseCurrency]; ok && r.Cmp(big.NewRat(1, 1)) != 0 {
		bad("fx_rates.%s: the base currency's rate must be 1", f.BaseCurrency)
	}
	if _, ok := s.rates[f.DefaultSettlementCurrency]; !ok {
		bad("default_settlement_currency: %q has no FX rate", f.DefaultSettlementCurrency)
	}
	for _, p := range sortedKeys(f.Partners) {
		cur := f.Partners[p]
		if _, ok := s.rates[cur]; !ok {
			bad("partners.%s: settlement currency %q has no FX rate", p, cur)
		}
		s.partners[p] = cur
	}
	for _, code := range sortedKeys(f.MCC) {
		m := f.MCC[code]
		if len(code) != 4 || !allDigits(code) {
			bad("mcc: %q is not four digits", code)
		}
		if m.Category == "" {
			bad("mcc.%s.category: is required", code)
		}
		switch m.Risk {
		case RiskLow, RiskMedium, RiskHigh:
		default:
			bad("mcc.%s.risk: %q is not low, medium or high", code, m.Risk)
		}
		s.mcc[code] = m
	}
	for _, c := range f.BlockedCategories {
		if c == "" {
			bad("blocked_categories: empty category")
		}
		if s.blocked[c] {
			bad("blocked_categories: %q listed twice", c)
		}
		s.blocked[c] = true
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("refdata: version %d refused: %w", f.Version, errors.Join(errs...))
	}
	return s, nil
}

// Version names this snapshot: its sequence number in decimal.
func (s *Snapshot) Version() string { return s.version }

// Seq is the snapshot's version number; 0 for an unversioned file.
func (s *Snapshot) Seq() uint64 { return s.file.Version }

// File returns a deep copy of the validated file the snapshot was built
// from.
func (s *Snapshot) File() File { return s.file.clone() }

// Blocked reports whether transactions in an MCC category are declined.
func (s *Snapshot) Blocked(category string) bool { return s.blocked[category] }

// Exponent returns a currency's minor units, and false when the snapshot
// has no rate for it.
func (s *Snapshot) Exponent(cur string) (int, bool) {
	e, ok := s.exps[cur]
	return e, ok
}

// Rate returns the currency's rate against the base currency. The caller
// must not modify it.
func (s *Snapshot) Rate(cur string) (*big.Rat, bool) {
	r, ok := s.rates[cur]
	return r, ok
}

// SettlementCurrency returns the currency partner settles in.
func (s *Snapshot) SettlementCurrency(partner string) string {
	if c, ok := s.partners[partner]; ok {
		return c
	}
	return s.defaultSettlement
}

// MCC looks up a merchant category code.
func (s *Snapshot) MCC(code string) (MCC, bool) {
	m, ok := s.mcc[code]
	return m, ok
}

// Convert converts minor units of currency from into minor units of
// currency to. The exact value, amount / 10^e(from) / rate(from) * rate(to) *
// 10^e(to), is rounded once to the nearest minor unit, ties to even
// (banker's rounding), so that rounding carries no bias over many
// transactions. Converting a currency to itself returns the amount unchanged.
func (s *Snapshot) Convert(minor int64, from, to string) (int64, error) {
	if from == to {
		return minor, nil
	}
	rf, ok := s.rates[from]
	if !ok {
		return 0, fmt.Errorf("%w %s", ErrNoRate, from)
	}
	rt, ok := s.rates[to]
	if !ok {
		return 0, fmt.Errorf("%w %s", ErrNoRate, to)
	}
	return ConvertRates(minor, from, rf, s.exps[from], to, rt, s.exps[to])
}

// ConvertRates is Convert with the rates (units per base unit) and minor
// unit exponents given: the one conversion rule for every holder of
// reference data (a Snapshot, a cell's in-memory tables). from and to only
// name the currencies in errors.
func ConvertRates(minor int64, from string, rf *big.Rat, ef int, to string, rt *big.Rat, et int) (int64, error) {
	if from == to {
		return minor, nil
	}
	v := new(big.Rat).SetInt64(minor)
	v.Mul(v, rt)
	v.Quo(v, rf)
	v.Mul(v, new(big.Rat).SetFrac(pow10(et), pow10(ef)))
	out := RoundHalfEven(v)
	if !out.IsInt64() {
		return 0, fmt.Errorf("refdata: converting %d %s to %s overflows", minor, from, to)
	}
	return out.Int64(), nil
}

// RoundHalfEven rounds v to the nearest integer, ties to the even one.
func RoundHalfEven(v *big.Rat) *big.Int {
	num, den := v.Num(), v.Denom()
	q, r := new(big.Int).QuoRem(num, den, new(big.Int))
	// q is truncated toward zero; r has the sign of num.
	twice := new(big.Int).Abs(r)
	twice.Lsh(twice, 1)
	switch c := twice.Cmp(den); {
	case c > 0, c == 0 && q.Bit(0) == 1:
		if num.Sign() < 0 {
			q.Sub(q, big.NewInt(1))
		} else {
			q.Add(q, big.NewInt(1))
		}
	}
	return q
}

func (f File) clone() File {
	c := f
	c.Currencies = maps.Clone(f.Currencies)
	c.Partners = maps.Clone(f.Partners)
	c.FXRates = maps.Clone(f.FXRates)
	c.MCC = maps.Clone(f.MCC)
	c.BlockedCategories = slices.Clone(f.BlockedCategories)
	return c
}

func pow10(n int) *big.Int {
	return new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil)
}

// MaxRateLen is the longest FX rate string there is. A rate is a plain
// decimal ("0.8412", "156") or an exact fraction of integers ("2/3"), never
// an exponent ("1e999999", which math/big would expand into a number of a
// million digits that every conversion then multiplies by), a sign or a
// hex float.
const MaxRateLen = 32

// parseRate parses a positive rate of at most MaxRateLen characters: a
// plain decimal, or integer/integer.
func parseRate(s string) (*big.Rat, bool) {
	if len(s) == 0 || len(s) > MaxRateLen {
		return nil, false
	}
	dot, slash := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		edge := i == 0 || i == len(s)-1
		switch {
		case c >= '0' && c <= '9':
		case c == '.' && !dot && !slash && !edge:
			dot = true
		case c == '/' && !dot && !slash && !edge:
			slash = true
		default:
			return nil, false
		}
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok || r.Sign() <= 0 {
		return nil, false
	}
	return r, true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
