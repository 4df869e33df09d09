package admin

import (
	"strings"
	"testing"

	"github.com/cellpay/cellpay/pkg/adminproto"
)

// TestFreshness: a rule's min_refdata_version goes through ApplyTable and
// GetTable, ListCells shows the version each cell reported, and Explain
// names the cells skipped for serving older reference data.
func TestFreshness(t *testing.T) {
	f := start(t, token)
	c := client(t, f.addr, token)
	ctx := ctxFor(t)
	tbl, err := c.GetTable(ctx, &adminproto.GetTableRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tbl.Version = 2
	tbl.Rules = append([]*adminproto.Rule{{Name: "fresh", Partners: []string{"p-fresh"}, Pool: "main", MinRefdataVersion: 3}}, tbl.Rules...)
	if res, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: tbl}); err != nil || !res.Applied {
		t.Fatalf("apply: %v %v", res, err)
	}
	got, err := c.GetTable(ctx, &adminproto.GetTableRequest{})
	if err != nil || got.Rules[0].GetMinRefdataVersion() != 3 || got.Rules[1].GetMinRefdataVersion() != 0 {
		t.Fatalf("get after apply: %v %v", got, err)
	}

	f.st.SetRefdataVersion("cell-a", 3)
	f.st.SetRefdataVersion("cell-b", 2)
	lc, err := c.ListCells(ctx, &adminproto.ListCellsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range lc.Cells {
		want := map[string]uint64{"cell-a": 3, "cell-b": 2, "cell-c": 0}[cs.Id]
		if cs.RefdataVersion != want || (cs.RefdataSince != nil) != (cs.Id != "cell-c") {
			t.Errorf("ListCells %s: refdata v%d since %v, want v%d", cs.Id, cs.RefdataVersion, cs.RefdataSince, want)
		}
	}

	attrs := &adminproto.Attrs{PartnerId: "p-fresh", Market: "GB", PaymentType: "CARD_AUTHORIZATION"}
	e, err := c.Explain(ctx, &adminproto.ExplainRequest{Attrs: attrs})
	if err != nil {
		t.Fatal(err)
	}
	if e.Rule != "fresh" || e.MinRefdataVersion != 3 || e.Error != "" || !strings.Contains(e.Text, "needs reference data v3") {
		t.Fatalf("explain: %v", e)
	}
	for _, cv := range e.Cells {
		switch cv.CellId {
		case "cell-a":
			if cv.Rank != 1 || cv.Verdict != "accepts" || cv.RefdataVersion != 3 {
				t.Errorf("cell-a: %v", cv)
			}
		case "cell-b":
			if cv.Rank != 0 || cv.Verdict != "skipped: stale reference data" || cv.Why != "skipped: serves reference data v2, rule needs v3" || cv.RefdataVersion != 2 {
				t.Errorf("cell-b: %v", cv)
			}
		case "cell-c":
			if cv.Rank != 0 || cv.Verdict != "skipped: stale reference data" || !strings.Contains(cv.Why, "no known reference data version") {
				t.Errorf("cell-c: %v", cv)
			}
		}
	}

	f.st.SetRefdataVersion("cell-a", 1)
	e, err = c.Explain(ctx, &adminproto.ExplainRequest{Attrs: attrs})
	if err != nil || e.Error != "routing: no cell available" {
		t.Fatalf("all stale: %v %v", e, err)
	}
	rk, err := c.RouteKeys(ctx, &adminproto.RouteKeysRequest{Attrs: []*adminproto.Attrs{attrs}})
	if err != nil || rk.Home[0] != "" {
		t.Fatalf("route keys with all stale: %v %v", rk, err)
	}
}
