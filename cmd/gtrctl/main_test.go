package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/internal/dev/testutil/grpctest"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeAdmin is an Admin server that checks the token and records requests.
type fakeAdmin struct {
	adminproto.UnimplementedAdminServer
	mu    sync.Mutex
	drain *adminproto.DrainRequest
	apply *adminproto.ApplyTableRequest
	lists int
}

func (f *fakeAdmin) auth(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) != 1 || v[0] != "Bearer tok" {
		return status.Error(codes.Unauthenticated, "invalid admin token")
	}
	return nil
}

func (f *fakeAdmin) ListCells(ctx context.Context, _ *adminproto.ListCellsRequest) (*adminproto.ListCellsResponse, error) {
	if err := f.auth(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	b := &adminproto.CellStatus{Id: "cell-b", Pool: "main", Health: adminproto.Health_HEALTH_UP, HealthShare: 100,
		Weight: 70, TargetWeight: 70, TableWeight: 100, InFlight: 2, SuccessRate: 0.99, RecentRequests: 100, TrafficShare: 0.25,
		Balancer: "priority", Addrs: []string{"127.0.0.1:7082", "127.0.0.1:7182"}, Instances: []*adminproto.InstanceStatus{
			{Addr: "127.0.0.1:7082", Health: adminproto.Health_HEALTH_UP, CheckedAt: timestamppb.Now()},
			{Addr: "127.0.0.1:7182", Health: adminproto.Health_HEALTH_DOWN, Detail: "Unavailable", CheckedAt: timestamppb.Now()},
		}}
	if f.lists < 3 && f.drain != nil && f.drain.Over != nil { // ramping for two polls
		b.Weight = int32(100 - 15*f.lists)
		b.Ramp = &adminproto.Ramp{FromWeight: 100, ToWeight: 70, Start: timestamppb.Now(), End: timestamppb.New(time.Now().Add(time.Second))}
	}
	return &adminproto.ListCellsResponse{TableVersion: 3, ReplicaId: "r1", ConfigStore: "connected", Cells: []*adminproto.CellStatus{b}}, nil
}

func (f *fakeAdmin) Drain(ctx context.Context, req *adminproto.DrainRequest) (*adminproto.CellStatus, error) {
	if err := f.auth(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.drain = req
	f.mu.Unlock()
	cs := &adminproto.CellStatus{Id: req.CellId, Weight: 100 - req.Percent, TargetWeight: 100 - req.Percent, TableWeight: 100}
	if req.Over != nil {
		cs.Weight = 100
		cs.Ramp = &adminproto.Ramp{FromWeight: 100, ToWeight: 100 - req.Percent, Start: timestamppb.Now(), End: timestamppb.New(time.Now().Add(req.Over.AsDuration()))}
	}
	return cs, nil
}

func (f *fakeAdmin) ApplyTable(ctx context.Context, req *adminproto.ApplyTableRequest) (*adminproto.ApplyTableResponse, error) {
	if err := f.auth(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.apply = req
	f.mu.Unlock()
	return &adminproto.ApplyTableResponse{Version: req.Table.Version, Samples: req.Samples, Moves: []*adminproto.Move{
		{FromCell: "cell-a", ToCell: "cell-a", Keys: 60, Share: 0.6}, {FromCell: "cell-c", ToCell: "cell-a", Keys: 40, Share: 0.4},
	}}, nil
}

func serve(t *testing.T) (*fakeAdmin, string) {
	t.Helper()
	f := &fakeAdmin{}
	return f, serveOn(t, tlsServer(t), f)
}

// serveOn serves srv as the admin API on gs, on a loopback port.
func serveOn(t *testing.T, gs *grpc.Server, srv adminproto.AdminServer) string {
	t.Helper()
	adminproto.RegisterAdminServer(gs, srv)
	return grpctest.ServeOn(t, gs)
}

func gtrctl(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if testCA.ca != "" {
		t.Setenv("GTRCTL_CA", testCA.ca)
	}
	var out, errb bytes.Buffer
	code = run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCells(t *testing.T) {
	_, addr := serve(t)
	code, out, errs := gtrctl(t, "cells", "--addr", addr, "--token", "tok")
	if code != 0 || !strings.Contains(out, "cell-b") || !strings.Contains(out, "25.0%") || !strings.Contains(out, "99.0% of 100") ||
		!strings.Contains(out, "INSTANCES") || !strings.Contains(out, "1/2 up (priority)") || !strings.Contains(out, "cell-b 127.0.0.1:7182: Unavailable") {
		t.Fatalf("code %d\n%s\n%s", code, out, errs)
	}
	code, out, _ = gtrctl(t, "cells", "--addr", addr, "--token", "tok", "-o", "json")
	var v struct {
		TableVersion string `json:"tableVersion"`
		Cells        []struct {
			Instances []struct{ Addr, Health, Detail string }
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.TableVersion != "3" || len(v.Cells) != 1 || len(v.Cells[0].Instances) != 2 ||
		v.Cells[0].Instances[1].Health != "HEALTH_DOWN" || v.Cells[0].Instances[1].Addr != "127.0.0.1:7182" {
		t.Fatalf("json: code %d %s", code, out)
	}
	code, _, errs = gtrctl(t, "cells", "--addr", addr, "--token", "wrong")
	if code != 1 || !strings.Contains(errs, "Unauthenticated") {
		t.Fatalf("wrong token: code %d %s", code, errs)
	}
}

func TestTokenFile(t *testing.T) {
	_, addr := serve(t)
	file := filepath.Join(t.TempDir(), "token")
	os.WriteFile(file, []byte("tok\n"), 0o600)
	if code, _, errs := gtrctl(t, "cells", "--addr", addr, "--token-file", file); code != 0 {
		t.Fatalf("code %d: %s", code, errs)
	}
}

func TestDrainFlagsAfterCell(t *testing.T) {
	f, addr := serve(t)
	code, out, errs := gtrctl(t, "drain", "cell-b", "--percent", "30", "--addr", addr, "--token", "tok")
	if code != 0 || f.drain.GetCellId() != "cell-b" || f.drain.GetPercent() != 30 || f.drain.GetOver() != nil {
		t.Fatalf("code %d %v\n%s%s", code, f.drain, out, errs)
	}
	if !strings.Contains(out, "cell-b: weight 70") {
		t.Fatalf("output %q", out)
	}
	// A ramp is followed until it ends.
	code, out, errs = gtrctl(t, "drain", "--addr", addr, "--token", "tok", "--percent", "30", "--over", "1s", "cell-b")
	if code != 0 || f.drain.GetOver().AsDuration() != time.Second || !strings.Contains(out, "weight 70") || f.lists < 3 {
		t.Fatalf("ramp: code %d, %d polls\n%s%s", code, f.lists, out, errs)
	}
	if code, _, _ := gtrctl(t, "drain", "cell-b", "--addr", addr); code != 2 {
		t.Fatalf("drain without --percent: code %d, want 2", code)
	}
}

func TestTableApplyDryRun(t *testing.T) {
	f, addr := serve(t)
	file := filepath.Join(t.TempDir(), "t.yaml")
	os.WriteFile(file, []byte("version: 4\ncells:\n  - {id: cell-a, addr: \"x:1\", pool: main}\n  - {id: cell-c, addr: \"x:3\", pool: spare, weight: 50}\nrules:\n  - {name: all, pool: main, hash_on: merchant}\n"), 0o644)
	code, out, errs := gtrctl(t, "table", "apply", "-f", file, "--dry-run", "--addr", addr, "--token", "tok")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errs)
	}
	req := f.apply
	if !req.DryRun || req.Samples != 100000 || req.Table.Version != 4 || req.Table.Cells[0].Weight != 100 || req.Table.Cells[1].Weight != 50 || req.Table.Rules[0].HashOn != "merchant" {
		t.Fatalf("request %v", req)
	}
	if !strings.Contains(out, "40.00% of keys would move") || !strings.Contains(out, "(stays)") {
		t.Fatalf("output:\n%s", out)
	}
	os.WriteFile(file, []byte("version: 4\ncels: []\n"), 0o644)
	if code, _, errs := gtrctl(t, "table", "apply", "-f", file, "--addr", addr, "--token", "tok"); code != 1 || !strings.Contains(errs, "cels") {
		t.Fatalf("misspelt key: code %d %s", code, errs)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"nope"}, {"weight", "cell-a"}, {"cells", "-o", "xml"}} {
		if code, _, _ := gtrctl(t, args...); code != 2 {
			t.Fatalf("%v: code %d, want 2", args, code)
		}
	}
}

// TestCellsBySite: gtrctl cells has a SITE column and lists a site's
// cells together, by site then cell ID, cells of no named site last; a
// replica that judges a cell otherwise is named with its site.
func TestCellsBySite(t *testing.T) {
	cell := func(id, site string) *adminproto.CellStatus {
		return &adminproto.CellStatus{Id: id, Site: site, Pool: "main", Health: adminproto.Health_HEALTH_UP, HealthShare: 100, Weight: 100}
	}
	resp := &adminproto.ListCellsResponse{TableVersion: 2, ReplicaId: "r1", Cells: []*adminproto.CellStatus{
		cell("cell-c", "site-a"), cell("cell-z", ""), cell("cell-b", "site-b"), cell("cell-a", "site-a"), cell("cell-d", "site-b"),
	}}
	resp.Cells[2].Replicas = []*adminproto.ReplicaCellView{{Replica: "r1", Site: "site-a", HealthShare: 100}, {Replica: "r2", Site: "site-b", HealthShare: 0}}
	var out bytes.Buffer
	if err := (&cli{out: &out}).printCells(resp); err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 2 && strings.HasPrefix(f[1], "cell-") {
			rows = append(rows, f[0]+" "+f[1])
		}
	}
	want := []string{"site-a cell-a", "site-a cell-c", "site-b cell-b", "site-b cell-d", "- cell-z"}
	if !slices.Equal(rows, want) {
		t.Fatalf("rows %q, want %q\n%s", rows, want, out.String())
	}
	if !regexp.MustCompile(`(?m)^SITE +CELL +POOL +HEALTH`).MatchString(out.String()) {
		t.Fatalf("no SITE column first:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "cell-b: replica r2 (site site-b) sees health 0%") {
		t.Fatalf("the replica that judges otherwise is not named with its site:\n%s", out.String())
	}
	if ids := []string{resp.Cells[0].Id, resp.Cells[1].Id}; ids[0] != "cell-c" || ids[1] != "cell-z" {
		t.Fatalf("printing reordered the answer: %v", ids)
	}
}
