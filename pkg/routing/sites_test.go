package routing

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// twoSites is a pool of two cells in site-a and two in site-b, spilling at
// spill (0: the default).
func twoSites(spill int) Spec {
	s := Spec{Version: 1, Rules: []Rule{{Name: "all", Pool: "p"}}, Pools: []Pool{{Name: "p", SpillBelow: spill}}}
	for i, id := range []string{"a1", "a2", "b1", "b2"} {
		s.Cells = append(s.Cells, Cell{ID: id, Addr: "h:" + strconv.Itoa(i+1), Pool: "p", Weight: 100, Site: "site-" + id[:1]})
	}
	return s
}

// sitesOf routes n keys of a partner homed in home and counts, by site, the
// first cells and every cell ranked, and the keys routed across.
func sitesOf(t *testing.T, tbl *Table, home string, n int) (first, ranked map[string]int, across int) {
	t.Helper()
	first, ranked = map[string]int{}, map[string]int{}
	dst := make([]Choice, 0, tbl.MaxPoolSize())
	for i := range n {
		res, err := tbl.Route(&Attrs{PartnerID: "p-" + strconv.Itoa(i), HomeSite: home}, dst)
		if err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		first[res.Ranked[0].Cell.Site]++
		for _, c := range res.Ranked {
			ranked[c.Cell.Site]++
		}
		if res.Across {
			across++
		}
		if home != "" && !strings.HasPrefix(res.Home.ID, strings.TrimPrefix(home, "site-")) {
			t.Fatalf("key %d: natural home %s is not in %s", i, res.Home.ID, home)
		}
	}
	return first, ranked, across
}

// TestLocalFirst walks a home site down: its keys stay on its cells while
// half its capacity is healthy (the default spill share), whatever the
// other site's state; below that they spread over both sites, counted as
// across; a partner with no home site ranks the whole pool.
func TestLocalFirst(t *testing.T) {
	const n = 2000
	s := twoSites(0)
	tbl := mustCompile(t, s)
	first, ranked, across := sitesOf(t, tbl, "site-a", n)
	if first["site-a"] != n || ranked["site-b"] != 0 || across != 0 {
		t.Fatalf("healthy home: first %v, ranked %v, across %d", first, ranked, across)
	}
	first, ranked, _ = sitesOf(t, tbl, "", n)
	if first["site-a"] < n/3 || first["site-b"] < n/3 || ranked["site-a"] != 2*n || ranked["site-b"] != 2*n {
		t.Fatalf("no home site: first %v, ranked %v", first, ranked)
	}

	// a1 drained whole: half of site-a's capacity is left, which is the
	// share: a2 takes every key.
	s.Cells[0].Weight = 0
	first, ranked, across = sitesOf(t, mustCompile(t, s), "site-a", n)
	if first["site-a"] != n || ranked["site-b"] != 0 || ranked["site-a"] != n || across != 0 {
		t.Fatalf("a1 drained: first %v, ranked %v, across %d", first, ranked, across)
	}
	// a2 drained by a point more: below the share, both sites rank as one.
	s.Cells[1].Weight = 99
	first, ranked, across = sitesOf(t, mustCompile(t, s), "site-a", n)
	if first["site-b"] < n/2 || ranked["site-b"] != 2*n || across != first["site-b"] {
		t.Fatalf("below the share: first %v, ranked %v, across %d", first, ranked, across)
	}
	// site-a down whole: site-b takes every key, across.
	s.Cells[0].State, s.Cells[1].State = CellDown, CellDown
	first, _, across = sitesOf(t, mustCompile(t, s), "site-a", n)
	if first["site-b"] != n || across != n {
		t.Fatalf("home down: first %v, across %d", first, across)
	}
	// The other site's state never matters to a healthy home.
	s = twoSites(0)
	s.Cells[2].State, s.Cells[3].Weight = CellDown, 0
	if first, _, across := sitesOf(t, mustCompile(t, s), "site-a", n); first["site-a"] != n || across != 0 {
		t.Fatalf("other site down: first %v, across %d", first, across)
	}
}

