package config

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/cellpay/cellpay/pkg/routing"
)

func TestLoadSample(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	spec, err := Load(filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "config", "gtr.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Cells) != 3 || len(spec.Rules) == 0 || spec.Cells[0].Weight != 100 {
		t.Fatalf("sample table: %+v", spec)
	}
}

// TestLoadTwoSitesSample: make run SITES=2's table loads, two cells in
// each site, each with its two instances on its site's address.
func TestLoadTwoSitesSample(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	spec, err := Load(filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "config", "gtr-sites.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]string{"site-a": "127.0.1.1:", "site-b": "127.0.2.1:"}
	sites := map[string]int{}
	for _, c := range spec.Cells {
		sites[c.Site]++
		if len(c.Addrs) != 2 || !strings.HasPrefix(c.Addrs[0], hosts[c.Site]) || !strings.HasPrefix(c.Addrs[1], hosts[c.Site]) {
			t.Errorf("cell %s of %q: addresses %v", c.ID, c.Site, c.Addrs)
		}
	}
	if sites["site-a"] != 2 || sites["site-b"] != 2 || len(sites) != 2 {
		t.Fatalf("cells by site %v, want two in each of site-a and site-b", sites)
	}
}

func TestParseErrors(t *testing.T) {
	good := "version: 1\ncells:\n  - {id: a, addr: 127.0.0.1:1, pool: p}\nrules:\n  - {name: all, pool: p}\n"
	if _, err := Parse([]byte(good)); err != nil {
		t.Fatalf("good table refused: %v", err)
	}
	cases := map[string]struct{ yaml, want string }{
		"empty":          {"", "empty"},
		"unknown key":    {strings.Replace(good, "pool: p}\nrules", "pool: p, colour: red}\nrules", 1), "colour"},
		"no version":     {strings.Replace(good, "version: 1", "version: 0", 1), "version"},
		"weight":         {strings.Replace(good, "pool: p}\nrules", "pool: p, weight: 101}\nrules", 1), "weight"},
		"unknown pool":   {strings.Replace(good, "{name: all, pool: p}", "{name: all, pool: q}", 1), "pool"},
		"bad hash":       {strings.Replace(good, "{name: all, pool: p}", "{name: all, pool: p, hash_on: colour}", 1), "hash_on"},
		"not yaml":       {"version: [", "yaml"},
		"negative wt":    {strings.Replace(good, "pool: p}\nrules", "pool: p, weight: -1}\nrules", 1), "weight"},
		"negative min":   {strings.Replace(good, "{name: all, pool: p}", "{name: all, pool: p, min_refdata_version: -1}", 1), "uint64"},
		"addr and addrs": {strings.Replace(good, "addr: 127.0.0.1:1,", "addr: 127.0.0.1:1, addrs: [127.0.0.1:2],", 1), "both addr and addrs"},
		"bad balancer":   {good + "pools: [{name: p, balancer: random}]\n", `pools[0] "p": balancer`},
		"pool entry":     {good + "pools: [{name: q, balancer: priority}]\n", `pool "q" has no cells`},
		"duplicate ids":  {strings.Replace(good, "rules:", "  - {id: a, addr: 127.0.0.1:2, pool: p}\nrules:", 1), "duplicate"},
		"bad site":       {strings.Replace(good, "pool: p}\nrules", "pool: p, site: Site_A}\nrules", 1), `cell "a": site "Site_A": want lowercase`},
		"site as a list": {strings.Replace(good, "pool: p}\nrules", "pool: p, site: [a, b]}\nrules", 1), "line 3: cannot unmarshal !!seq into string"},
	}
	for name, c := range cases {
		if _, err := Parse([]byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, c.want)
		}
	}
}

func TestMinRefdataVersion(t *testing.T) {
	yaml := "version: 1\ncells:\n  - {id: a, addr: 127.0.0.1:1, pool: p}\nrules:\n" +
		"  - {name: fresh, partners: [p-1], pool: p, min_refdata_version: 5}\n  - {name: all, pool: p}\n"
	spec, err := Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if spec.Rules[0].MinRefdataVersion != 5 || spec.Rules[1].MinRefdataVersion != 0 {
		t.Fatalf("rules %+v", spec.Rules)
	}
}

func TestInstances(t *testing.T) {
	yaml := "version: 1\ncells:\n  - {id: a, addrs: [127.0.0.1:7081, 127.0.0.1:7181], pool: p}\n  - {id: b, addr: 127.0.0.1:7082, pool: p}\n" +
		"pools:\n  - {name: p, balancer: least_request}\nrules:\n  - {name: all, pool: p}\n"
	spec, err := Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.Cells[0].Instances(); len(got) != 2 || got[1] != "127.0.0.1:7181" || spec.Cells[0].Addr != "" {
		t.Fatalf("cell a: %+v", spec.Cells[0])
	}
	if got := spec.Cells[1].Instances(); len(got) != 1 || got[0] != "127.0.0.1:7082" {
		t.Fatalf("cell b: %+v", spec.Cells[1])
	}
	if len(spec.Pools) != 1 || spec.Pools[0].Balancer != routing.BalanceLeastRequest {
		t.Fatalf("pools %+v", spec.Pools)
	}
}

// TestSites: a cell's site is read, kept through the routing spec, and
// survives a round trip through the YAML form; a cell without one has "".
func TestSites(t *testing.T) {
	in := "version: 4\ncells:\n  - {id: a, addr: 127.0.0.1:1, pool: p, site: site-a}\n  - {id: b, addr: 127.0.0.1:2, pool: p, site: site-b, weight: 40}\n" +
		"  - {id: c, addr: 127.0.0.1:3, pool: p}\nrules:\n  - {name: all, pool: p}\n"
	spec, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{spec.Cells[0].Site, spec.Cells[1].Site, spec.Cells[2].Site}; got[0] != "site-a" || got[1] != "site-b" || got[2] != "" {
		t.Fatalf("sites %q", got)
	}
	var f File
	if err := yaml.Unmarshal([]byte(in), &f); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(out)
	if err != nil {
		t.Fatalf("re-reading %s: %v", out, err)
	}
	for i, c := range again.Cells {
		if c.ID != spec.Cells[i].ID || c.Site != spec.Cells[i].Site || c.Weight != spec.Cells[i].Weight {
			t.Errorf("round trip: cell %d is %+v, was %+v", i, c, spec.Cells[i])
		}
	}
}
