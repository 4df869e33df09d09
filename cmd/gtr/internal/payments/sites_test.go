package payments

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cellpay/cellpay/cmd/gtr/internal/cellconn"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

// acrossCounts is a Metrics that counts Across by "home site>site".
type acrossCounts struct {
	locations
	mu     sync.Mutex
	across map[string]int
}

func (a *acrossCounts) Across(home, site string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.across[home+">"+site]++
}

// TestHomeSiteKeepsItsPartners: a partner homed in a site is served by
// that site's cell, whatever the rendezvous ranking over both sites, and
// the cell is told it is the natural home; with that site's cell down,
// the other site's takes it, counted as across, and is not the natural
// home (so it claims in the directory).
func TestHomeSiteKeepsItsPartners(t *testing.T) {
	cells := map[string]*fakeCell{"a1": {id: "a1"}, "b1": {id: "b1"}}
	spec := routing.Spec{Version: 1, Rules: []routing.Rule{{Name: "all", Pool: "p"}}}
	for _, id := range []string{"a1", "b1"} {
		f := cells[id]
		f.do = func(r *cellproto.ProcessRequest, s srv) error { return approve(r, s, f.id) }
		spec.Cells = append(spec.Cells, routing.Cell{ID: id, Addr: serve(t, f), Pool: "p", Weight: 100, Site: "site-" + id[:1]})
	}
	var table *routing.Table
	compile := func() {
		var err error
		if table, err = routing.Compile(spec); err != nil {
			t.Fatal(err)
		}
	}
	compile()
	pool := cellconn.New()
	t.Cleanup(pool.Close)
	// Eight partners, homed in turn in each site: the hash alone would put
	// about half on the other site's cell (all eight right by chance: 1 in
	// 256).
	home := map[string]string{}
	for i := 1; i <= 8; i++ {
		home[fmt.Sprintf("p-%03d", i)] = map[bool]string{true: "site-a", false: "site-b"}[i%2 == 1]
	}
	m := &acrossCounts{across: map[string]int{}}
	s, err := New(Config{Table: func() *routing.Table { return table }, Cells: pool, AttemptTimeout: 300 * time.Millisecond,
		HomeSite: func(p string) string { return home[p] }, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	submit := func(partner, id string) (cell string, natural bool) {
		t.Helper()
		r := req(id)
		r.PartnerId = partner
		txn, err := s.SubmitTransaction(ctx(t), r)
		if err != nil {
			t.Fatalf("%s/%s: %v", partner, id, err)
		}
		f := cells[txn.GetCellId()]
		f.mu.Lock()
		defer f.mu.Unlock()
		return txn.GetCellId(), f.seen[len(f.seen)-1].GetHome()
	}
	for partner, site := range home {
		want := map[string]string{"site-a": "a1", "site-b": "b1"}[site]
		if cell, natural := submit(partner, partner+"-t1"); cell != want || !natural {
			t.Fatalf("%s: served by %s (natural home %v), want %s, its home site's", partner, cell, natural, want)
		}
	}
	if len(m.across) != 0 {
		t.Fatalf("across %v with both sites healthy", m.across)
	}
	spec.Cells[0].State = routing.CellDown // site-a's only cell
	compile()
	if cell, natural := submit("p-001", "p-001-t2"); cell != "b1" || natural {
		t.Fatalf("site-a down: served by %s (natural home %v), want b1, not the natural home", cell, natural)
	}
	if cell, _ := submit("p-002", "p-002-t2"); cell != "b1" {
		t.Fatalf("p-002 served by %s", cell)
	}
	if m.across["site-a>site-b"] != 1 || len(m.across) != 1 {
		t.Fatalf("across %v, want one site-a>site-b", m.across)
	}
}