// TestSpillBelow: a pool's share decides when its keys cross. At 100 a
// home cell drained by one point spreads the home's keys over both sites;
// at 1 they stay home until less than 1% of its capacity is left.
func TestSpillBelow(t *testing.T) {
	const n = 1000
	eager := twoSites(100)
	eager.Cells[0].Weight = 99
	if first, _, across := sitesOf(t, mustCompile(t, eager), "site-a", n); first["site-b"] == 0 || across != first["site-b"] {
		t.Fatalf("spill 100, a1 at 99: first %v, across %d", first, across)
	}
	late := twoSites(1)
	late.Cells[0].State, late.Cells[1].Weight = CellDown, 2 // 1% of site-a's capacity
	if first, ranked, across := sitesOf(t, mustCompile(t, late), "site-a", n); first["site-a"] != n || ranked["site-b"] != 0 || across != 0 {
		t.Fatalf("spill 1, a2 at 1: first %v, ranked %v, across %d", first, ranked, across)
	}
	late.Cells[1].Weight = 1
	if first, _, across := sitesOf(t, mustCompile(t, late), "site-a", n); first["site-b"] < n*9/10 || across != first["site-b"] {
		t.Fatalf("spill 1, site-a at 0.5%%: first %v, across %d", first, across)
	}
}

// TestHomeSiteWithoutCells: a home site with no cell in the pool (or named
// by no cell) ranks the pool as one group, every key across.
func TestHomeSiteWithoutCells(t *testing.T) {
	s := twoSites(0)
	s.Cells = append(s.Cells, Cell{ID: "c1", Addr: "h:9", Pool: "other", Weight: 100, Site: "site-c"})
	s.Rules = append(s.Rules, Rule{Name: "c", Pool: "other", Markets: []string{"FR"}})
	s.Rules[0].Markets = []string{"GB"}
	tbl := mustCompile(t, s)
	for _, home := range []string{"site-c", "site-z"} {
		res, err := tbl.Route(&Attrs{PartnerID: "p", Market: "GB", HomeSite: home}, nil)
		flat, _ := tbl.Route(&Attrs{PartnerID: "p", Market: "GB"}, nil)
		if err != nil || !sameRanking(res.Ranked, flat.Ranked) || !res.Across || res.Home != flat.Home {
			t.Fatalf("home %s: %v (%v), across %v, home %v; want %v", home, ids(res.Ranked), err, res.Across, res.Home.ID, ids(flat.Ranked))
		}
	}
}

// TestExplainSites: the explanation says what the home site's capacity
// decided, and why a cell of the other site is skipped.
func TestExplainSites(t *testing.T) {
	s := twoSites(0)
	s.Cells[0].Weight = 40
	ex, err := mustCompile(t, s).Explain(&Attrs{PartnerID: "p-1", HomeSite: "site-a"})
	if err != nil {
		t.Fatal(err)
	}
	if (ex.Sites != SiteVerdict{Cells: 2, Healthy: 70, SpillBelow: 50, Local: true}) || ex.Across {
		t.Fatalf("sites %+v, across %v", ex.Sites, ex.Across)
	}
	out := ex.String()
	for _, want := range []string{`home site "site-a": 70% of its 2 cells' capacity healthy, spill below 50%: its cells only`, `skipped: site "site-b", and the home site keeps its keys`} {
		if !strings.Contains(out, want) {
			t.Errorf("Explain.String lacks %q:\n%s", want, out)
		}
	}
	s.Cells[1].State = CellDown
	ex, _ = mustCompile(t, s).Explain(&Attrs{PartnerID: "p-1", HomeSite: "site-a"})
	if out := ex.String(); !strings.Contains(out, "below spill 50%: ranked over every site") || ex.Sites.Healthy != 20 {
		t.Errorf("spilled:\n%s", out)
	}
}

// TestSpillBelowValidated: a share outside 0..100 is refused, naming the
// pool and the field.
func TestSpillBelowValidated(t *testing.T) {
	for _, v := range []int{-1, 101} {
		err := Validate(twoSites(v))
		var se *SpecError
		if !errors.As(err, &se) || se.Field != "SpillBelow" || se.Name != "p" || !strings.Contains(err.Error(), "spill_below "+strconv.Itoa(v)) {
			t.Errorf("spill %d: %v", v, err)
		}
	}
}
