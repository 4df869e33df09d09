package routing

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestRouteMatchesFirstRule(t *testing.T) {
	s := validSpec()
	// A partner list long enough to be compiled into a map.
	many := []string{"acme"}
	for i := range 20 {
		many = append(many, "p"+strconv.Itoa(i))
	}
	s.Rules[1].Partners = many
	tbl := mustCompile(t, s)
	tests := []struct {
		name  string
		attrs Attrs
		rule  string
	}{
		{"market and payment type", Attrs{PartnerID: "acme", Market: "DE", PaymentType: PaymentCardAuthorization}, "eu-cards"},
		{"second payment type", Attrs{PartnerID: "x", Market: "FR", PaymentType: PaymentCardRefund}, "eu-cards"},
		{"payment type misses, partner list (map) hits", Attrs{PartnerID: "acme", Market: "DE", PaymentType: PaymentBankTransfer}, "big-partner"},
		{"partner from the long list", Attrs{PartnerID: "p17", Market: "US"}, "big-partner"},
		{"market misses", Attrs{PartnerID: "nobody", Market: "US", PaymentType: PaymentCardAuthorization}, "default"},
		{"unknown payment type only matches any", Attrs{PartnerID: "nobody", Market: "DE", PaymentType: "CASH"}, "default"},
		{"market is case sensitive", Attrs{Market: "de", PaymentType: PaymentCardAuthorization}, "default"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := tbl.Route(&tt.attrs, nil)
			if err != nil {
				t.Fatalf("Route: %v", err)
			}
			if res.Rule.Name != tt.rule {
				t.Errorf("rule = %q, want %q", res.Rule.Name, tt.rule)
			}
			ex, err := tbl.Explain(&tt.attrs)
			if err != nil || ex.Rule.Name != tt.rule || len(ex.Misses) != ex.RuleIndex {
				t.Errorf("Explain: rule %q index %d misses %v err %v", ex.Rule.Name, ex.RuleIndex, ex.Misses, err)
			}
		})
	}
}

func TestRouteErrors(t *testing.T) {
	s := validSpec()
	s.Rules = s.Rules[:2]
	s.Cells[2].State = CellDown // the only "us" cell
	tbl := mustCompile(t, s)

	res, err := tbl.Route(&Attrs{PartnerID: "nobody", Market: "US"}, nil)
	if !errors.Is(err, ErrNoRule) || res.Rule != nil || len(res.Ranked) != 0 {
		t.Errorf("unmatched: %+v, %v; want ErrNoRule", res, err)
	}
	ex, err := tbl.Explain(&Attrs{PartnerID: "nobody", Market: "US"})
	if !errors.Is(err, ErrNoRule) || ex.RuleIndex != -1 || len(ex.Misses) != 2 ||
		ex.Misses[0] != (RuleMiss{"eu-cards", "PaymentTypes", ""}) || ex.Misses[1] != (RuleMiss{"big-partner", "Partners", "nobody"}) {
		t.Errorf("Explain unmatched: %+v, %v", ex, err)
	}

	res, err = tbl.Route(&Attrs{PartnerID: "acme"}, make([]Choice, 3))
	if !errors.Is(err, ErrNoCell) || res.Rule == nil || res.Rule.Name != "big-partner" || len(res.Ranked) != 0 {
		t.Errorf("all down: %+v, %v; want ErrNoCell with the rule", res, err)
	}
	ex, err = tbl.Explain(&Attrs{PartnerID: "acme"})
	if !errors.Is(err, ErrNoCell) || len(ex.Cells) != 1 || ex.Cells[0].Verdict != VerdictDown || ex.Cells[0].Rank != -1 {
		t.Errorf("Explain all down: %+v, %v", ex, err)
	}
}

func TestRouteOrder(t *testing.T) {
	// Weights chosen so that every verdict shows up for some key.
	s := Spec{Version: 1, Rules: []Rule{{Name: "all", Pool: "p"}}}
	for i, w := range []int{100, 60, 30, 0, 100} {
		c := Cell{ID: "c" + strconv.Itoa(i), Addr: "a:1", Pool: "p", Weight: w}
		if i == 4 {
			c.State = CellDown
		}
		s.Cells = append(s.Cells, c)
	}
	tbl := mustCompile(t, s)
	dst := make([]Choice, 0, 8)
	seen := map[Verdict]bool{}
	for k := range 2000 {
		a := &Attrs{PartnerID: "partner-" + strconv.Itoa(k)}
		res, err := tbl.Route(a, dst)
		if err != nil {
			t.Fatal(err)
		}
		ex, err := tbl.Explain(a)
		if err != nil {
			t.Fatal(err)
		}
		checkRanking(t, tbl, ex, res.Ranked)
		for _, c := range ex.Cells {
			seen[c.Verdict] = true
		}
	}
	for _, v := range []Verdict{VerdictAccept, VerdictFallback, VerdictDown, VerdictZeroWeight} {
		if !seen[v] {
			t.Errorf("no key produced verdict %v", v)
		}
	}
}

