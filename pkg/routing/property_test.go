package routing

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// genSpec draws a valid spec: 1..3 pools, each with at least one cell, some
// cells drained or down, in site-a, site-b or none; pools spilling at
// various shares; one rule per partner ahead of a catch-all, each with a
// random pool and hash field.
func genSpec(t *rapid.T) Spec {
	nPools := rapid.IntRange(1, 3).Draw(t, "pools")
	nCells := rapid.IntRange(nPools, 12).Draw(t, "cells")
	s := Spec{Version: rapid.Uint64().Draw(t, "version")}
	suffix := rapid.StringMatching(`[a-z0-9]{0,6}`).Draw(t, "idSuffix")
	for i := range nCells {
		pool := i
		if i >= nPools {
			pool = rapid.IntRange(0, nPools-1).Draw(t, "pool")
		}
		c := Cell{
			ID:     fmt.Sprintf("cell-%d-%s", i, suffix),
			Addr:   fmt.Sprintf("10.0.0.%d:7000", i),
			Pool:   fmt.Sprintf("p%d", pool),
			Weight: rapid.OneOf(rapid.Just(0), rapid.Just(100), rapid.IntRange(0, 100)).Draw(t, "weight"),
			Site:   rapid.SampledFrom([]string{"", "site-a", "site-b", "site-b"}).Draw(t, "site"),
		}
		if rapid.IntRange(0, 9).Draw(t, "down") == 0 {
			c.State = CellDown
		}
		s.Cells = append(s.Cells, c)
	}
	for p := range nPools {
		s.Pools = append(s.Pools, Pool{Name: fmt.Sprintf("p%d", p),
			SpillBelow: rapid.OneOf(rapid.Just(0), rapid.Just(1), rapid.Just(100), rapid.IntRange(0, 100)).Draw(t, "spillBelow")})
	}
	for p := range 3 {
		s.Rules = append(s.Rules, Rule{
			Name:     fmt.Sprintf("partner%d", p),
			Partners: []string{fmt.Sprintf("partner%d", p)},
			Pool:     fmt.Sprintf("p%d", rapid.IntRange(0, nPools-1).Draw(t, "rulePool")),
			HashOn:   HashField(rapid.IntRange(0, 3).Draw(t, "hashOn")),
		})
	}
	s.Rules = append(s.Rules, Rule{
		Name:   "default",
		Pool:   fmt.Sprintf("p%d", rapid.IntRange(0, nPools-1).Draw(t, "defaultPool")),
		HashOn: HashField(rapid.IntRange(0, 3).Draw(t, "defaultHashOn")),
	})
	return s
}

func genAttrs(t *rapid.T, n int) []Attrs {
	str := rapid.StringMatching(`[a-zA-Z0-9-]{0,12}`)
	out := make([]Attrs, n)
	for i := range out {
		out[i] = Attrs{
			TransactionID: str.Draw(t, "txn"),
			PartnerID:     rapid.OneOf(rapid.SampledFrom([]string{"partner0", "partner1", "partner2"}), str).Draw(t, "partner"),
			Market:        rapid.SampledFrom([]string{"DE", "FR", "US", "GB"}).Draw(t, "market"),
			PaymentType:   rapid.SampledFrom(paymentTypes[:]).Draw(t, "paymentType"),
			MerchantID:    str.Draw(t, "merchant"),
			HomeSite:      rapid.SampledFrom([]string{"", "site-a", "site-b", "site-z"}).Draw(t, "homeSite"),
		}
	}
	return out
}

// first is the key's home cell id, or "" when no cell is left.
func first(t *rapid.T, tbl *Table, a *Attrs) string {
	res, err := tbl.Route(a, nil)
	switch {
	case errors.Is(err, ErrNoCell):
		return ""
	case err != nil:
		t.Fatalf("Route(%+v): %v", a, err)
	}
	return res.Ranked[0].Cell.ID
}

// without returns the ids of r except id.
func without(r []Choice, id string) []string {
	return slices.DeleteFunc(ids(r), func(s string) bool { return s == id })
}

func TestPropertyDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genSpec(t)
		tbl := mustCompile(t, s)
		again := mustCompile(t, tbl.Spec())
		shuffled := s.clone()
		perm := rapid.Permutation(shuffled.Cells).Draw(t, "cellOrder")
		shuffled.Cells = perm
		reordered := mustCompile(t, shuffled)
		for _, a := range genAttrs(t, 30) {
			r1, err1 := tbl.Route(&a, nil)
			r2, err2 := tbl.Route(&a, make([]Choice, 0, 1))
			r3, err3 := again.Route(&a, nil)
			r4, err4 := reordered.Route(&a, nil)
			if err1 != err2 || err1 != err3 || err1 != err4 {
				t.Fatalf("errors differ: %v %v %v %v", err1, err2, err3, err4)
			}
			for _, r := range []Result{r2, r3, r4} {
				if !sameRanking(r1.Ranked, r.Ranked) || r1.Rule.Name != r.Rule.Name {
					t.Fatalf("rankings differ for %+v: %v vs %v", a, ids(r1.Ranked), ids(r.Ranked))
				}
			}
			if err1 == nil && r1.Ranked[0].Cell.Weight == 0 || err1 == nil && r1.Ranked[0].Cell.State != CellUp {
				t.Fatalf("home %+v is not usable", *r1.Ranked[0].Cell)
			}
			ex, err := tbl.Explain(&a)
			if err != err1 {
				t.Fatalf("Explain error %v, Route error %v", err, err1)
			}
			checkRanking(t, tbl, ex, r1.Ranked)
		}
	})
}

