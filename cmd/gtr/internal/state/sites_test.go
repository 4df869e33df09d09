package state

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cellpay/cellpay/pkg/routing"
)

// siteDoc has two cells in site-a, one in site-b and one of no site in
// pool main, and a spare pool of one site-a cell.
func siteDoc() Doc {
	return FromSpec(routing.Spec{
		Version: 5,
		Cells: []routing.Cell{
			{ID: "cell-a1", Addr: "127.0.0.1:1", Pool: "main", Weight: 100, Site: "site-a"},
			{ID: "cell-a2", Addr: "127.0.0.1:2", Pool: "main", Weight: 80, Site: "site-a"},
			{ID: "cell-b1", Addr: "127.0.0.1:3", Pool: "main", Weight: 100, Site: "site-b"},
			{ID: "cell-x", Addr: "127.0.0.1:4", Pool: "main", Weight: 100},
			{ID: "cell-s", Addr: "127.0.0.1:5", Pool: "spare", Weight: 0, Site: "site-a"},
		},
		Rules: []routing.Rule{{Name: "everything", Pool: "main"}},
	})
}

// TestEvacuateAndRestoreSite: evacuation takes exactly the site's cells
// to weight 0 and restoring returns them to their table weights (not to
// the weights they had before: a cell drained by hand comes back whole),
// each in one change that raises the version once; the other cells are
// untouched, and the result validates.
func TestEvacuateAndRestoreSite(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := siteDoc()
	if err := d.Drain("cell-a2", 50, now, 0); err != nil { // 80 -> 40, version 6
		t.Fatal(err)
	}
	before := d.Clone()
	if err := d.EvacuateSite("site-a", now, 0); err != nil {
		t.Fatal(err)
	}
	if d.Version != before.Version+1 {
		t.Fatalf("version %d after evacuating 3 cells, want %d: one change", d.Version, before.Version+1)
	}
	for _, c := range d.Cells {
		old := before.Cell(c.ID)
		switch {
		case c.Site == "site-a":
			if c.Weight != 0 || c.Ramp != nil || c.TableWeight != old.TableWeight {
				t.Errorf("evacuated %s: %+v, want weight 0 now, table weight %d kept", c.ID, c, old.TableWeight)
			}
		case !reflect.DeepEqual(c, *old):
			t.Errorf("%s of %q changed: %+v, was %+v", c.ID, c.Site, c, *old)
		}
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}

	if err := d.RestoreSite("site-a", now, 0); err != nil {
		t.Fatal(err)
	}
	if d.Version != before.Version+2 {
		t.Fatalf("version %d after restoring, want %d", d.Version, before.Version+2)
	}
	for id, want := range map[string]int{"cell-a1": 100, "cell-a2": 80, "cell-s": 0, "cell-b1": 100, "cell-x": 100} {
		if c := d.Cell(id); c.Weight != want || c.Ramp != nil || c.WeightAt(now) != want {
			t.Errorf("restored %s: %+v, want weight %d (its table weight)", id, *c, want)
		}
	}
}

