package routing

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestFreshnessGating: a rule with a MinRefdataVersion skips cells below it
// (unknown versions included), Explain says why, and a rule without one
// ignores versions.
func TestFreshnessGating(t *testing.T) {
	s := Spec{Version: 1, Rules: []Rule{
		{Name: "fresh", Partners: []string{"fresh"}, Pool: "p", MinRefdataVersion: 5},
		{Name: "any", Pool: "p"},
	}}
	for i, v := range []uint64{3, 5, 7, 0} {
		s.Cells = append(s.Cells, Cell{ID: "c" + strconv.Itoa(i), Addr: "a:1", Pool: "p", Weight: 100, RefdataVersion: v})
	}
	tbl := mustCompile(t, s)
	for k := range 200 {
		a := &Attrs{PartnerID: "fresh", TransactionID: strconv.Itoa(k)}
		res, err := tbl.Route(a, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(res.Ranked); !slices.Equal(sorted(got), []string{"c1", "c2"}) {
			t.Fatalf("gated ranking %v, want c1 and c2 only", got)
		}
		res, err = tbl.Route(&Attrs{PartnerID: "other-" + strconv.Itoa(k)}, nil)
		if err != nil || len(res.Ranked) != 4 {
			t.Fatalf("ungated rule ranked %v, %v; want all 4 cells", ids(res.Ranked), err)
		}
	}

	ex, err := tbl.Explain(&Attrs{PartnerID: "fresh"})
	if err != nil {
		t.Fatal(err)
	}
	why := map[string]string{}
	for _, c := range ex.Cells {
		why[c.Cell.ID] = c.Why()
		if stale := c.Cell.RefdataVersion < 5; stale != (c.Verdict == VerdictStale) || stale != (c.Rank == -1) {
			t.Errorf("cell %s (v%d): verdict %v rank %d", c.Cell.ID, c.Cell.RefdataVersion, c.Verdict, c.Rank)
		}
	}
	if w := why["c0"]; w != "skipped: serves reference data v3, rule needs v5" {
		t.Errorf("c0: %q", w)
	}
	if w := why["c3"]; w != "skipped: serves no known reference data version, rule needs v5" {
		t.Errorf("c3: %q", w)
	}
	text := ex.String()
	for _, want := range []string{"needs reference data v5 or newer", `"c0"`, "serves reference data v3, rule needs v5"} {
		if !strings.Contains(text, want) {
			t.Errorf("Explain text lacks %q:\n%s", want, text)
		}
	}
	if VerdictStale.String() != "skipped: stale reference data" {
		t.Errorf("VerdictStale.String() = %q", VerdictStale.String())
	}
}

// TestFreshnessAllStale: when every cell is behind, Route answers ErrNoCell
// with the rule (never a stale cell as a fallback, never a later rule), and
// Explain names each stale cell.
func TestFreshnessAllStale(t *testing.T) {
	s := validSpec()
	s.Rules[1].MinRefdataVersion = 9 // big-partner -> pool us (us-1 only)
	s.Rules[0].MinRefdataVersion = 2 // eu-cards -> pool eu
	s.Cells[0].RefdataVersion, s.Cells[1].RefdataVersion, s.Cells[2].RefdataVersion = 1, 2, 8
	tbl := mustCompile(t, s)

	res, err := tbl.Route(&Attrs{PartnerID: "acme", Market: "US"}, make([]Choice, 0, 3))
	if !errors.Is(err, ErrNoCell) || res.Rule == nil || res.Rule.Name != "big-partner" || len(res.Ranked) != 0 {
		t.Fatalf("all stale: %+v, %v; want ErrNoCell on big-partner", res, err)
	}
	ex, err := tbl.Explain(&Attrs{PartnerID: "acme", Market: "US"})
	if !errors.Is(err, ErrNoCell) || len(ex.Cells) != 1 || ex.Cells[0].Verdict != VerdictStale ||
		ex.Cells[0].Why() != "skipped: serves reference data v8, rule needs v9" {
		t.Fatalf("Explain all stale: %+v, %v", ex, err)
	}

	// eu-1 (v1) is stale for eu-cards even as a fallback: at weight 50 eu-2
	// refuses some keys, and those must still not reach eu-1.
	for k := range 500 {
		a := &Attrs{Market: "DE", PaymentType: PaymentCardAuthorization, MerchantID: "m" + strconv.Itoa(k)}
		res, err := tbl.Route(a, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(res.Ranked); !slices.Equal(got, []string{"eu-2"}) {
			t.Fatalf("key %+v ranked %v, want [eu-2]", a, got)
		}
	}
}

// TestFreshnessDownBeatsStale: a cell both down and stale is reported down.
func TestFreshnessDownBeatsStale(t *testing.T) {
	s := validSpec()
	s.Rules[1].MinRefdataVersion = 3
	s.Cells[2].State = CellDown
	ex, err := mustCompile(t, s).Explain(&Attrs{PartnerID: "acme"})
	if !errors.Is(err, ErrNoCell) || ex.Cells[0].Verdict != VerdictDown {
		t.Fatalf("down and stale: %+v, %v", ex.Cells, err)
	}
}

func TestFreshnessJSON(t *testing.T) {
	// Unset, the new fields stay out of the JSON (the golden file and
	// replicated documents written before them read the same).
	b, err := json.Marshal(validSpec())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "Refdata") {
		t.Errorf("zero freshness fields encoded: %s", b)
	}
	s := validSpec()
	s.Rules[0].MinRefdataVersion, s.Cells[0].RefdataVersion = 4, 3
	b, _ = json.Marshal(s)
	var back Spec
	if err := json.Unmarshal(b, &back); err != nil || back.Rules[0].MinRefdataVersion != 4 || back.Cells[0].RefdataVersion != 3 {
		t.Fatalf("round trip: %s -> %+v, %v", b, back, err)
	}
}

// TestPropertyGatingOnlyRemoves: with random versions and requirements, a
// gated ranking is exactly the ungated ranking minus the cells below the
// rule's minimum: no stale cell ever, and the fresh ones in the same order
// with the same scores (unless the stale cells took a home site below its
// spill share). Explain agrees.
func TestPropertyGatingOnlyRemoves(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		plain := genSpec(t)
		gated := plain.clone()
		for i := range gated.Cells {
			gated.Cells[i].RefdataVersion = rapid.Uint64Range(0, 6).Draw(t, "served")
		}
		for i := range gated.Rules {
			gated.Rules[i].MinRefdataVersion = rapid.Uint64Range(0, 6).Draw(t, "min")
		}
		pt, gt := mustCompile(t, plain), mustCompile(t, gated)
		version := map[string]uint64{}
		for _, c := range gated.Cells {
			version[c.ID] = c.RefdataVersion
		}
		dst := make([]Choice, 0, gt.MaxPoolSize())
		for _, a := range genAttrs(t, 30) {
			want, werr := pt.Route(&a, nil)
			got, gerr := gt.Route(&a, dst)
			if errors.Is(werr, ErrNoRule) != errors.Is(gerr, ErrNoRule) {
				t.Fatalf("gating changed rule matching: %v vs %v", werr, gerr)
			}
			if errors.Is(gerr, ErrNoRule) {
				continue
			}
			if got.Rule.Name != want.Rule.Name {
				t.Fatalf("rule %q, want %q", got.Rule.Name, want.Rule.Name)
			}
			if explain(pt, &a).Sites.Local != explain(gt, &a).Sites.Local {
				// Stale home cells took the home site below its spill share:
				// its keys rank over every site, by rule (TestPropertyLocalFirst).
				continue
			}
			need := got.Rule.MinRefdataVersion
			fresh := slices.DeleteFunc(slices.Clone(want.Ranked), func(c Choice) bool { return version[c.Cell.ID] < need })
			if !sameRanking(got.Ranked, fresh) {
				t.Fatalf("min v%d: gated %v, want %v (ungated %v)", need, ids(got.Ranked), ids(fresh), ids(want.Ranked))
			}
			for _, c := range got.Ranked {
				if c.Cell.RefdataVersion < need {
					t.Fatalf("stale cell %s (v%d) returned for a rule needing v%d", c.Cell.ID, c.Cell.RefdataVersion, need)
				}
			}
			if (len(fresh) == 0) != errors.Is(gerr, ErrNoCell) {
				t.Fatalf("err %v with ranking %v", gerr, ids(got.Ranked))
			}
			ex, err := gt.Explain(&a)
			if err != gerr {
				t.Fatalf("Explain error %v, Route error %v", err, gerr)
			}
			checkRanking(t, gt, ex, got.Ranked)
		}
	})
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
