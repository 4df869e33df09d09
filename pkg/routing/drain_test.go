package routing

import (
	"strconv"
	"testing"
)

func poolSpec(weights ...int) Spec {
	s := Spec{Version: 1, Rules: []Rule{{Name: "all", Pool: "p"}}}
	for i, w := range weights {
		s.Cells = append(s.Cells, Cell{ID: "c" + strconv.Itoa(i), Addr: "a:" + strconv.Itoa(i+1), Pool: "p", Weight: w})
	}
	return s
}

// TestDrainShare: of 100,000 keys at home on a cell, the share that stays
// when the cell is set to weight W is within one point of W, and each key
// that leaves goes to the next cell in its ranking. The keys are fixed, so
// the test is deterministic.
func TestDrainShare(t *testing.T) {
	const n = 100_000
	full := mustCompile(t, poolSpec(100, 100, 100))
	var keys []Attrs
	var next []string // the second cell of each key's full ranking
	dst := make([]Choice, 0, 3)
	for i := 0; len(keys) < n; i++ {
		a := Attrs{PartnerID: "partner-" + strconv.Itoa(i)}
		res, err := full.Route(&a, dst)
		if err != nil {
			t.Fatal(err)
		}
		if res.Ranked[0].Cell.ID == "c0" {
			keys = append(keys, a)
			next = append(next, res.Ranked[1].Cell.ID)
		}
	}
	for _, w := range []int{10, 30, 50, 70, 90} {
		t.Run("weight="+strconv.Itoa(w), func(t *testing.T) {
			drained := mustCompile(t, poolSpec(w, 100, 100))
			stayed := 0
			for i := range keys {
				res, err := drained.Route(&keys[i], dst)
				if err != nil {
					t.Fatal(err)
				}
				switch home := res.Ranked[0].Cell.ID; home {
				case "c0":
					stayed++
				case next[i]:
				default:
					t.Fatalf("key %q moved to %s, want the next cell %s", keys[i].PartnerID, home, next[i])
				}
			}
			share := float64(stayed) * 100 / n
			t.Logf("weight %d: %.2f%% stayed", w, share)
			if share < float64(w)-1 || share > float64(w)+1 {
				t.Errorf("weight %d: %.2f%% of keys stayed, want within 1 point", w, share)
			}
		})
	}
}

// TestBalance: with equal weights, rendezvous hashing spreads keys evenly.
func TestBalance(t *testing.T) {
	const n = 100_000
	tbl := mustCompile(t, poolSpec(100, 100, 100, 100))
	count := map[string]int{}
	dst := make([]Choice, 0, 4)
	for i := range n {
		res, err := tbl.Route(&Attrs{PartnerID: "p" + strconv.Itoa(i)}, dst)
		if err != nil {
			t.Fatal(err)
		}
		count[res.Ranked[0].Cell.ID]++
	}
	for id, c := range count {
		if share := float64(c) * 100 / n; share < 24 || share > 26 {
			t.Errorf("cell %s holds %.2f%% of keys, want 25 ± 1", id, share)
		}
	}
}