func sameRanking(a, b []Choice) bool {
	return slices.EqualFunc(a, b, func(x, y Choice) bool { return x.Cell.ID == y.Cell.ID && x.Score == y.Score })
}

// TestPropertyRemoveOrDrainMovesOnlyItsKeys: taking a cell out, or lowering
// its weight, moves only keys whose home was that cell, and leaves the
// order of every other cell in every ranking alone.
func TestPropertyRemoveOrDrainMovesOnlyItsKeys(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genSpec(t)
		tbl := mustCompile(t, s)
		x := rapid.IntRange(0, len(s.Cells)-1).Draw(t, "cell")
		id := s.Cells[x].ID

		changed := s.clone()
		if rapid.Bool().Draw(t, "remove") {
			changed.Cells = slices.Delete(changed.Cells, x, x+1)
		} else {
			changed.Cells[x].Weight = rapid.IntRange(0, s.Cells[x].Weight).Draw(t, "lowerWeight")
		}
		after, err := Compile(changed)
		if err != nil {
			t.Skip("removing the cell empties a pool a rule needs")
		}
		for _, a := range genAttrs(t, 50) {
			if ex1, ex2 := explain(tbl, &a), explain(after, &a); ex1.Sites.Local != ex2.Sites.Local {
				// The change took the home site below its spill share (or
				// removed its last cell): its keys rank over every site now,
				// by rule; TestPropertyLocalFirst holds that rule.
				continue
			}
			r1, _ := tbl.Route(&a, nil)
			r2, _ := after.Route(&a, nil)
			before, now := first(t, tbl, &a), first(t, after, &a)
			if before != id && before != now {
				t.Fatalf("key %+v moved %q -> %q, but only %q changed", a, before, now, id)
			}
			if !slices.Equal(without(r1.Ranked, id), without(r2.Ranked, id)) {
				t.Fatalf("other cells reordered: %v -> %v", ids(r1.Ranked), ids(r2.Ranked))
			}
		}
	})
}

// explain is t.Explain(a), its error ignored.
func explain(t *Table, a *Attrs) Explanation {
	e, _ := t.Explain(a)
	return e
}

// TestPropertyLocalFirst: a key of a partner with a home site ranks the
// home site's cells alone while the site keeps at least its pool's spill
// share of capacity healthy, and otherwise exactly as with no home site
// (the pool as one group); Across says whether the first cell is outside
// the home site, and the natural home is a home-site cell whenever the
// pool has one there.
func TestPropertyLocalFirst(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tbl := mustCompile(t, genSpec(t))
		for _, a := range genAttrs(t, 30) {
			res, err := tbl.Route(&a, nil)
			if errors.Is(err, ErrNoRule) {
				continue
			}
			ex := explain(tbl, &a)
			noSite := a
			noSite.HomeSite = ""
			flat, flatErr := tbl.Route(&noSite, nil)
			homeCells := 0
			for _, c := range ex.Cells {
				if c.Cell.Site == a.HomeSite && a.HomeSite != "" {
					homeCells++
				}
			}
			if ex.Sites.Cells != homeCells {
				t.Fatalf("%+v: Explain counts %d home cells, the pool has %d", a, ex.Sites.Cells, homeCells)
			}
			if homeCells > 0 && res.Home.Site != a.HomeSite {
				t.Fatalf("%+v: natural home %s is in site %q", a, res.Home.ID, res.Home.Site)
			}
			if ex.Sites.Local {
				for _, c := range res.Ranked {
					if c.Cell.Site != a.HomeSite {
						t.Fatalf("%+v: home site local (%+v), but %s of site %q ranked: %v", a, ex.Sites, c.Cell.ID, c.Cell.Site, ids(res.Ranked))
					}
				}
				if ex.Sites.Healthy < ex.Sites.SpillBelow {
					t.Fatalf("%+v: local at %+v", a, ex.Sites)
				}
			} else {
				if err != flatErr || !sameRanking(res.Ranked, flat.Ranked) {
					t.Fatalf("%+v: spilled (%+v), yet ranked %v (%v), not as with no home site %v (%v)", a, ex.Sites, ids(res.Ranked), err, ids(flat.Ranked), flatErr)
				}
				if homeCells > 0 && ex.Sites.Healthy*100 >= ex.Sites.SpillBelow*100+100 {
					t.Fatalf("%+v: spilled at %+v", a, ex.Sites)
				}
			}
			across := err == nil && a.HomeSite != "" && res.Ranked[0].Cell.Site != a.HomeSite
			if res.Across != across || ex.Across != across {
				t.Fatalf("%+v: Across %v, Explain %v, want %v (ranked %v)", a, res.Across, ex.Across, across, ids(res.Ranked))
			}
		}
	})
}

// TestPropertyDrainNeverReturns: lowering a cell's weight step by step never
// moves a key back onto it.
func TestPropertyDrainNeverReturns(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genSpec(t)
		x := rapid.IntRange(0, len(s.Cells)-1).Draw(t, "cell")
		id := s.Cells[x].ID
		weights := rapid.SliceOfN(rapid.IntRange(0, 100), 2, 6).Draw(t, "weights")
		slices.Sort(weights)
		slices.Reverse(weights)
		attrs := genAttrs(t, 40)
		left := make([]bool, len(attrs))
		for _, w := range weights {
			s.Cells[x].Weight = w
			tbl := mustCompile(t, s)
			for i := range attrs {
				home := first(t, tbl, &attrs[i])
				if left[i] && home == id {
					t.Fatalf("key %+v came back to %q at weight %d", attrs[i], id, w)
				}
				left[i] = left[i] || home != id
			}
		}
	})
}
