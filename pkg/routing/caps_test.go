package routing

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// manyRules is a spec of n distinct per-partner rules on one pool.
func manyRules(n int) Spec {
	s := validSpec()
	s.Rules = nil
	for i := range n {
		s.Rules = append(s.Rules, Rule{Name: "r" + strconv.Itoa(i), Partners: []string{"p-" + strconv.Itoa(i)}, Pool: "eu"})
	}
	return s
}

// TestCapsRefuseWhole: a spec beyond a cap is refused whole with the field
// named, and without paying for the rest of the validation (a 9,000-rule
// table cost each GTR replica 0.65 s of CPU per poll in issue 12).
func TestCapsRefuseWhole(t *testing.T) {
	long := strings.Repeat("x", MaxNameLen+1)
	manyCells := validSpec()
	for i := range MaxCells {
		manyCells.Cells = append(manyCells.Cells, Cell{ID: "c" + strconv.Itoa(i), Addr: "c:1", Pool: "eu", Weight: 1})
	}
	bigLists := manyRules(40)
	for i := range bigLists.Rules {
		for j := range 250 {
			bigLists.Rules[i].Partners = append(bigLists.Rules[i].Partners, "q"+strconv.Itoa(i*1000+j))
		}
	}
	longList := validSpec()
	longList.Rules[1].Partners = make([]string, MaxListLen+1)
	for i := range longList.Rules[1].Partners {
		longList.Rules[1].Partners[i] = "p" + strconv.Itoa(i)
	}
	for _, tc := range []struct {
		name      string
		spec      Spec
		of, field string
		reason    string
	}{
		{"9,000 rules", manyRules(9000), "spec", "Rules", "9000 rules, more than the 1000 allowed"},
		{"too many cells", manyCells, "spec", "Cells", "259 cells, more than the 256 allowed"},
		{"too many list entries", bigLists, "spec", "Rules", "list entries in all rules"},
		{"a long list", longList, "rule", "Partners", "257 entries, more than the 256 allowed"},
		{"a long cell id", func() Spec { s := validSpec(); s.Cells[0].ID = long; return s }(), "cell", "ID", "longer than 64"},
		{"a long pool", func() Spec { s := validSpec(); s.Cells[2].Pool = long; return s }(), "cell", "Pool", "longer than 64"},
		{"a long rule name", func() Spec { s := validSpec(); s.Rules[2].Name = long; return s }(), "rule", "Name", "longer than 64"},
		{"a long market", func() Spec { s := validSpec(); s.Rules[0].Markets[0] = long; return s }(), "rule", "Markets", "longer than 64"},
		{"a min refdata version beyond any", func() Spec { s := validSpec(); s.Rules[2].MinRefdataVersion = 1<<63 - 1; return s }(), "rule", "MinRefdataVersion", "above the highest"},
		{"too many instances", func() Spec {
			s := validSpec()
			s.Cells[0].Addr = ""
			for i := range MaxInstances + 1 {
				s.Cells[0].Addrs = append(s.Cells[0].Addrs, "10.0.0."+strconv.Itoa(i)+":7000")
			}
			return s
		}(), "cell", "Addrs", "17 instance addresses, more than the 16 allowed"},
		{"a bad addr", func() Spec { s := validSpec(); s.Cells[1].Addr = "unix:///tmp/x"; return s }(), "cell", "Addr", "not 1 to 65535"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			errs := specErrors(t, Validate(tc.spec))
			took := time.Since(start)
			found := false
			for _, e := range errs {
				if e.Of == tc.of && e.Field == tc.field && strings.Contains(e.Reason, tc.reason) {
					found = true
				}
			}
			if !found {
				t.Fatalf("no %s %s error with %q in %v", tc.of, tc.field, tc.reason, errs)
			}
			if _, err := Compile(tc.spec); err == nil {
				t.Fatal("Compile accepted it")
			}
			if tc.of == "spec" && (len(errs) > 2 || took > 50*time.Millisecond) {
				t.Fatalf("a spec beyond a cap was validated further: %d errors, %v", len(errs), took)
			}
		})
	}
	// At the caps, a table validates.
	if err := Validate(manyRules(MaxRules)); err != nil {
		t.Fatalf("%d rules: %v", MaxRules, err)
	}
}

func TestCheckAddr(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:7081": true, "dns:///cell.cell-a.svc.cluster.local:7081": true, "cell-a:7081": true,
		"[::1]:7081": true, "dns:///[2001:db8::1]:443": true, "localhost:1": true, "x:65535": true,
		"": false, "a": false, "a:": false, "a:0": false, "a:65536": false, "a:070": false, "a:+1": false,
		":7081": false, "::1:7081": false, "unix:///tmp/s:1": false, "passthrough:///a:1": false,
		"dns://8.8.8.8/a:1": false, "http://a:1": false, "a b:1": false, "-a:1": false, "a..b:1": false,
		"user@a:1": false, "a/b:1": false, "[1.2.3.4]:1": false, "[fe80::1%eth0]:1": false,
		"dns:///" + strings.Repeat("a.", 130) + "b:1": false,
	} {
		if err := CheckAddr(addr); (err == nil) != ok {
			t.Errorf("CheckAddr(%q) = %v, want ok %v", addr, err, ok)
		}
	}
}
