package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/pkg/adminproto"
)

// freshAdmin answers with a gated rule and cells behind it.
type freshAdmin struct{ fakeAdmin }

func (f *freshAdmin) ListCells(ctx context.Context, _ *adminproto.ListCellsRequest) (*adminproto.ListCellsResponse, error) {
	return &adminproto.ListCellsResponse{TableVersion: 3, Cells: []*adminproto.CellStatus{
		{Id: "cell-a", Pool: "main", Health: adminproto.Health_HEALTH_UP, HealthShare: 100, Weight: 100, SuccessRate: -1,
			RefdataVersion: 3, RefdataSince: timestamppb.Now()},
		{Id: "cell-b", Pool: "main", Health: adminproto.Health_HEALTH_UP, HealthShare: 100, Weight: 100, SuccessRate: -1},
	}}, nil
}

func (f *freshAdmin) GetTable(context.Context, *adminproto.GetTableRequest) (*adminproto.Table, error) {
	return &adminproto.Table{Version: 3, Cells: []*adminproto.Cell{{Id: "cell-a", Addr: "x:1", Pool: "main", Weight: 100}},
		Rules: []*adminproto.Rule{{Name: "fresh", Partners: []string{"p-1"}, Pool: "main", HashOn: "partner", MinRefdataVersion: 5},
			{Name: "all", Pool: "main", HashOn: "partner"}}}, nil
}

func (f *freshAdmin) Explain(context.Context, *adminproto.ExplainRequest) (*adminproto.ExplainResponse, error) {
	return &adminproto.ExplainResponse{Rule: "fresh", MinRefdataVersion: 5, Text: "rule \"fresh\" matches\n", Error: "routing: no cell available",
		Cells: []*adminproto.CellVerdict{
			{CellId: "cell-a", Verdict: staleVerdict, Why: "skipped: serves reference data v3, rule needs v5", RefdataVersion: 3},
			{CellId: "cell-b", Verdict: staleVerdict, Why: "skipped: serves no known reference data version, rule needs v5"},
		}}, nil
}

func TestFreshnessOutput(t *testing.T) {
	f := &freshAdmin{}
	addr := serveWith(t, f)
	code, out, errs := gtrctl(t, "cells", "--addr", addr, "--token", "tok")
	if code != 0 || !strings.Contains(out, "REFDATA") || !strings.Contains(out, " v3 ") {
		t.Fatalf("cells: code %d\n%s%s", code, out, errs)
	}
	code, out, errs = gtrctl(t, "explain", "--partner", "p-1", "--addr", addr, "--token", "tok")
	if code != 0 || !strings.Contains(out, "stale for this rule (needs reference data v5): cell-a (v3), cell-b (none known)") ||
		!strings.Contains(out, "result: routing: no cell available") {
		t.Fatalf("explain: code %d\n%s%s", code, out, errs)
	}
	code, out, errs = gtrctl(t, "table", "get", "--addr", addr, "--token", "tok")
	if code != 0 || strings.Count(out, "min_refdata_version") != 1 || !strings.Contains(out, "min_refdata_version: 5") {
		t.Fatalf("table get: code %d\n%s%s", code, out, errs)
	}
	// What table get prints, table apply reads back.
	file := filepath.Join(t.TempDir(), "t.yaml")
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := gtrctl(t, "table", "apply", "-f", file, "--dry-run", "--addr", addr, "--token", "tok"); code != 0 {
		t.Fatalf("apply: code %d %s", code, errs)
	}
	if r := f.apply.GetTable().GetRules(); len(r) != 2 || r[0].GetMinRefdataVersion() != 5 || r[1].GetMinRefdataVersion() != 0 {
		t.Fatalf("applied rules %v", r)
	}
}

func serveWith(t *testing.T, srv adminproto.AdminServer) string {
	t.Helper()
	return serveOn(t, tlsServer(t), srv)
}
