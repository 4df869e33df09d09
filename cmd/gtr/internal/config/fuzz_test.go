package config

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cellpay/cellpay/pkg/routing"
)

// FuzzParse feeds the YAML routing table decoder anything: it must never
// panic, and what it accepts is a table within routing's caps that
// compiles.
func FuzzParse(f *testing.F) {
	for _, path := range []string{"../../../../config/gtr.yaml", "../../../../deploy/k8s/overlays/platform/gtr.yaml"} {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("version: 3\ncells:\n  - {id: eu-1, addr: \"[::1]:7000\", pool: eu}\n  - {id: eu-2, addr: eu-2:7000, pool: eu, weight: 30}\n" +
		"rules:\n  - {name: cards, markets: [DE, FR], payment_types: [CARD_AUTHORIZATION], pool: eu, hash_on: merchant, min_refdata_version: 4}\n  - {name: rest, pool: eu}\n"))
	f.Add([]byte("version: 2\ncells:\n  - {id: a, addrs: [\"127.0.0.1:7081\", \"127.0.0.1:7181\"], pool: p}\n  - {id: b, addr: \"dns:///cell.b.svc:7081\", pool: p}\n" +
		"pools:\n  - {name: p, balancer: priority}\nrules:\n  - {name: r, pool: p}\n"))
	f.Add([]byte("version: 5\ncells:\n  - {id: a, addr: \"a:1\", pool: p, site: site-a}\n  - {id: b, addr: \"b:1\", pool: p, site: Site-B}\nrules: [{name: r, pool: p}]\n"))
	f.Add([]byte("version: 2\ncells: [{id: a, addr: \"a:1\", addrs: [\"a:2\"], pool: p}]\npools: [{name: q, balancer: random}]\nrules: [{name: r, pool: p}]\n"))
	f.Add([]byte("version: 1\ncells: &c [{id: a, addr: \"a:1\", pool: p}]\nrules: [{name: r, pool: p, partners: [*c]}]\n"))
	f.Add([]byte("version: 18446744073709551615\ncells: []\n"))
	f.Add([]byte("a: &a [x,x,x,x]\nb: &b [*a,*a,*a,*a]\nc: [*b,*b,*b,*b]\n"))
	f.Add([]byte("version: 1\ncells: [{id: a, addr: \"unix:///tmp/x\", pool: p}]\nrules: [{name: r, pool: p}]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		spec, err := Parse(b)
		if err != nil {
			return
		}
		if spec.Version == 0 || len(spec.Cells) == 0 || len(spec.Cells) > routing.MaxCells || len(spec.Rules) > routing.MaxRules {
			t.Fatalf("accepted a table of version %d, %d cells, %d rules", spec.Version, len(spec.Cells), len(spec.Rules))
		}
		for _, c := range spec.Cells {
			if (c.Addr == "") == (len(c.Addrs) == 0) || len(c.Addrs) > routing.MaxInstances {
				t.Fatalf("accepted cell %q with addr %q and %d addrs", c.ID, c.Addr, len(c.Addrs))
			}
			if err := routing.CheckSite(c.Site); err != nil {
				t.Fatalf("accepted cell %q with site %q: %v", c.ID, c.Site, err)
			}
			for _, a := range c.Instances() {
				if err := routing.CheckAddr(a); err != nil {
					t.Fatalf("accepted addr %q: %v", a, err)
				}
			}
		}
		tbl, err := routing.Compile(spec)
		if err != nil {
			t.Fatalf("accepted a table that does not compile: %v", err)
		}
		for _, p := range spec.Pools {
			if tbl.Balancer(p.Name) != p.Balancer {
				t.Fatalf("pool %q: balancer %v, table says %v", p.Name, p.Balancer, tbl.Balancer(p.Name))
			}
		}
	})
}

// TestOversizedTableRefused: a 9,000-rule YAML table is refused whole,
// naming the rules.
func TestOversizedTableRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString("version: 1\ncells:\n  - {id: a, addr: \"a:1\", pool: p}\nrules:\n")
	for i := range 9000 {
		b.WriteString("  - {name: r" + strconv.Itoa(i) + ", partners: [p-" + strconv.Itoa(i) + "], pool: p}\n")
	}
	_, err := Parse([]byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "9000 rules, more than the 1000 allowed") {
		t.Fatalf("9,000 rules: %v", err)
	}
}