// TestEvacuateSiteRamps: over a duration every cell of the site ramps
// from its weight at now to 0, all on one clock; a cell already at 0
// gets no ramp; restoring during the ramp ramps back from where each
// cell is.
func TestEvacuateSiteRamps(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := siteDoc()
	if err := d.EvacuateSite("site-a", now, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d.Version != 6 {
		t.Fatalf("version %d, want 6", d.Version)
	}
	for id, from := range map[string]int{"cell-a1": 100, "cell-a2": 80} {
		c := d.Cell(id)
		want := &Ramp{From: from, Start: now, End: now.Add(10 * time.Second)}
		if c.Weight != 0 || !reflect.DeepEqual(c.Ramp, want) {
			t.Fatalf("%s: weight %d ramp %+v, want 0 by %+v", id, c.Weight, c.Ramp, want)
		}
	}
	if c := d.Cell("cell-s"); c.Ramp != nil || c.Weight != 0 {
		t.Fatalf("a cell already at 0 ramps: %+v", *c)
	}
	mid := now.Add(5 * time.Second)
	if a1, a2 := d.Cell("cell-a1").WeightAt(mid), d.Cell("cell-a2").WeightAt(mid); a1 != 50 || a2 != 40 {
		t.Fatalf("halfway: cell-a1 %d, cell-a2 %d, want 50 and 40", a1, a2)
	}
	if err := d.RestoreSite("site-a", mid, 4*time.Second); err != nil {
		t.Fatal(err)
	}
	if d.Version != 7 {
		t.Fatalf("version %d, want 7", d.Version)
	}
	for id, w := range map[string][2]int{"cell-a1": {50, 100}, "cell-a2": {40, 80}} {
		c := d.Cell(id)
		want := &Ramp{From: w[0], Start: mid, End: mid.Add(4 * time.Second)}
		if c.Weight != w[1] || !reflect.DeepEqual(c.Ramp, want) {
			t.Fatalf("restore %s: weight %d ramp %+v, want %d by %+v", id, c.Weight, c.Ramp, w[1], want)
		}
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestEvacuateSiteRefusesTheLastSite: a pool whose only configured
// weight is in the site is named and nothing changes; the same pool with
// a cell elsewhere at weight above 0 is evacuated; a pool of the site
// with no weight left anywhere does not stop an evacuation.
func TestEvacuateSiteRefusesTheLastSite(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		edit func(d *Doc) // before the evacuation
	}{
		{"other cells at 0", func(d *Doc) {
			d.Cell("cell-b1").Weight, d.Cell("cell-x").Weight = 0, 0
		}},
		{"other cells ramping to 0", func(d *Doc) {
			for _, id := range []string{"cell-b1", "cell-x"} {
				if err := d.SetWeight(id, 0, now, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := siteDoc()
			tc.edit(&d)
			before := d.Clone()
			err := d.EvacuateSite("site-a", now, time.Minute)
			want := `site: cannot evacuate: pool "main" has no cell outside site-a with weight above 0: evacuating would leave its rules without a cell`
			if !errors.Is(err, ErrSiteIsLast) || err.Error() != want {
				t.Fatalf("error %v\nwant %s", err, want)
			}
			if !reflect.DeepEqual(d, before) {
				t.Fatalf("a refused evacuation changed the Doc: %+v", d)
			}
		})
	}
	// One cell elsewhere with weight, ramping up from 0, is enough; the
	// spare pool (site-a only, at weight 0) is no reason to refuse.
	d := siteDoc()
	d.Cell("cell-x").Weight = 0
	if err := d.SetWeight("cell-b1", 0, now, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.SetWeight("cell-b1", 30, now, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := d.EvacuateSite("site-a", now, 0); err != nil {
		t.Fatalf("evacuation with cell-b1 ramping up: %v", err)
	}
	// A site already evacuated evacuates again (nothing left to refuse).
	if err := d.EvacuateSite("site-a", now, 0); err != nil {
		t.Fatalf("evacuating again: %v", err)
	}
}

// TestSiteOpsRejectBadInput: an empty or malformed site and a bad ramp
// are FieldErrors naming their field, a site no cell names is
// ErrUnknownSite; none of them changes the Doc.
func TestSiteOpsRejectBadInput(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ops := map[string]func(d *Doc, site string, over time.Duration) error{
		"evacuate": func(d *Doc, site string, over time.Duration) error { return d.EvacuateSite(site, now, over) },
		"restore":  func(d *Doc, site string, over time.Duration) error { return d.RestoreSite(site, now, over) },
	}
	for name, op := range ops {
		for _, tc := range []struct {
			site  string
			over  time.Duration
			field string // "" for ErrUnknownSite
		}{
			{"", 0, "site"},
			{"Site A", 0, "site"},
			{"site-a-", 0, "site"},
			{strings.Repeat("s", routing.MaxSiteLen+1), 0, "site"},
			{"site-a", -time.Second, "over"},
			{"site-a", MaxRamp + time.Second, "over"},
			{"site-z", 0, ""},
		} {
			t.Run(fmt.Sprintf("%s %q %v", name, tc.site, tc.over), func(t *testing.T) {
				d := siteDoc()
				before := d.Clone()
				err := op(&d, tc.site, tc.over)
				var fe *FieldError
				switch {
				case tc.field == "" && (!errors.Is(err, ErrUnknownSite) || !strings.HasPrefix(err.Error(), `site: unknown site "site-z"`)):
					t.Fatalf("error %v, want ErrUnknownSite naming site-z", err)
				case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field):
					t.Fatalf("error %v, want a FieldError on %q", err, tc.field)
				}
				if !reflect.DeepEqual(d, before) {
					t.Fatal("a refused operation changed the Doc")
				}
			})
		}
	}
}

// TestEvacuatedSiteRoutesNothing: once the Doc with site-a evacuated is
// in force, no key's first cell is in site-a, and every key whose home
// was outside it keeps its home (a drain moves only the drained cells'
// keys); restored, every key is home again.
func TestEvacuatedSiteRoutesNothing(t *testing.T) {
	s, clk := newState(t)
	cur, rev, _ := s.Doc()
	spec := cur.Spec(clk.Now(), nil)
	spec.Version = cur.Version + 1
	spec.Cells[0].Site, spec.Cells[1].Site, spec.Cells[2].Site = "site-a", "site-b", "site-b"
	if err := s.Apply(cur.WithTable(spec), rev+1); err != nil {
		t.Fatal(err)
	}
	partners := make([]string, 2000)
	homes := func() []string {
		out := make([]string, len(partners))
		for i, p := range partners {
			out[i] = home(t, s.Table(), p)
		}
		return out
	}
	for i := range partners {
		partners[i] = fmt.Sprintf("p-%04d", i)
	}
	first := homes()
	d, rev, _ := s.Doc()
	if err := d.EvacuateSite("site-a", clk.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(d, rev+1); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for i, h := range homes() {
		switch {
		case h == "cell-a":
			t.Fatalf("%s still homed in evacuated cell-a", partners[i])
		case first[i] != "cell-a" && h != first[i]:
			t.Fatalf("%s moved from %s (outside the site) to %s", partners[i], first[i], h)
		case h != first[i]:
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no key moved off site-a")
	}
	d, rev, _ = s.Doc()
	if err := d.RestoreSite("site-a", clk.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(d, rev+1); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(homes(), first) {
		t.Fatal("restoring the site did not bring every key home")
	}
}
