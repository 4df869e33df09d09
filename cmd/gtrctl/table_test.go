package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/pkg/adminproto"
)

// operatorTable is what the fake GTR's GetTable answers: every field a
// table file carries, a weight of 0 and a cell of no site included.
func operatorTable() *adminproto.Table {
	return &adminproto.Table{Version: 7,
		Cells: []*adminproto.Cell{
			{Id: "cell-a", Addrs: []string{"127.0.0.1:7081", "127.0.0.1:7181"}, Pool: "main", Weight: 100, Site: "site-a"},
			{Id: "cell-b", Addr: "127.0.0.1:7082", Pool: "main", Weight: 70, Site: "site-b"},
			{Id: "cell-c", Addr: "dns:///cell-c:7083", Pool: "spare", Weight: 0},
		},
		Rules: []*adminproto.Rule{
			{Name: "eu-refunds", Partners: []string{"p-1", "p-2"}, Markets: []string{"DE", "FR"}, PaymentTypes: []string{"CARD_REFUND"},
				Pool: "spare", HashOn: "merchant", MinRefdataVersion: 3},
			{Name: "default", Pool: "main", HashOn: "partner"},
		},
		Pools: []*adminproto.Pool{{Name: "main", Balancer: "priority"}},
	}
}

func (f *fakeAdmin) GetTable(ctx context.Context, _ *adminproto.GetTableRequest) (*adminproto.Table, error) {
	if err := f.auth(ctx); err != nil {
		return nil, err
	}
	return operatorTable(), nil
}

func (f *fakeAdmin) GetEffectiveTable(ctx context.Context, _ *adminproto.GetEffectiveTableRequest) (*adminproto.EffectiveTable, error) {
	if err := f.auth(ctx); err != nil {
		return nil, err
	}
	return &adminproto.EffectiveTable{Version: 7, ReplicaId: "r1", Cells: []*adminproto.EffectiveCell{
		{Id: "cell-b", Pool: "main", ConfiguredWeight: 70, RampWeight: 70, HealthShare: 10, EffectiveWeight: 7, State: "up"},
	}}, nil
}

// TestTableGetApplyRoundTrip: what table get prints, as YAML or with
// -o json, table apply takes back unchanged but for the raised version.
func TestTableGetApplyRoundTrip(t *testing.T) {
	f, addr := serve(t)
	for _, tc := range []struct {
		name, oldVersion, newVersion string
		args                         []string
	}{
		{"yaml", `(?m)^version: 7$`, "version: 8", nil},
		// protojson varies its spacing on purpose.
		{"json", `"version":\s*"7"`, `"version": "8"`, []string{"-o", "json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := gtrctl(t, append([]string{"table", "get", "--addr", addr, "--token", "tok"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("get: code %d: %s", code, errs)
			}
			if tc.name == "yaml" && (!strings.Contains(out, `addrs: ['127.0.0.1:7081', '127.0.0.1:7181']`) || !strings.Contains(out, "balancer: priority") ||
				!strings.Contains(out, "site: site-b")) {
				t.Fatalf("get does not show the instances, balancer and sites:\n%s", out)
			}
			old := regexp.MustCompile(tc.oldVersion)
			if len(old.FindAllString(out, -1)) != 1 {
				t.Fatalf("get printed no one %q:\n%s", tc.oldVersion, out)
			}
			file := filepath.Join(t.TempDir(), "table."+tc.name)
			if err := os.WriteFile(file, []byte(old.ReplaceAllString(out, tc.newVersion)), 0o644); err != nil {
				t.Fatal(err)
			}
			if code, _, errs := gtrctl(t, "table", "apply", "-f", file, "--addr", addr, "--token", "tok"); code != 0 {
				t.Fatalf("apply of what get printed: code %d: %s", code, errs)
			}
			want := operatorTable()
			want.Version = 8
			f.mu.Lock()
			got := f.apply.GetTable()
			f.mu.Unlock()
			if !proto.Equal(got, want) {
				t.Fatalf("applied %v\nwant %v", got, want)
			}
		})
	}
}

func TestParseTableJSON(t *testing.T) {
	// snake_case names too, and a cell without a weight takes 100 as in YAML.
	tbl, err := parseTable([]byte(` {"version": 3, "cells": [{"id": "a", "addr": "x:1", "pool": "p"}, {"id": "b", "addr": "x:2", "pool": "p", "weight": 0}],
		"rules": [{"name": "all", "pool": "p", "min_refdata_version": 2, "hashOn": "market"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if tbl.Version != 3 || tbl.Cells[0].Weight != 100 || tbl.Cells[1].Weight != 0 || tbl.Rules[0].MinRefdataVersion != 2 || tbl.Rules[0].HashOn != "market" {
		t.Fatalf("parsed %v", tbl)
	}
	if _, err := parseTable([]byte(`{"version": 3, "cels": []}`)); err == nil || !strings.Contains(err.Error(), "cels") {
		t.Fatalf("misspelt key: %v", err)
	}
}

// TestTableGetEffective: the effective view is labelled, and is not a
// table apply takes.
func TestTableGetEffective(t *testing.T) {
	_, addr := serve(t)
	code, out, errs := gtrctl(t, "table", "get", "--effective", "--addr", addr, "--token", "tok")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errs)
	}
	if !strings.Contains(out, "EFFECTIVE view of replica r1") || !strings.Contains(out, "not a table to apply") ||
		!strings.Contains(out, "cell-b  main  70          70        10%     7") {
		t.Fatalf("output:\n%s", out)
	}
	file := filepath.Join(t.TempDir(), "eff")
	os.WriteFile(file, []byte(out), 0o644)
	if code, _, _ := gtrctl(t, "table", "apply", "-f", file, "--addr", addr, "--token", "tok"); code == 0 {
		t.Fatal("table apply took the effective view")
	}
}
