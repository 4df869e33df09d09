package refdata

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// genDiffFile draws a valid file over small universes, so that two draws
// overlap: EUR is the base with rate 1, partners settle in rated
// currencies, currencies are listed or left to the ISO list.
func genDiffFile(t *rapid.T, version uint64, label string) File {
	curs := []string{"EUR", "USD", "GBP", "JPY", "KWD"}
	f := File{Version: version, BaseCurrency: "EUR", FXRates: map[string]string{"EUR": "1"}}
	if rapid.Bool().Draw(t, label+" listed currencies") {
		f.Currencies = map[string]Currency{}
		for _, c := range curs {
			if c == "EUR" || rapid.Bool().Draw(t, label+" currency "+c) {
				f.Currencies[c] = Currency{MinorUnits: rapid.IntRange(0, 4).Draw(t, label+" minor "+c),
					Name: rapid.SampledFrom([]string{"", "n"}).Draw(t, label+" name "+c)}
			}
		}
	}
	for _, c := range curs[1:] {
		if _, ok := f.Currencies[c]; (ok || f.Currencies == nil) && rapid.Bool().Draw(t, label+" rated "+c) {
			f.FXRates[c] = rapid.SampledFrom([]string{"0.5", "0.50", "2", "161.2"}).Draw(t, label+" rate "+c)
		}
	}
	rated := slices.Sorted(maps.Keys(f.FXRates))
	f.DefaultSettlementCurrency = rapid.SampledFrom(rated).Draw(t, label+" default")
	f.Partners = rapid.MapOf(rapid.SampledFrom([]string{"p-1", "p-2", "p-3", "p-4"}), rapid.SampledFrom(rated)).Draw(t, label+" partners")
	f.MCC = rapid.MapOf(rapid.SampledFrom([]string{"5411", "5812", "7995", "6011"}),
		rapid.Custom(func(t *rapid.T) MCC {
			return MCC{Category: rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "category"),
				Risk: rapid.SampledFrom([]string{RiskLow, RiskMedium, RiskHigh}).Draw(t, "risk")}
		})).Draw(t, label+" mcc")
	f.BlockedCategories = rapid.SliceOfDistinct(rapid.SampledFrom([]string{"a", "b", "c", "d"}), rapid.ID[string]).Draw(t, label+" blocked")
	return f
}

// normalizeDiffFile makes files that mean the same compare equal: nil and
// empty maps, the blocked categories as a set.
func normalizeDiffFile(f File) File {
	f = f.clone()
	if f.Currencies == nil {
		f.Currencies = map[string]Currency{}
	}
	if f.FXRates == nil {
		f.FXRates = map[string]string{}
	}
	if f.MCC == nil {
		f.MCC = map[string]MCC{}
	}
	if f.Partners == nil {
		f.Partners = map[string]string{}
	}
	f.BlockedCategories = slices.Compact(slices.Sorted(slices.Values(f.BlockedCategories)))
	if len(f.BlockedCategories) == 0 {
		f.BlockedCategories = nil
	}
	return f
}

func patch[V any](m map[string]V, changed map[string]V, removed []string) map[string]V {
	if m == nil {
		m = map[string]V{}
	}
	maps.Copy(m, changed)
	for _, k := range removed {
		delete(m, k)
	}
	return m
}

// TestDiffReproducesNext: prev patched with next.Diff(prev) is next, and
// the diff is empty exactly when the two mean the same.
func TestDiffReproducesNext(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		prev, err := FromFile(genDiffFile(t, 1, "prev"))
		if err != nil {
			t.Fatalf("prev: %v", err)
		}
		next, err := FromFile(genDiffFile(t, 2, "next"))
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		d := next.Diff(prev)
		got := prev.File()
		got.Version = next.Seq()
		got.Currencies = patch(got.Currencies, d.Currencies, d.RemovedCurrencies)
		got.FXRates = patch(got.FXRates, d.FXRates, d.RemovedFXRates)
		got.MCC = patch(got.MCC, d.MCC, d.RemovedMCC)
		got.Partners = patch(got.Partners, d.Partners, d.RemovedPartners)
		if d.Blocked {
			got.BlockedCategories = next.BlockedCategories()
		}
		if d.Header {
			got.BaseCurrency, got.DefaultSettlementCurrency = next.BaseCurrency(), next.DefaultSettlementCurrency()
		}
		want := normalizeDiffFile(next.File())
		if got := normalizeDiffFile(got); !reflect.DeepEqual(got, want) {
			t.Fatalf("prev + diff:\n got %+v\nwant %+v\ndiff %+v", got, want, d)
		}
		same := normalizeDiffFile(prev.File())
		same.Version = next.Seq()
		if d.Empty() != reflect.DeepEqual(same, want) {
			t.Fatalf("Empty() = %v for %+v", d.Empty(), d)
		}
		if !prev.Diff(prev).Empty() {
			t.Fatalf("a version differs from itself: %+v", prev.Diff(prev))
		}
	})
}
