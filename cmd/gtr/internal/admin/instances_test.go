package admin

import (
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	gtrhealth "github.com/cellpay/cellpay/cmd/gtr/internal/health"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

// TestListCellsShowsInstances: a table whose cell lists two instances
// applies, GetTable gives them back with the pool's balancer, and
// ListCells shows each instance by its own health check (one serving,
// one gone) with the cell up while one serves.
func TestListCellsShowsInstances(t *testing.T) {
	f := start(t, token)
	c := client(t, f.addr, token)
	ctx := ctxFor(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	live := lis.Addr().String()
	l2, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l2.Addr().String()
	l2.Close()

	tbl, err := c.GetTable(ctx, &adminproto.GetTableRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tbl.Version++
	tbl.Cells[0].Addr, tbl.Cells[0].Addrs = "", []string{live, dead}
	tbl.Pools = []*adminproto.Pool{{Name: "main", Balancer: "priority"}}
	if _, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: tbl}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetTable(ctx, &adminproto.GetTableRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if a := got.Cells[0]; a.Addr != "" || !slices.Equal(a.Addrs, []string{live, dead}) || len(got.Pools) != 1 || got.Pools[0].Balancer != "priority" {
		t.Fatalf("GetTable: %v", got)
	}
	if eff, err := c.GetEffectiveTable(ctx, &adminproto.GetEffectiveTableRequest{}); err != nil || !slices.Equal(eff.Cells[0].Addrs, []string{live, dead}) || len(eff.Pools) != 1 {
		t.Fatalf("GetEffectiveTable: %v, %v", eff, err)
	}

	d, _, _ := f.st.Doc()
	var cells []gtrhealth.Cell
	for _, dc := range d.Cells {
		addr := dc.Addr
		if addr != "" {
			addr = live
		}
		cells = append(cells, gtrhealth.Cell{ID: dc.ID, Addr: addr, Addrs: dc.Addrs, Pool: dc.Pool})
	}
	f.mon.SetCells(cells)
	var a *adminproto.CellStatus
	testutil.Eventually(t, 5*time.Second, "both instances checked", func() bool {
		list, err := c.ListCells(ctx, &adminproto.ListCellsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		a = list.Cells[0]
		return len(a.Instances) == 2 && a.Instances[0].CheckedAt != nil && a.Instances[1].CheckedAt != nil
	})
	if a.Health != adminproto.Health_HEALTH_UP || a.Balancer != "priority" || !slices.Equal(a.Addrs, []string{live, dead}) {
		t.Fatalf("cell-a: %v", a)
	}
	if i := a.Instances[0]; i.Addr != live || i.Health != adminproto.Health_HEALTH_UP {
		t.Fatalf("live instance: %v", i)
	}
	if i := a.Instances[1]; i.Addr != dead || i.Health != adminproto.Health_HEALTH_DOWN || i.Detail != "Unavailable" {
		t.Fatalf("dead instance: %v", i)
	}
}

// TestInstanceFieldsRefused: a bad instance list or pool entry is refused
// whole, INVALID_ARGUMENT naming the field, and the table in force stays.
func TestInstanceFieldsRefused(t *testing.T) {
	f := start(t, token)
	c := client(t, f.addr, token)
	ctx := ctxFor(t)
	base, err := c.GetTable(ctx, &adminproto.GetTableRequest{})
	if err != nil {
		t.Fatal(err)
	}
	base.Version++
	before := f.st.Table()
	for _, tc := range []struct {
		name, field string
		edit        func(*adminproto.Table)
	}{
		{"17 instances", "table.cells[1].addrs", func(tb *adminproto.Table) {
			tb.Cells[1].Addr = ""
			for i := range routing.MaxInstances + 1 {
				tb.Cells[1].Addrs = append(tb.Cells[1].Addrs, "10.0.0."+strconv.Itoa(i)+":7081")
			}
		}},
		{"addr and addrs", "table.cells[0].addrs", func(tb *adminproto.Table) { tb.Cells[0].Addrs = []string{"10.0.0.1:7081"} }},
		{"a dns name in addrs", "table.cells[0].addrs", func(tb *adminproto.Table) {
			tb.Cells[0].Addr, tb.Cells[0].Addrs = "", []string{"10.0.0.1:7081", "dns:///cell-a:7081"}
		}},
		{"unknown balancer", "table.pools[0].balancer", func(tb *adminproto.Table) { tb.Pools = []*adminproto.Pool{{Name: "main", Balancer: "random"}} }},
		{"pool without cells", "table.pools[0].name", func(tb *adminproto.Table) { tb.Pools = []*adminproto.Pool{{Name: "spare", Balancer: "priority"}} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := proto.Clone(base).(*adminproto.Table)
			tc.edit(tb)
			_, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: tb})
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || !hasField(st, tc.field) {
				t.Fatalf("%v %v, want INVALID_ARGUMENT naming %s", st.Code(), st.Details(), tc.field)
			}
			if f.st.Table() != before {
				t.Fatal("the table in force changed")
			}
		})
	}
}
