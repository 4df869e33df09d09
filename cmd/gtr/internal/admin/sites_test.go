package admin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/cmd/gtr/internal/audit"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/partnerstate"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

// TestSites: a table that names its cells' sites moves no key (no partner
// is homed in a site here), and ListCells, GetTable and GetEffectiveTable
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

// nameSites applies the seed table with cell-a in site-a and cell-b and
// cell-c in site-b (version 2), and homes a partner in each site.
func nameSites(t *testing.T, ctx context.Context, c adminproto.AdminClient) {
	t.Helper()
	tbl, err := c.GetTable(ctx, &adminproto.GetTableRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tbl.Version = 2
	for i, site := range []string{"site-a", "site-b", "site-b"} {
		tbl.Cells[i].Site = site
	}
	if res, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: tbl, ExpectedVersion: 1}); err != nil || !res.Applied {
		t.Fatalf("apply: %v %v", res, err)
	}
	for p, site := range map[string]string{"p-home-a": "site-a", "p-home-b": "site-b"} {
		if _, err := c.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: p, HomeSite: site}); err != nil {
			t.Fatal(err)
		}
	}
}

// weights is the configured weight of every cell of the table in force,
// and its version.
func weights(t *testing.T, ctx context.Context, c adminproto.AdminClient) (map[string]int32, uint64) {
	t.Helper()
	tbl, err := c.GetTable(ctx, &adminproto.GetTableRequest{})
	if err != nil {
		t.Fatal(err)
	}
	w := map[string]int32{}
	for _, cell := range tbl.Cells {
		w[cell.Id] = cell.Weight
	}
	return w, tbl.Version
}

