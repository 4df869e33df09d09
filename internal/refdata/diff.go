package refdata

import "slices"

// Diff is what changed from one version to the next: entries added or
// changed (with their new value) and keys removed, per section. Applying it
// to the older version gives the newer one exactly.
type Diff struct {
	Currencies        map[string]Currency
	RemovedCurrencies []string
	FXRates           map[string]string
	RemovedFXRates    []string
	MCC               map[string]MCC
	RemovedMCC        []string
	Partners          map[string]string
	RemovedPartners   []string
	// Blocked is set when the blocked categories differ (as a set); then
	// BlockedCategories is the whole new list.
	Blocked bool
	// Header is set when the base or default settlement currency differs.
	Header bool
}

// Empty reports whether d changes no entry (the version number aside).
func (d Diff) Empty() bool {
	return len(d.Currencies) == 0 && len(d.RemovedCurrencies) == 0 &&
		len(d.FXRates) == 0 && len(d.RemovedFXRates) == 0 &&
		len(d.MCC) == 0 && len(d.RemovedMCC) == 0 &&
		len(d.Partners) == 0 && len(d.RemovedPartners) == 0 && !d.Blocked && !d.Header
}

// Diff returns the changes from prev to s. Neither is modified; the maps of
// the result are new.
func (s *Snapshot) Diff(prev *Snapshot) Diff {
	a, b := &prev.file, &s.file
	var d Diff
	d.Currencies, d.RemovedCurrencies = diffMap(a.Currencies, b.Currencies)
	d.FXRates, d.RemovedFXRates = diffMap(a.FXRates, b.FXRates)
	d.MCC, d.RemovedMCC = diffMap(a.MCC, b.MCC)
	d.Partners, d.RemovedPartners = diffMap(a.Partners, b.Partners)
	d.Blocked = len(prev.blocked) != len(s.blocked)
	for c := range s.blocked {
		d.Blocked = d.Blocked || !prev.blocked[c]
	}
	d.Header = a.BaseCurrency != b.BaseCurrency || a.DefaultSettlementCurrency != b.DefaultSettlementCurrency
	return d
}

func diffMap[V comparable](old, cur map[string]V) (changed map[string]V, removed []string) {
	changed = map[string]V{}
	for k, v := range cur {
		if ov, ok := old[k]; !ok || ov != v {
			changed[k] = v
		}
	}
	for k := range old {
		if _, ok := cur[k]; !ok {
			removed = append(removed, k)
		}
	}
	slices.Sort(removed)
	return changed, removed
}

// BaseCurrency is the currency rates are quoted against.
func (s *Snapshot) BaseCurrency() string { return s.base }

// DefaultSettlementCurrency is the settlement currency of a partner with
// none of its own.
func (s *Snapshot) DefaultSettlementCurrency() string { return s.defaultSettlement }

// BlockedCategories returns the blocked categories as the version lists
// them.
func (s *Snapshot) BlockedCategories() []string { return slices.Clone(s.file.BlockedCategories) }
