package routing

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"slices"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden.json from the current code")

// golden is testdata/golden.json: a fixed table and keys with the rankings
// they must get. A failure means the hashing changed, which moves live
// traffic between cells: only rewrite it (go test -run Golden -update) on
// purpose.
type golden struct {
	Spec  Spec
	Cases []goldenCase
}

type goldenCase struct {
	Attrs  Attrs
	Rule   string   `json:",omitempty"`
	Ranked []string `json:",omitempty"` // Ranked[0] is the home cell
	Err    string   `json:",omitempty"`
}

func TestGolden(t *testing.T) {
	const path = "testdata/golden.json"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	tbl := mustCompile(t, g.Spec)
	for i, c := range g.Cases {
		var got goldenCase
		got.Attrs = c.Attrs
		res, err := tbl.Route(&c.Attrs, nil)
		switch {
		case errors.Is(err, ErrNoRule):
			got.Err = "no rule"
		case errors.Is(err, ErrNoCell):
			got.Rule, got.Err = res.Rule.Name, "no cell"
		case err != nil:
			t.Fatal(err)
		default:
			got.Rule, got.Ranked = res.Rule.Name, ids(res.Ranked)
		}
		if *update {
			g.Cases[i] = got
			continue
		}
		if got.Rule != c.Rule || got.Err != c.Err || !slices.Equal(got.Ranked, c.Ranked) {
			t.Errorf("case %d %+v:\n got rule %q ranked %v err %q\nwant rule %q ranked %v err %q",
				i, c.Attrs, got.Rule, got.Ranked, got.Err, c.Rule, c.Ranked, c.Err)
		}
	}
	if *update {
		out, err := json.MarshalIndent(g, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
