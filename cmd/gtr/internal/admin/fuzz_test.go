package admin

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	gtrhealth "github.com/cellpay/cellpay/cmd/gtr/internal/health"
	"github.com/cellpay/cellpay/cmd/gtr/internal/routesync"
	"github.com/cellpay/cellpay/cmd/gtr/internal/state"
	"github.com/cellpay/cellpay/internal/drillreport"
	"github.com/cellpay/cellpay/internal/partnerstate"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

// fuzzServer is an admin Server over a fresh standalone state seeded with
// seed(), without a listener: ApplyTable is called directly.
func fuzzServer(tb testing.TB) (*Server, *state.State, func()) {
	st, err := state.New(state.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sy, err := routesync.Start(routesync.Config{State: st, Seed: func() (state.Doc, error) { return seed(), nil }, Log: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	ps, err := partnerstate.Start(partnerstate.Config{Log: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	mon, err := gtrhealth.New(gtrhealth.Config{OnChange: st.HealthChanged, Log: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	srv, err := New(Config{State: st, Health: mon, Store: sy, Partners: ps, ReplicaID: "fuzz", Log: quiet, ShareSamples: 100})
	if err != nil {
		tb.Fatal(err)
	}
	return srv, st, func() { ps.Close(); sy.Close() }
}

// FuzzApplyTable feeds ApplyTable, the Admin API's routing table decoder,
// any request as it arrives on the wire (protobuf bytes), through the
// request → routing spec → validation → store path. It must never panic
// or answer INTERNAL; a refusal changes nothing; what it applies is a table
// within routing's caps.
func FuzzApplyTable(f *testing.F) {
	add := func(req *adminproto.ApplyTableRequest) {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	good := docToProto(seed())
	good.Version = 2
	add(&adminproto.ApplyTableRequest{Table: good})
	add(&adminproto.ApplyTableRequest{Table: good, DryRun: true, Samples: 50})
	add(&adminproto.ApplyTableRequest{Table: good, ExpectedVersion: 1})
	two := proto.Clone(good).(*adminproto.Table)
	two.Cells = append(two.Cells, &adminproto.Cell{Id: "cell-d", Addr: "dns:///cell.cell-d.svc.cluster.local:7081", Pool: "eu", Weight: 40})
	two.Rules = append([]*adminproto.Rule{{Name: "eu", Markets: []string{"DE"}, PaymentTypes: []string{"CARD_REFUND"}, Pool: "eu", HashOn: "merchant", MinRefdataVersion: 3}}, two.Rules...)
	add(&adminproto.ApplyTableRequest{Table: two})
	inst := proto.Clone(good).(*adminproto.Table)
	inst.Cells[0].Addr, inst.Cells[0].Addrs = "", []string{"127.0.0.1:7081", "127.0.0.1:7181"}
	inst.Pools = []*adminproto.Pool{{Name: inst.Cells[0].Pool, Balancer: "priority"}}
	add(&adminproto.ApplyTableRequest{Table: inst})
	badInst := proto.Clone(inst).(*adminproto.Table)
	badInst.Cells[0].Addr = "127.0.0.1:7081"
	badInst.Cells[1].Addrs = []string{"dns:///x:1", "x:1", "x:1"}
	badInst.Pools = append(badInst.Pools, &adminproto.Pool{Name: "nowhere", Balancer: "random"})
	add(&adminproto.ApplyTableRequest{Table: badInst})
	big := proto.Clone(good).(*adminproto.Table)
	for i := range 1200 {
		big.Rules = append(big.Rules, &adminproto.Rule{Name: "r" + strconv.Itoa(i), Partners: []string{"p" + strconv.Itoa(i)}, Pool: "main"})
	}
	add(&adminproto.ApplyTableRequest{Table: big})
	bad := proto.Clone(good).(*adminproto.Table)
	bad.Cells[0].Addr = "unix:///tmp/cell.sock"
	bad.Rules[0].HashOn = "nope"
	add(&adminproto.ApplyTableRequest{Table: bad, Samples: -1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var req adminproto.ApplyTableRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		srv, st, stop := fuzzServer(t)
		defer stop()
		before := st.Table()
		resp, err := srv.ApplyTable(context.Background(), &req)
		if err != nil {
			switch c := status.Code(err); c {
			case codes.InvalidArgument, codes.FailedPrecondition:
			default:
				t.Fatalf("refused with %v: %v", c, err)
			}
			if st.Table() != before {
				t.Fatal("a refused table changed the table in force")
			}
			return
		}
		if !resp.GetApplied() {
			if st.Table() != before {
				t.Fatal("a dry run changed the table in force")
			}
			return
		}
		spec := st.Table().Spec()
		if spec.Version != req.GetTable().GetVersion() || len(spec.Rules) > routing.MaxRules || len(spec.Cells) > routing.MaxCells {
			t.Fatalf("applied version %d, %d rules, %d cells", spec.Version, len(spec.Rules), len(spec.Cells))
		}
		if err := routing.Validate(spec); err != nil {
			t.Fatalf("applied a table that does not validate: %v", err)
		}
		for _, c := range spec.Cells {
			if len(c.Addrs) > routing.MaxInstances || (c.Addr == "") == (len(c.Addrs) == 0) {
				t.Fatalf("applied cell %q with addr %q and %d addrs", c.ID, c.Addr, len(c.Addrs))
			}
		}
	})
}

// TestOversizedTableRefusedWhole: a 9,000-rule table through the Admin API
// is refused whole, INVALID_ARGUMENT naming table.rules, and the table in
// force stays.
func TestOversizedTableRefusedWhole(t *testing.T) {
	f := start(t, token)
	c := client(t, f.addr, token)
	ctx := ctxFor(t)
	tbl, err := c.GetTable(ctx, &adminproto.GetTableRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tbl.Version = 2
	tbl.Rules = nil
	for i := range 9000 {
		tbl.Rules = append(tbl.Rules, &adminproto.Rule{Name: "r" + strconv.Itoa(i), Partners: []string{"p-" + strconv.Itoa(i)}, Pool: "main"})
	}
	before := f.st.Table()
	for _, dry := range []bool{true, false} {
		_, err = c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: tbl, DryRun: dry})
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || !hasField(st, "table.rules") {
			t.Fatalf("dry run %v: %v %v", dry, st.Code(), st.Details())
		}
	}
	if f.st.Table() != before {
		t.Fatal("the table in force changed")
	}
	tbl.Rules = tbl.Rules[:1]
	tbl.Cells[0].Addr = "http://cell-a:7081"
	_, err = c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: tbl})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !hasField(st, "table.cells[0].addr") {
		t.Fatalf("bad addr: %v %v", st.Code(), st.Details())
	}
}

// FuzzDecodeKeptDrill: a value of the drills' bucket is read back from
// NATS, which others may write: the decoder never panics and refuses
// what is over its bound.
func FuzzDecodeKeptDrill(f *testing.F) {
	f.Add([]byte(`{"report":"e30=","signature":"MAA=","certificate":"","recorded_at":"2026-12-07T21:00:00Z","recorded_by":"otto","replica":"gtr-1"}`))
	f.Add([]byte(`{"report":null} {}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := decodeKeptDrill(b)
		if err != nil {
			return
		}
		if len(b) > maxKeptDrill {
			t.Fatalf("accepted %d bytes", len(b))
		}
		_ = drillreport.ID(k.Report)
	})
}
