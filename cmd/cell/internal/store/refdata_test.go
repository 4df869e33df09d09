package store

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/refdata"
)

func sampleFile(version uint64) refdata.File {
	return refdata.File{
		Version: version, BaseCurrency: "EUR", DefaultSettlementCurrency: "EUR",
		Currencies: map[string]refdata.Currency{"EUR": {MinorUnits: 2, Name: "Euro"}, "JPY": {MinorUnits: 0}, "KWD": {MinorUnits: 3}},
		Partners:   map[string]string{"p-001": "JPY"},
		FXRates:    map[string]string{"EUR": "1", "JPY": "163.21", "KWD": "0.33347"},
		MCC: map[string]refdata.MCC{
			"5411": {Category: "grocery", Risk: refdata.RiskLow},
			"7995": {Category: "betting", Risk: refdata.RiskHigh},
		},
		BlockedCategories: []string{"betting"},
	}
}

func TestRefdataRoundTrip(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	if _, _, err := s.LoadRefdata(ctx); !errors.Is(err, ErrNoRefdata) {
		t.Fatalf("empty store: err = %v, want ErrNoRefdata", err)
	}
	meta := RefdataMeta{Kind: refdata.KindSnapshot, Hash: "h1", PublishedAt: t0, AppliedAt: t0.Add(time.Millisecond)}
	if err := s.SaveRefdataSnapshot(ctx, sampleFile(3), meta); err != nil {
		t.Fatal(err)
	}
	got, gotMeta, err := s.LoadRefdata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sampleFile(3)) || gotMeta != meta {
		t.Fatalf("loaded\n%+v %+v\nwant\n%+v %+v", got, gotMeta, sampleFile(3), meta)
	}

	// Out of order: an older snapshot, an update on the wrong base.
	if err := s.SaveRefdataSnapshot(ctx, sampleFile(3), meta); !errors.Is(err, ErrRefdataOrder) {
		t.Fatalf("same version again: err = %v", err)
	}
	u := refdata.Update{FXRates: map[string]string{"JPY": "170"}, MCC: map[string]refdata.MCC{"4111": {Category: "commuter", Risk: refdata.RiskLow}}}
	if err := s.SaveRefdataUpdate(ctx, 2, 4, u, meta); !errors.Is(err, ErrRefdataOrder) {
		t.Fatalf("wrong base: err = %v", err)
	}
	umeta := RefdataMeta{Kind: refdata.KindUpdate, Hash: "h2", PublishedAt: t0.Add(time.Second), AppliedAt: t0.Add(2 * time.Second)}
	if err := s.SaveRefdataUpdate(ctx, 3, 4, u, umeta); err != nil {
		t.Fatal(err)
	}
	got, gotMeta, err = s.LoadRefdata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := sampleFile(4)
	want.FXRates["JPY"] = "170"
	want.MCC["4111"] = refdata.MCC{Category: "commuter", Risk: refdata.RiskLow}
	if !reflect.DeepEqual(got, want) || gotMeta != umeta {
		t.Fatalf("after update\n%+v %+v\nwant\n%+v %+v", got, gotMeta, want, umeta)
	}

	// A newer snapshot replaces everything, removals included.
	next := sampleFile(5)
	delete(next.MCC, "7995")
	next.BlockedCategories = nil
	if err := s.SaveRefdataSnapshot(ctx, next, meta); err != nil {
		t.Fatal(err)
	}
	if got, _, err = s.LoadRefdata(ctx); err != nil || !reflect.DeepEqual(got, next) {
		t.Fatalf("after snapshot 5: %+v, %v", got, err)
	}
}

func TestRefdataSnapshotDiff(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	snap := func(f refdata.File) *refdata.Snapshot {
		t.Helper()
		sn, err := refdata.FromFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return sn
	}
	meta := RefdataMeta{Kind: refdata.KindSnapshot, Hash: "h", PublishedAt: t0, AppliedAt: t0}
	v3 := snap(sampleFile(3))
	// Nothing stored: written whole whatever the base says.
	if err := s.SaveRefdataSnapshotDiff(ctx, 2, refdata.Diff{}, v3, meta); err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.LoadRefdata(ctx); err != nil || !reflect.DeepEqual(got, sampleFile(3)) {
		t.Fatalf("after 3: %+v, %v", got, err)
	}
	// Changes, additions and removals in every section, as a diff.
	f4 := sampleFile(4)
	f4.BaseCurrency, f4.DefaultSettlementCurrency = "EUR", "JPY"
	f4.Currencies["GBP"] = refdata.Currency{MinorUnits: 2, Name: "Pound"}
	f4.Currencies["JPY"] = refdata.Currency{MinorUnits: 0, Name: "Yen"}
	delete(f4.Currencies, "KWD")
	delete(f4.FXRates, "KWD")
	f4.FXRates["GBP"] = "0.84"
	f4.FXRates["JPY"] = "170"
	delete(f4.MCC, "7995")
	f4.MCC["4111"] = refdata.MCC{Category: "commuter", Risk: refdata.RiskLow}
	f4.MCC["5411"] = refdata.MCC{Category: "grocery", Risk: refdata.RiskMedium}
	f4.Partners = map[string]string{"p-002": "GBP"}
	f4.BlockedCategories = []string{"commuter"}
	v4 := snap(f4)
	meta4 := RefdataMeta{Kind: refdata.KindSnapshot, Hash: "h4", PublishedAt: t0.Add(time.Second), AppliedAt: t0.Add(time.Second)}
	if err := s.SaveRefdataSnapshotDiff(ctx, 3, v4.Diff(v3), v4, meta4); err != nil {
		t.Fatal(err)
	}
	got, gotMeta, err := s.LoadRefdata(ctx)
	if err != nil || !reflect.DeepEqual(got, f4) || gotMeta != meta4 {
		t.Fatalf("after diff 4:\n%+v %+v %v\nwant\n%+v", got, gotMeta, err, f4)
	}
	// Not newer: refused, nothing written.
	if err := s.SaveRefdataSnapshotDiff(ctx, 4, refdata.Diff{}, v4, meta); !errors.Is(err, ErrRefdataOrder) {
		t.Fatalf("same version: err = %v", err)
	}
	// A base that is not stored: written whole, the (wrong) diff ignored.
	v5 := snap(sampleFile(5))
	if err := s.SaveRefdataSnapshotDiff(ctx, 3, refdata.Diff{}, v5, meta); err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.LoadRefdata(ctx); err != nil || !reflect.DeepEqual(got, sampleFile(5)) {
		t.Fatalf("after 5: %+v, %v", got, err)
	}
}
