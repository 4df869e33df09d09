package state

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cellpay/cellpay/pkg/routing"
)

// gatedDoc is testDoc with a rule ahead of the catch-all that needs
// reference data v3 for partner "p-fresh".
func gatedDoc() Doc {
	d := testDoc()
	d.Rules = append([]routing.Rule{{Name: "fresh", Partners: []string{"p-fresh"}, Pool: "main", MinRefdataVersion: 3}}, d.Rules...)
	return d
}

func ranking(t *testing.T, tbl *routing.Table, partner string) ([]string, error) {
	t.Helper()
	var buf [8]routing.Choice
	res, err := tbl.Route(&routing.Attrs{PartnerID: partner, Market: "GB", PaymentType: routing.PaymentCardAuthorization}, buf[:0])
	var out []string
	for _, c := range res.Ranked {
		out = append(out, c.Cell.ID)
	}
	return out, err
}

func TestSetRefdataVersionGates(t *testing.T) {
	s, clk, h := newStateH(t)
	if err := s.Apply(gatedDoc(), 2); err != nil {
		t.Fatal(err)
	}
	// Ungated keys, to check that versions never move them.
	homes := map[string]string{}
	for i := range 50 {
		p := "p-" + strconv.Itoa(i)
		homes[p] = home(t, s.Table(), p)
	}
	// No cell has reported: unknown is below every minimum.
	if got, err := ranking(t, s.Table(), "p-fresh"); !errors.Is(err, routing.ErrNoCell) {
		t.Fatalf("before any report: %v, %v; want ErrNoCell", got, err)
	}

	s.SetRefdataVersion("cell-a", 3)
	if got, err := ranking(t, s.Table(), "p-fresh"); err != nil || !slices.Equal(got, []string{"cell-a"}) {
		t.Fatalf("cell-a at v3: %v, %v", got, err)
	}
	clk.Add(time.Second)
	s.SetRefdataVersion("cell-b", 5)
	s.SetRefdataVersion("cell-c", 2)
	got, err := ranking(t, s.Table(), "p-fresh")
	if slices.Sort(got); err != nil || !slices.Equal(got, []string{"cell-a", "cell-b"}) {
		t.Fatalf("a v3, b v5, c v2: %v, %v", got, err)
	}
	if v, since := s.RefdataVersion("cell-b"); v != 5 || !since.Equal(clk.Now()) {
		t.Fatalf("RefdataVersion(cell-b) = %d, %v", v, since)
	}
	if v, since := s.RefdataVersion("nobody"); v != 0 || !since.IsZero() {
		t.Fatalf("RefdataVersion(nobody) = %d, %v", v, since)
	}
	if c, _ := s.Table().Cell("cell-c"); c.RefdataVersion != 2 {
		t.Fatalf("published cell-c = %+v", c)
	}

	// The same version again publishes nothing new.
	tbl := s.Table()
	s.SetRefdataVersion("cell-b", 5)
	if s.Table() != tbl {
		t.Fatal("an unchanged version republished the table")
	}

	// A cell going back (restarted on older data) is believed.
	s.SetRefdataVersion("cell-a", 1)
	if got, err := ranking(t, s.Table(), "p-fresh"); err != nil || !slices.Equal(got, []string{"cell-b"}) {
		t.Fatalf("cell-a back to v1: %v, %v", got, err)
	}

	// Versions are local: a newly applied doc keeps them.
	d := gatedDoc()
	d.Version = 3
	if err := s.Apply(d, 3); err != nil {
		t.Fatal(err)
	}
	if got, err := ranking(t, s.Table(), "p-fresh"); err != nil || !slices.Equal(got, []string{"cell-b"}) {
		t.Fatalf("after a new doc: %v, %v", got, err)
	}

	// Health still applies: a fresh cell that is down is skipped.
	h.set(s, "cell-b", 0)
	if got, err := ranking(t, s.Table(), "p-fresh"); !errors.Is(err, routing.ErrNoCell) {
		t.Fatalf("only fresh cell down: %v, %v", got, err)
	}
	h.set(s, "cell-b", 100)

	// A ramp tick does not lose the versions.
	if err := s.Apply(func() Doc {
		d := gatedDoc()
		d.Version = 4
		if err := d.Drain("cell-c", 50, clk.Now(), time.Minute); err != nil {
			t.Fatal(err)
		}
		return d
	}(), 4); err != nil {
		t.Fatal(err)
	}
	clk.Add(30 * time.Second)
	if !s.Refresh() {
		t.Fatal("ramp did not refresh")
	}
	if c, _ := s.Table().Cell("cell-b"); c.RefdataVersion != 5 {
		t.Fatalf("after a ramp tick cell-b = %+v", c)
	}

	// Gating never moved an ungated key (health and drain of cell-c aside).
	s2, _ := newState(t)
	for p, h := range homes {
		if got := home(t, s2.Table(), p); got != h {
			t.Fatalf("ungated %s: home %s, was %s", p, got, h)
		}
	}
	for _, c := range []string{"cell-a", "cell-b", "cell-c"} {
		s2.SetRefdataVersion(c, 9)
	}
	for p, h := range homes {
		if got := home(t, s2.Table(), p); got != h {
			t.Fatalf("ungated %s moved %s -> %s with versions set", p, h, got)
		}
	}
}

// TestRefdataOnlyForCellsInTheTable: before the first table, and for a
// cell not in it, a report is refused and nothing is kept (a cell reports
// again every second).
func TestRefdataOnlyForCellsInTheTable(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if s.SetRefdataVersion("cell-a", 4) {
		t.Fatal("a version was recorded before any table")
	}
	if s.Table() != nil {
		t.Fatal("a version published a table before any Apply")
	}
	if err := s.Apply(gatedDoc(), 1); err != nil {
		t.Fatal(err)
	}
	if got, err := ranking(t, s.Table(), "p-fresh"); !errors.Is(err, routing.ErrNoCell) {
		t.Fatalf("a version reported before the table counted: %v, %v", got, err)
	}
	if s.SetRefdataVersion("cell-z", 4) {
		t.Fatal("cell-z, not in the table, was recorded")
	}
	if v, _ := s.RefdataVersion("cell-z"); v != 0 {
		t.Fatalf("cell-z kept at v%d", v)
	}
	if !s.SetRefdataVersion("cell-a", 4) {
		t.Fatal("cell-a, in the table, was refused")
	}
	if got, err := ranking(t, s.Table(), "p-fresh"); err != nil || !slices.Equal(got, []string{"cell-a"}) {
		t.Fatalf("remembered version: %v, %v", got, err)
	}
	if sp := s.SpecFor(gatedDoc()); sp.Cells[0].RefdataVersion != 4 || sp.Cells[1].RefdataVersion != 0 {
		t.Fatalf("SpecFor cells %+v", sp.Cells)
	}
}

func TestDocCarriesMinRefdataVersion(t *testing.T) {
	b, err := json.Marshal(gatedDoc())
	if err != nil {
		t.Fatal(err)
	}
	var back Doc
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Rules[0].MinRefdataVersion != 3 || back.Clone().Rules[0].MinRefdataVersion != 3 {
		t.Fatalf("round trip lost the minimum: %s", b)
	}
}
