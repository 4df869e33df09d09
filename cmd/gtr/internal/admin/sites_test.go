package admin

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/adminproto"
)

// TestSites: a table that names its cells' sites moves no key (routing
// does not look at a site), and ListCells, GetTable and GetEffectiveTable
// return each cell's site; a bad site is refused naming its field.
func TestSites(t *testing.T) {
	f := start(t, token)
	c := client(t, f.addr, token)
	ctx := ctxFor(t)
	tbl, err := c.GetTable(ctx, &adminproto.GetTableRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tbl.Version = 2
	tbl.Cells[0].Site, tbl.Cells[1].Site = "site-a", "site-b"

	bad := &adminproto.Table{Version: 2, Rules: tbl.Rules}
	for _, cell := range tbl.Cells {
		bad.Cells = append(bad.Cells, &adminproto.Cell{Id: cell.Id, Addr: cell.Addr, Pool: cell.Pool, Weight: cell.Weight, Site: cell.Site})
	}
	bad.Cells[1].Site = "Site B"
	_, err = c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: bad})
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !hasField(st, "table.cells[1].site") {
		t.Fatalf("a bad site: %v, want INVALID_ARGUMENT naming table.cells[1].site", err)
	}

	dry, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: tbl, DryRun: true, Samples: 20000})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range dry.Moves {
		if m.FromCell != m.ToCell {
			t.Fatalf("naming sites moves keys: %v", dry.Moves)
		}
	}
	if res, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: tbl, ExpectedVersion: 1}); err != nil || !res.Applied {
		t.Fatalf("apply: %v %v", res, err)
	}

	want := map[string]string{"cell-a": "site-a", "cell-b": "site-b", "cell-c": ""}
	got, err := c.GetTable(ctx, &adminproto.GetTableRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cell := range got.Cells {
		if cell.GetSite() != want[cell.GetId()] {
			t.Errorf("GetTable: %s at site %q, want %q", cell.GetId(), cell.GetSite(), want[cell.GetId()])
		}
	}
	list, err := c.ListCells(ctx, &adminproto.ListCellsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cell := range list.Cells {
		if cell.GetSite() != want[cell.GetId()] {
			t.Errorf("ListCells: %s at site %q, want %q", cell.GetId(), cell.GetSite(), want[cell.GetId()])
		}
	}
	eff, err := c.GetEffectiveTable(ctx, &adminproto.GetEffectiveTableRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cell := range eff.Cells {
		if cell.GetSite() != want[cell.GetId()] {
			t.Errorf("GetEffectiveTable: %s at site %q, want %q", cell.GetId(), cell.GetSite(), want[cell.GetId()])
		}
	}
}

// TestPartnerHomeSite: AddPartner takes a home site, ListPartners shows
// it, and a bad one is refused naming home_site.
func TestPartnerHomeSite(t *testing.T) {
	f := start(t, token)
	c := client(t, f.addr, token)
	ctx := ctxFor(t)
	_, err := c.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: "p-bad", HomeSite: "Site_A"})
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !hasField(st, "home_site") {
		t.Fatalf("a bad home site: %v, want INVALID_ARGUMENT naming home_site", err)
	}
	add, err := c.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: "p-001", HomeSite: "site-a"})
	if err != nil || add.GetPartner().GetHomeSite() != "site-a" {
		t.Fatalf("add: %v %v", add, err)
	}
	if _, err := c.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: "p-002"}); err != nil {
		t.Fatal(err)
	}
	list, err := c.ListPartners(ctx, &adminproto.ListPartnersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range list.Partners {
		got[p.GetId()] = p.GetHomeSite()
	}
	if len(got) != 2 || got["p-001"] != "site-a" || got["p-002"] != "" {
		t.Fatalf("ListPartners home sites %v", got)
	}
}