// checkRanking checks a Route ranking against its Explanation and the rules
// of the ranking: accepting cells first, fallbacks next, each group by
// descending score, no down or weight-0 cell, every eligible cell once.
func checkRanking(t interface{ Errorf(string, ...any) }, tbl *Table, ex Explanation, ranked []Choice) {
	byRank := make([]CellVerdict, 0, len(ex.Cells))
	eligible := 0
	for i, c := range ex.Cells {
		if i > 0 && ex.Cells[i-1].Score < c.Score {
			t.Errorf("explanation not in rendezvous order: %v", ex)
		}
		fresh := c.Cell.RefdataVersion >= ex.Rule.MinRefdataVersion
		if c.Cell.State == CellUp && c.Cell.Weight > 0 && fresh && c.Verdict != VerdictOtherSite {
			eligible++
			byRank = append(byRank, c)
		} else if c.Rank != -1 {
			t.Errorf("ineligible cell %s ranked %d", c.Cell.ID, c.Rank)
		}
		wantAccept := c.Bucket < c.Cell.Weight
		if (c.Verdict == VerdictAccept) != (wantAccept && c.Cell.State == CellUp && fresh && c.Verdict != VerdictOtherSite) && !(c.Verdict == VerdictOtherSite && ex.Sites.Local) {
			t.Errorf("cell %s verdict %v with bucket %d weight %d", c.Cell.ID, c.Verdict, c.Bucket, c.Cell.Weight)
		}
	}
	slices.SortStableFunc(byRank, func(a, b CellVerdict) int { return a.Rank - b.Rank })
	if len(ranked) != eligible {
		t.Errorf("ranked %v, want %d eligible cells", ids(ranked), eligible)
		return
	}
	fallback := false
	for i, c := range ranked {
		if c.Cell.State != CellUp || c.Cell.Weight == 0 || c.Cell.RefdataVersion < ex.Rule.MinRefdataVersion {
			t.Errorf("ranked ineligible cell %s", c.Cell.ID)
		}
		if got, ok := tbl.Cell(c.Cell.ID); !ok || !reflect.DeepEqual(got, *c.Cell) {
			t.Errorf("Cell(%q) = %v, %v", c.Cell.ID, got, ok)
		}
		v := byRank[i]
		if v.Rank != i || v.Cell.ID != c.Cell.ID || v.Score != c.Score {
			t.Errorf("Route %v disagrees with Explain at %d: %+v", ids(ranked), i, v)
		}
		if v.Verdict == VerdictFallback {
			fallback = true
		} else if fallback {
			t.Errorf("accepting cell %s after a fallback in %v", c.Cell.ID, ids(ranked))
		}
		if i > 0 && byRank[i-1].Verdict == v.Verdict && ranked[i-1].Score < c.Score {
			t.Errorf("ranking %v not by descending score within a group", ids(ranked))
		}
	}
}

func TestHashFieldSelectsKey(t *testing.T) {
	a := Attrs{TransactionID: "t", PartnerID: "p", Market: "m", MerchantID: "mc"}
	for f, want := range map[HashField]string{HashPartner: "p", HashMarket: "m", HashMerchant: "mc", HashTransaction: "t"} {
		if got := f.key(&a); got != want {
			t.Errorf("%v.key = %q, want %q", f, got, want)
		}
		s := validSpec()
		s.Rules[2].HashOn = f
		ex, err := mustCompile(t, s).Explain(&a)
		if err != nil || ex.Key != want || ex.HashOn != f {
			t.Errorf("Explain with %v: key %q, %v", f, ex.Key, err)
		}
	}
}

func TestParseHashField(t *testing.T) {
	tests := []struct {
		in   string
		want HashField
		err  bool
	}{
		{"", HashPartner, false},
		{"partner", HashPartner, false},
		{"market", HashMarket, false},
		{"merchant", HashMerchant, false},
		{"transaction", HashTransaction, false},
		{"Partner", 0, true},
		{"card", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseHashField(tt.in)
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("ParseHashField(%q) = %v, %v", tt.in, got, err)
		}
		if err == nil && tt.in != "" && got.String() != tt.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tt.in)
		}
	}
	if s := HashField(9).String(); s != "HashField(9)" {
		t.Errorf("String of unknown = %q", s)
	}
}