// TestEvacuateSite: a dry run moves only keys off the site's cells,
// about their share, and changes nothing; the evacuation takes exactly
// the site's cells to weight 0 in one version and answers with them;
// evacuating the other site then is refused naming the pool (dry run
// too), and changes nothing; a restore's dry run moves keys only back
// onto the site's cells, and the restore ramps them to their table
// weights.
func TestEvacuateSite(t *testing.T) {
	f := start(t, token)
	c := client(t, f.addr, token)
	ctx := ctxFor(t)
	nameSites(t, ctx, c)

	tblBefore := f.st.Table()
	dry, err := c.EvacuateSite(ctx, &adminproto.EvacuateSiteRequest{Site: "site-a", DryRun: true, Samples: 30000, Over: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if dry.Applied || dry.Site != "site-a" || dry.Samples != 30000 || dry.Version != 3 || f.st.Table() != tblBefore {
		t.Fatalf("dry run: %v", dry)
	}
	if len(dry.Cells) != 1 || dry.Cells[0].Id != "cell-a" || dry.Cells[0].Weight != 100 || dry.Cells[0].Ramp != nil {
		t.Fatalf("dry run's cells, want cell-a as it is: %v", dry.Cells)
	}
	moved, total := 0.0, int32(0)
	for _, m := range dry.Moves {
		total += m.Keys
		if m.FromCell != m.ToCell {
			if m.FromCell != "cell-a" || m.ToCell == "" {
				t.Fatalf("dry run moves keys from %s to %q: %v", m.FromCell, m.ToCell, dry.Moves)
			}
			moved += m.Share
		}
	}
	if total != 30000 || moved < 0.25 || moved > 0.45 {
		t.Fatalf("dry run: %d keys, %.3f moving; want 30000, about cell-a's share", total, moved)
	}
	if w, v := weights(t, ctx, c); v != 2 || w["cell-a"] != 100 {
		t.Fatalf("the dry run changed the table: version %d, %v", v, w)
	}

	res, err := c.EvacuateSite(ctx, &adminproto.EvacuateSiteRequest{Site: "site-a"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Applied || res.Version != 3 || len(res.Cells) != 1 || res.Cells[0].Id != "cell-a" || res.Cells[0].Weight != 0 ||
		res.Cells[0].TargetWeight != 0 || res.Cells[0].TableWeight != 100 || res.Cells[0].Site != "site-a" || len(res.Moves) != 0 {
		t.Fatalf("evacuate: %v", res)
	}
	if w, v := weights(t, ctx, c); v != 3 || w["cell-a"] != 0 || w["cell-b"] != 100 || w["cell-c"] != 100 {
		t.Fatalf("after evacuating site-a: version %d, weights %v; want 3, cell-a alone at 0", v, w)
	}

	wantRefusal := `pool "main" has no cell outside site-b with weight above 0: evacuating would leave its rules without a cell`
	for _, dryRun := range []bool{true, false} {
		_, err := c.EvacuateSite(ctx, &adminproto.EvacuateSiteRequest{Site: "site-b", DryRun: dryRun})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), wantRefusal) {
			t.Fatalf("evacuating the last site (dry run %v): %v", dryRun, err)
		}
	}
	if w, v := weights(t, ctx, c); v != 3 || w["cell-b"] != 100 || w["cell-c"] != 100 {
		t.Fatalf("a refused evacuation changed the table: version %d, %v", v, w)
	}

	testutil.Eventually(t, 5*time.Second, "the evacuation compiled", func() bool { return f.st.Table().Version() == 3 })
	back, err := c.RestoreSite(ctx, &adminproto.RestoreSiteRequest{Site: "site-a", DryRun: true, Samples: 20000})
	if err != nil {
		t.Fatal(err)
	}
	moved = 0
	for _, m := range back.Moves {
		if m.FromCell != m.ToCell {
			if m.ToCell != "cell-a" {
				t.Fatalf("restore's dry run moves keys to %s: %v", m.ToCell, back.Moves)
			}
			moved += m.Share
		}
	}
	if back.Applied || moved < 0.25 || moved > 0.45 {
		t.Fatalf("restore dry run: %v, %.3f moving", back, moved)
	}
	rs, err := c.RestoreSite(ctx, &adminproto.RestoreSiteRequest{Site: "site-a", Over: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if cell := rs.GetCells()[0]; !rs.Applied || rs.Version != 4 || cell.TargetWeight != 100 || cell.Ramp == nil || cell.Ramp.FromWeight != 0 || cell.Ramp.ToWeight != 100 {
		t.Fatalf("restore: %v", rs)
	}
}

// TestSiteChangeBadInput: every bad request names its field or the site
// (NOT_FOUND), dry run or not, and leaves the table as it was.
func TestSiteChangeBadInput(t *testing.T) {
	f := start(t, token)
	c := client(t, f.addr, token)
	ctx := ctxFor(t)
	nameSites(t, ctx, c)
	for _, tc := range []struct {
		name  string
		req   *adminproto.EvacuateSiteRequest
		code  codes.Code
		field string
	}{
		{"no site", &adminproto.EvacuateSiteRequest{}, codes.InvalidArgument, "site"},
		{"bad site", &adminproto.EvacuateSiteRequest{Site: "Site A", DryRun: true}, codes.InvalidArgument, "site"},
		{"unknown site", &adminproto.EvacuateSiteRequest{Site: "site-z"}, codes.NotFound, ""},
		{"unknown site dry run", &adminproto.EvacuateSiteRequest{Site: "site-z", DryRun: true}, codes.NotFound, ""},
		{"negative over", &adminproto.EvacuateSiteRequest{Site: "site-a", Over: durationpb.New(-time.Second)}, codes.InvalidArgument, "over"},
		{"long over", &adminproto.EvacuateSiteRequest{Site: "site-a", Over: durationpb.New(25 * time.Hour)}, codes.InvalidArgument, "over"},
		{"samples", &adminproto.EvacuateSiteRequest{Site: "site-a", DryRun: true, Samples: 2_000_000}, codes.InvalidArgument, "samples"},
		{"negative samples", &adminproto.EvacuateSiteRequest{Site: "site-a", Samples: -1}, codes.InvalidArgument, "samples"},
	} {
		for _, restore := range []bool{false, true} {
			var err error
			if restore {
				r := tc.req
				_, err = c.RestoreSite(ctx, &adminproto.RestoreSiteRequest{Site: r.Site, Over: r.Over, DryRun: r.DryRun, Samples: r.Samples})
			} else {
				_, err = c.EvacuateSite(ctx, tc.req)
			}
			st, _ := status.FromError(err)
			if st.Code() != tc.code || (tc.field != "" && !hasField(st, tc.field)) || (tc.code == codes.NotFound && !strings.Contains(st.Message(), `"site-z"`)) {
				t.Errorf("%s (restore %v): %v, want %v naming %q", tc.name, restore, err, tc.code, tc.field)
			}
		}
	}
	if w, v := weights(t, ctx, c); v != 2 || w["cell-a"] != 100 || w["cell-b"] != 100 || w["cell-c"] != 100 {
		t.Fatalf("bad requests changed the table: version %d, %v", v, w)
	}
}

// TestSiteChangeRolesAndAudit: a viewer may not evacuate, not even as a
// dry run; an operator may; every call, the dry run and the refusal
// included, is in the audit log under its method, the evacuation's
// record with the site's cells' weights before and after.
func TestSiteChangeRolesAndAudit(t *testing.T) {
	ix, toks := threeOperators(t)
	al, err := audit.Open(audit.Config{Replica: "test", File: filepath.Join(t.TempDir(), "audit.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(al.Close)
	f := startServer(t, ix, al, slog.New(slog.NewTextHandler(io.Discard, nil)), partnerstate.Config{}, nil)
	ctx := ctxFor(t)
	nameSites(t, ctx, client(t, f.addr, toks["ada"]))
	viewer, oper := client(t, f.addr, toks["vera"]), client(t, f.addr, toks["otto"])
	start := time.Now().Add(-time.Second)

	for _, dryRun := range []bool{true, false} {
		_, err := viewer.EvacuateSite(ctx, &adminproto.EvacuateSiteRequest{Site: "site-a", DryRun: dryRun})
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "needs role operator") {
			t.Fatalf("viewer EvacuateSite (dry run %v): %v", dryRun, err)
		}
	}
	if _, err := viewer.RestoreSite(ctx, &adminproto.RestoreSiteRequest{Site: "site-a"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("viewer RestoreSite: %v", err)
	}
	if w, v := weights(t, ctx, viewer); v != 2 || w["cell-a"] != 100 {
		t.Fatalf("a refused evacuation changed the table: version %d, %v", v, w)
	}
	if _, err := oper.EvacuateSite(ctx, &adminproto.EvacuateSiteRequest{Site: "site-a", DryRun: true, Samples: 1000}); err != nil {
		t.Fatalf("operator dry run: %v", err)
	}
	if _, err := oper.EvacuateSite(ctx, &adminproto.EvacuateSiteRequest{Site: "site-a", Over: durationpb.New(time.Hour)}); err != nil {
		t.Fatalf("operator EvacuateSite: %v", err)
	}
	if _, err := oper.EvacuateSite(ctx, &adminproto.EvacuateSiteRequest{Site: "site-b"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("evacuating the last site: %v", err)
	}
	if _, err := oper.RestoreSite(ctx, &adminproto.RestoreSiteRequest{Site: "site-a"}); err != nil {
		t.Fatalf("operator RestoreSite: %v", err)
	}

	resp, err := viewer.ListAudit(ctx, &adminproto.ListAuditRequest{Since: timestamppb.New(start)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var recs []*adminproto.AuditRecord
	for _, r := range resp.GetRecords() {
		if r.GetMethod() == "EvacuateSite" || r.GetMethod() == "RestoreSite" {
			got = append(got, r.GetActor()+" "+r.GetMethod()+" "+r.GetOutcome())
			recs = append(recs, r)
		}
	}
	want := []string{"vera EvacuateSite PermissionDenied", "vera EvacuateSite PermissionDenied", "vera RestoreSite PermissionDenied",
		"otto EvacuateSite OK", "otto EvacuateSite OK", "otto EvacuateSite FailedPrecondition", "otto RestoreSite OK"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("audit:\n got %q\nwant %q", got, want)
	}
	type siteView struct {
		Site    string     `json:"site"`
		Version uint64     `json:"version"`
		Applied *bool      `json:"applied"`
		Cells   []cellView `json:"cells"`
	}
	read := func(s string) siteView {
		t.Helper()
		var v siteView
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatalf("%v: %s", err, s)
		}
		return v
	}
	if dry := read(recs[3].GetAfter()); dry.Applied == nil || *dry.Applied || dry.Cells != nil || !strings.Contains(recs[3].GetRequest(), `"dryRun":true`) {
		t.Fatalf("dry run's record: after %s request %s", recs[3].GetAfter(), recs[3].GetRequest())
	}
	ev := recs[4]
	before, after := read(ev.GetBefore()), read(ev.GetAfter())
	if before.Site != "site-a" || before.Version != 2 || len(before.Cells) != 1 || before.Cells[0].Cell != "cell-a" || before.Cells[0].Weight != 100 {
		t.Fatalf("evacuation's before: %s", ev.GetBefore())
	}
	if after.Version != 3 || after.Applied == nil || !*after.Applied || len(after.Cells) != 1 || after.Cells[0].Weight != 0 ||
		after.Cells[0].WeightNow != 100 || after.Cells[0].RampEnd == nil || after.Cells[0].TableWeight != 100 {
		t.Fatalf("evacuation's after: %s", ev.GetAfter())
	}
	if refused := recs[5]; !strings.Contains(refused.GetError(), "evacuating would leave its rules without a cell") || refused.GetAfter() != "" {
		t.Fatalf("refusal's record: %v", refused)
	}
	if rs := read(recs[6].GetAfter()); rs.Version != 4 || len(rs.Cells) != 1 || rs.Cells[0].Weight != 100 || rs.Cells[0].WeightNow != 100 {
		t.Fatalf("restore's after: %s", recs[6].GetAfter())
	}
}
