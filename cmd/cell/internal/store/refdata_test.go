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