func TestSpecJSONRoundTrip(t *testing.T) {
	s := validSpec()
	s.Cells[1].State = CellDown
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"HashOn":"merchant"`) || !strings.Contains(string(b), `"State":"down"`) {
		t.Errorf("enums not encoded by name: %s", b)
	}
	var back Spec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	b2, _ := json.Marshal(back)
	if string(b) != string(b2) {
		t.Errorf("round trip changed spec:\n%s\n%s", b, b2)
	}
}

func TestTableIsACopy(t *testing.T) {
	s := validSpec()
	tbl := mustCompile(t, s)
	before, _ := json.Marshal(tbl.Spec())
	s.Cells[0].Weight = 1
	s.Rules[0].Markets[0] = "XX"
	got := tbl.Spec()
	got.Cells[1].Addr = "elsewhere"
	got.Rules[0].PaymentTypes[0] = PaymentBankTransfer
	after, _ := json.Marshal(tbl.Spec())
	if string(before) != string(after) {
		t.Errorf("table changed through the input or Spec():\n%s\n%s", before, after)
	}
	if tbl.Version() != 7 {
		t.Errorf("Version = %d", tbl.Version())
	}
	if c, ok := tbl.Cell("eu-2"); !ok || c.Weight != 50 {
		t.Errorf("Cell(eu-2) = %v, %v", c, ok)
	}
	if _, ok := tbl.Cell("nope"); ok {
		t.Error("Cell(nope) found")
	}
	if tbl.MaxPoolSize() != 2 {
		t.Errorf("MaxPoolSize = %d, want 2", tbl.MaxPoolSize())
	}
	ex, err := tbl.Explain(&Attrs{Market: "DE", PaymentType: PaymentCardRefund, MerchantID: "m1"})
	if err != nil || !strings.Contains(ex.String(), `rule "eu-cards" matches`) {
		t.Errorf("Explain.String:\n%s\n%v", ex, err)
	}
}

func TestRouteDoesNotAllocate(t *testing.T) {
	tbl, attrs := benchTable(t, 10, 10)
	// The same table with every other rule gated on reference data that
	// some cells lack, so the stale skip is on the measured path too.
	s := tbl.Spec()
	for i := range s.Cells {
		s.Cells[i].RefdataVersion = uint64(i % 4)
	}
	for i := range s.Rules {
		if i%2 == 0 {
			s.Rules[i].MinRefdataVersion = 2
		}
	}
	gated := mustCompile(t, s)
	// And in two sites, the partners homed in one or the other (or none),
	// one site's cells drained below its spill share in one of the pools.
	for i := range s.Cells {
		s.Cells[i].Site = []string{"site-a", "site-b"}[i%2]
		if i%2 == 1 {
			s.Cells[i].Weight = 10
		}
	}
	sited := mustCompile(t, s)
	homed := slices.Clone(attrs)
	for i := range homed {
		homed[i].HomeSite = []string{"site-a", "site-b", "", "site-z"}[i%4]
	}
	for _, tb := range []struct {
		name  string
		tbl   *Table
		attrs []Attrs
	}{{"plain", tbl, attrs}, {"gated", gated, attrs}, {"sites", sited, homed}} {
		dst := make([]Choice, 0, tb.tbl.MaxPoolSize())
		i := 0
		allocs := testing.AllocsPerRun(1000, func() {
			_, _ = tb.tbl.Route(&tb.attrs[i%len(tb.attrs)], dst)
			i++
		})
		if allocs != 0 {
			t.Fatalf("%s: Route allocates %v times per call, want 0", tb.name, allocs)
		}
	}
}

// TestImports holds the package to what its doc comment promises: no I/O,
// logging, locks or RPC machinery in non-test code.
func TestImports(t *testing.T) {
	allowed := map[string]bool{
		"errors": true, "fmt": true, "slices": true, "strconv": true, "strings": true,
		"net/netip":                    true, // parsing cell addresses only: no I/O
		"github.com/cespare/xxhash/v2": true,
	}
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !allowed[p] {
				t.Errorf("%s imports %q; routing must stay pure (see the package doc)", f, p)
			}
		}
	}
}

// Home is the first cell of the key's ranking over the whole pool, the
// same whatever the cells' weights and health: drained or down, the home
// stays the home.
func TestRouteHome(t *testing.T) {
	spec := Spec{Version: 1, Cells: []Cell{
		{ID: "cell-a", Addr: "127.0.0.1:1", Pool: "p", Weight: 100},
		{ID: "cell-b", Addr: "127.0.0.1:2", Pool: "p", Weight: 100},
		{ID: "cell-c", Addr: "127.0.0.1:3", Pool: "p", Weight: 100},
	}, Rules: []Rule{{Name: "all", Pool: "p"}}}
	homes := map[string]string{}
	tbl, err := Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		a := &Attrs{PartnerID: fmt.Sprintf("p-%03d", i), Market: "GB", PaymentType: "CARD_AUTHORIZATION"}
		res, err := tbl.Route(a, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Home == nil || res.Home.ID != res.Ranked[0].Cell.ID {
			t.Fatalf("%s: home %v, all cells up at full weight rank %s first", a.PartnerID, res.Home, res.Ranked[0].Cell.ID)
		}
		homes[a.PartnerID] = res.Home.ID
	}
	for _, change := range []func(*Spec){
		func(s *Spec) { s.Cells[0].Weight = 0 },
		func(s *Spec) { s.Cells[1].State = CellDown },
		func(s *Spec) { s.Cells[2].Weight = 30 },
	} {
		s := spec.clone()
		change(&s)
		tbl, err := Compile(s)
		if err != nil {
			t.Fatal(err)
		}
		for p, want := range homes {
			res, _ := tbl.Route(&Attrs{PartnerID: p, Market: "GB", PaymentType: "CARD_AUTHORIZATION"}, nil)
			if res.Home == nil || res.Home.ID != want {
				t.Fatalf("%s: home %v after a weight or health change, want %s", p, res.Home, want)
			}
		}
	}
}
