package routing

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestInstancesAndBalancers: a cell's instances are its Addrs, or its Addr
// alone; a pool's balancer is its entry's, round robin without one; both
// survive the table's deep copy and a JSON round trip, and neither
// allocates on the way to a connection.
func TestInstancesAndBalancers(t *testing.T) {
	s := validSpec()
	s.Cells[0].Addr, s.Cells[0].Addrs = "", []string{"10.0.0.1:7000", "10.0.0.2:7000"}
	s.Pools = []Pool{{Name: "eu", Balancer: BalancePriority}, {Name: "us", Balancer: BalanceRoundRobin}}
	tbl, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	s.Cells[0].Addrs[0] = "changed:1" // the table keeps its own copy
	c, _ := tbl.Cell("eu-1")
	if got := c.Instances(); !slices.Equal(got, []string{"10.0.0.1:7000", "10.0.0.2:7000"}) {
		t.Fatalf("eu-1 instances = %v", got)
	}
	if c, _ := tbl.Cell("us-1"); !slices.Equal(c.Instances(), []string{"us-1:7000"}) {
		t.Fatalf("us-1 instances = %v, want its addr", c.Instances())
	}
	if (&Cell{}).Instances() != nil {
		t.Fatal("a cell with no address has instances")
	}
	if got := tbl.Balancer("eu"); got != BalancePriority {
		t.Fatalf("eu balancer = %v", got)
	}
	if got := tbl.Balancer("us"); got != BalanceRoundRobin {
		t.Fatalf("us balancer = %v", got)
	}
	if got := tbl.Balancer("nowhere"); got != BalanceRoundRobin {
		t.Fatalf("unknown pool balancer = %v", got)
	}
	if a := testing.AllocsPerRun(100, func() { _ = tbl.Balancer("eu"); _ = c.Instances() }); a != 0 {
		t.Fatalf("Balancer and Instances allocate %v times", a)
	}
	b, err := json.Marshal(tbl.Spec())
	if err != nil {
		t.Fatal(err)
	}
	var back Spec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Pools[0].Balancer != BalancePriority || !slices.Equal(back.Cells[0].Addrs, c.Addrs) || back.Cells[0].Addr != "" {
		t.Fatalf("JSON round trip lost pools or addrs: %s", b)
	}
	for _, name := range []string{"round_robin", "least_request", "priority", ""} {
		if b, err := ParseBalancer(name); err != nil || (name != "" && b.String() != name) {
			t.Errorf("ParseBalancer(%q) = %v, %v", name, b, err)
		}
	}
	if _, err := ParseBalancer("random"); err == nil {
		t.Error("ParseBalancer accepted random")
	}
}
