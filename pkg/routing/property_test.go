package routing

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// genSpec draws a valid spec: 1..3 pools, each with at least one cell, some
// cells drained or down; one rule per partner ahead of a catch-all, each
// with a random pool and hash field.
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
		}
		if rapid.IntRange(0, 9).Draw(t, "down") == 0 {
			c.State = CellDown
		}
		s.Cells = append(s.Cells, c)
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
