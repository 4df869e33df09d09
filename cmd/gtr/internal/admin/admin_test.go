package admin

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cellpay/cellpay/cmd/gtr/internal/audit"
	gtrhealth "github.com/cellpay/cellpay/cmd/gtr/internal/health"
	"github.com/cellpay/cellpay/cmd/gtr/internal/routesync"
	"github.com/cellpay/cellpay/cmd/gtr/internal/state"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/operators"
	"github.com/cellpay/cellpay/internal/partnerstate"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const token = "s3cret-admin-token"

type fixture struct {
	st  *state.State
	mon *gtrhealth.Monitor
	// clock is the monitor's: moving it ends ejection back-offs.
	clock *fakeClock
	ps    *partnerstate.Store
	addr  string
	log   *testutil.Buffer // everything the admin server logged
}

func seed() state.Doc {
	return state.FromSpec(routing.Spec{
		Version: 1,
		Cells: []routing.Cell{
			{ID: "cell-a", Addr: "127.0.0.1:1", Pool: "main", Weight: 100},
			{ID: "cell-b", Addr: "127.0.0.1:2", Pool: "main", Weight: 100},
			{ID: "cell-c", Addr: "127.0.0.1:3", Pool: "main", Weight: 100},
		},
		Rules: []routing.Rule{{Name: "everything", Pool: "main"}},
	})
}

// start serves the admin API as the GTR does: Auth, Admin and health on
// one loopback listener, with a standalone store.
func start(t *testing.T, tok string) fixture {
	t.Helper()
	return startWith(t, tok, partnerstate.Config{})
}

// startWith is start with the partner store configured by pc (standalone
// unless pc names a NATS server).
func startWith(t *testing.T, tok string, pc partnerstate.Config) fixture {
	t.Helper()
	ix, err := operators.Compile(nil, tok) // tok acts as legacy-admin
	if err != nil {
		t.Fatal(err)
	}
	al, err := audit.Open(audit.Config{Replica: "test", File: filepath.Join(t.TempDir(), "audit.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(al.Close)
	buf := &testutil.Buffer{}
	f := startServer(t, ix, al, slog.New(slog.NewTextHandler(buf, nil)), pc, nil)
	f.log = buf
	return f
}

// startServer serves the admin API for the operators of ix, auditing to
// al and logging to log; cells, when not nil, reaches the table's cells.
// startServer starts the admin API over loopback gRPC; each of configure
// changes its Config first (a drills' store, say).
func startServer(t *testing.T, ix *operators.Index, al AuditLog, log *slog.Logger, pc partnerstate.Config, cells Cells, configure ...func(*Config)) fixture {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, mon, clock := startHealth(t, quiet)
	sy, err := routesync.Start(routesync.Config{State: st, Seed: func() (state.Doc, error) { return seed(), nil }, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sy.Close)
	pc.Log = log
	ps, err := partnerstate.Start(pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ps.Close)
	followCells(t, st, mon)
	cfg := Config{State: st, Health: mon, Store: sy, Partners: ps, ReplicaID: "test", Cells: cells, Audit: al, Log: log}
	for _, c := range configure {
		c(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(srv.ServerOptions(NewAuth(ix))...)
	srv.Register(gs)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return fixture{st: st, mon: mon, clock: clock, ps: ps, addr: lis.Addr().String()}
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// startHealth wires a state and a real health monitor as the GTR does (the
// monitor's ejections signal the state's compiler) and runs both until
// the test ends. The monitor runs on a fake clock and re-admits a cell on
// 10% of its traffic, where it stays (its ramp steps are an hour apart).
func startHealth(t *testing.T, log *slog.Logger) (*state.State, *gtrhealth.Monitor, *fakeClock) {
	t.Helper()
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	var st *state.State
	mon, err := gtrhealth.New(gtrhealth.Config{Now: clock.Now, Interval: 10 * time.Millisecond, RampStep: time.Hour,
		OnChange: func(id string, share int) { st.HealthChanged(id, share) }, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if st, err = state.New(state.Config{Health: mon}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { st.Run(ctx) })
	wg.Go(func() { mon.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return st, mon, clock
}

// followCells has the monitor watch the state's cells, every one checked
// against one gRPC health server on loopback that answers SERVING.
func followCells(t *testing.T, st *state.State, mon *gtrhealth.Monitor) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	d, _, ok := st.Doc()
	if !ok {
		t.Fatal("no table")
	}
	var cells []gtrhealth.Cell
	for _, c := range d.Cells {
		cells = append(cells, gtrhealth.Cell{ID: c.ID, Addr: lis.Addr().String(), Pool: c.Pool})
	}
	mon.SetCells(cells)
}

// eject fails cell id's requests until the monitor ejects it.
func (f fixture) eject(t *testing.T, id string) {
	t.Helper()
	for range 3 { // the default run of consecutive failures
		f.mon.Observe(id, false)
	}
	if f.mon.Share(id) != 0 {
		t.Fatalf("%s not ejected", id)
	}
}

func client(t *testing.T, addr, tok string) adminproto.AdminClient {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if tok != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(TokenCredentials(tok)))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return adminproto.NewAdminClient(conn)
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestAuth(t *testing.T) {
	f := start(t, token)
	for _, tc := range []struct {
		name string
		tok  string
		want codes.Code
	}{
		{"missing", "", codes.Unauthenticated},
		{"wrong", "not-the-token", codes.Unauthenticated},
		{"prefix of the right one", token[:5], codes.Unauthenticated},
		{"right", token, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client(t, f.addr, tc.tok).ListCells(ctxFor(t), &adminproto.ListCellsRequest{})
			if status.Code(err) != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	// Without "Bearer ": refused.
	conn, _ := grpc.NewClient(f.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	var raw rawToken = token
	if _, err := adminproto.NewAdminClient(conn).ListCells(ctxFor(t), &adminproto.ListCellsRequest{}, grpc.PerRPCCredentials(raw)); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("token without Bearer: %v", err)
	}
	// Health needs no token.
	if _, err := healthpb.NewHealthClient(conn).Check(ctxFor(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health without a token: %v", err)
	}
}

type rawToken string

func (r rawToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{TokenHeader: string(r)}, nil
}
func (rawToken) RequireTransportSecurity() bool { return false }

func TestNoTokenConfiguredRefusesAll(t *testing.T) {
	f := start(t, "")
	for _, tok := range []string{"", "anything"} {
		if _, err := client(t, f.addr, tok).GetTable(ctxFor(t), &adminproto.GetTableRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("token %q: %v", tok, err)
		}
	}
}

func TestDrainListRestore(t *testing.T) {
	f := start(t, token)
	c := client(t, f.addr, token)
	ctx := ctxFor(t)
	before, err := c.ListCells(ctx, &adminproto.ListCellsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Cells) != 3 || before.ConfigStore != "standalone" || before.ReplicaId != "test" {
		t.Fatalf("list: %v", before)
	}
	shareB := before.Cells[1].TrafficShare
	if shareB < 0.28 || shareB > 0.39 {
		t.Fatalf("cell-b share %.3f, want about a third", shareB)
	}
	cs, err := c.Drain(ctx, &adminproto.DrainRequest{CellId: "cell-b", Percent: 30})
	if err != nil {
		t.Fatal(err)
	}
	if cs.Weight != 70 || cs.TargetWeight != 70 || cs.TableWeight != 100 {
		t.Fatalf("after drain: %v", cs)
	}
	after, _ := c.ListCells(ctx, &adminproto.ListCellsRequest{})
	if got, want := after.Cells[1].TrafficShare, shareB*0.7; got < want-0.02 || got > want+0.02 {
		t.Fatalf("drained share %.3f, want %.3f", got, want)
	}
	if after.TableVersion != 2 {
		t.Fatalf("version %d", after.TableVersion)
	}
	cs, err = c.Restore(ctx, &adminproto.RestoreRequest{CellId: "cell-b", Over: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if cs.Ramp == nil || cs.Ramp.FromWeight != 70 || cs.Ramp.ToWeight != 100 || cs.TargetWeight != 100 {
		t.Fatalf("restore ramp: %v", cs)
	}
	if _, err := c.SetWeight(ctx, &adminproto.SetWeightRequest{CellId: "cell-c", Weight: 0}); err != nil {
		t.Fatal(err)
	}
	f.st.InFlight("cell-a", 1)
	f.mon.Observe("cell-a", true)
	f.mon.Observe("cell-c", true) // reset by the ejection: not listed
	f.eject(t, "cell-c")
	list, _ := c.ListCells(ctx, &adminproto.ListCellsRequest{})
	if a := list.Cells[0]; a.InFlight != 1 || a.SuccessRate != 1 || a.RecentRequests != 1 || a.Health != adminproto.Health_HEALTH_UP {
		t.Fatalf("cell-a: %v", a)
	}
	if cc := list.Cells[2]; cc.Weight != 0 || cc.TrafficShare != 0 || cc.Health != adminproto.Health_HEALTH_DOWN || cc.SuccessRate != -1 {
		t.Fatalf("cell-c: %v", cc)
	}
}

func TestExplainAndRouteKeys(t *testing.T) {
	f := start(t, token)
	c := client(t, f.addr, token)
	ctx := ctxFor(t)
	attrs := &adminproto.Attrs{PartnerId: "p-1", Market: "GB", PaymentType: "CARD_AUTHORIZATION"}
	e, err := c.Explain(ctx, &adminproto.ExplainRequest{Attrs: attrs})
	if err != nil {
		t.Fatal(err)
	}
	if e.Rule != "everything" || e.HashOn != "partner" || e.Key != "p-1" || len(e.Cells) != 3 || e.Cells[0].Rank != 1 || e.Text == "" {
		t.Fatalf("explain: %v", e)
	}
	rk, err := c.RouteKeys(ctx, &adminproto.RouteKeysRequest{Attrs: []*adminproto.Attrs{attrs, attrs}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rk.Home) != 2 || rk.Home[0] != e.Cells[0].CellId || rk.Home[1] != rk.Home[0] {
		t.Fatalf("route keys %v, explain's home %s", rk.Home, e.Cells[0].CellId)
	}
	if _, err := c.Explain(ctx, &adminproto.ExplainRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("explain without attrs: %v", err)
	}
}

func TestTableGetDryRunApply(t *testing.T) {
	f := start(t, token)
	c := client(t, f.addr, token)
	ctx := ctxFor(t)
	tbl, err := c.GetTable(ctx, &adminproto.GetTableRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if tbl.Version != 1 || len(tbl.Cells) != 3 || tbl.Rules[0].HashOn != "partner" {
		t.Fatalf("get: %v", tbl)
	}
	// Take cell-c out of the pool: a third of the keys move, all from cell-c.
	tbl.Version = 2
	tbl.Cells[2].Pool = "spare"
	before := f.st.Table()
	dry, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: tbl, DryRun: true, Samples: 30000})
	if err != nil {
		t.Fatal(err)
	}
	if dry.Applied || f.st.Table() != before || dry.Samples != 30000 {
		t.Fatalf("dry run changed something: %v", dry)
	}
	moved := 0.0
	for _, m := range dry.Moves {
		if m.FromCell != m.ToCell {
			if m.FromCell != "cell-c" {
				t.Fatalf("dry run moves keys off %s", m.FromCell)
			}
			moved += m.Share
		}
	}
	if moved < 0.30 || moved > 0.37 {
		t.Fatalf("dry run moves %.3f of keys, want about a third", moved)
	}
	if _, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: tbl, ExpectedVersion: 7}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stale expected version: %v", err)
	}
	res, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: tbl, ExpectedVersion: 1})
	if err != nil || !res.Applied {
		t.Fatalf("apply: %v %v", res, err)
	}
	got, _ := c.GetTable(ctx, &adminproto.GetTableRequest{})
	if got.Version != 2 || got.Cells[2].Pool != "spare" {
		t.Fatalf("after apply: %v", got)
	}
}

// TestBadInputChangesNothing: every bad request names its field, gets
// INVALID_ARGUMENT or NOT_FOUND, and leaves the table as it was.
func TestBadInputChangesNothing(t *testing.T) {
	f := start(t, token)
	c := client(t, f.addr, token)
	ctx := ctxFor(t)
	good, _ := c.GetTable(ctx, &adminproto.GetTableRequest{})
	table := func(edit func(*adminproto.Table)) *adminproto.Table {
		tb, _ := c.GetTable(ctx, &adminproto.GetTableRequest{})
		tb.Version = 2
		edit(tb)
		return tb
	}
	neg := durationpb.New(-5 * time.Second)
	tests := []struct {
		name  string
		call  func() error
		code  codes.Code
		field string
	}{
		{"weight high", func() error {
			_, err := c.SetWeight(ctx, &adminproto.SetWeightRequest{CellId: "cell-a", Weight: 101})
			return err
		}, codes.InvalidArgument, "weight"},
		{"weight negative", func() error {
			_, err := c.SetWeight(ctx, &adminproto.SetWeightRequest{CellId: "cell-a", Weight: -3})
			return err
		}, codes.InvalidArgument, "weight"},
		{"weight unknown cell", func() error {
			_, err := c.SetWeight(ctx, &adminproto.SetWeightRequest{CellId: "cell-z", Weight: 50})
			return err
		}, codes.NotFound, ""},
		{"weight no cell", func() error {
			_, err := c.SetWeight(ctx, &adminproto.SetWeightRequest{Weight: 50})
			return err
		}, codes.InvalidArgument, "cell_id"},
		{"drain percent", func() error {
			_, err := c.Drain(ctx, &adminproto.DrainRequest{CellId: "cell-a", Percent: 101})
			return err
		}, codes.InvalidArgument, "percent"},
		{"drain negative duration", func() error {
			_, err := c.Drain(ctx, &adminproto.DrainRequest{CellId: "cell-a", Percent: 30, Over: neg})
			return err
		}, codes.InvalidArgument, "over"},
		{"drain unknown cell", func() error {
			_, err := c.Drain(ctx, &adminproto.DrainRequest{CellId: "cell-z", Percent: 30})
			return err
		}, codes.NotFound, ""},
		{"restore negative duration", func() error {
			_, err := c.Restore(ctx, &adminproto.RestoreRequest{CellId: "cell-a", Over: neg})
			return err
		}, codes.InvalidArgument, "over"},
		{"restore unknown cell", func() error {
			_, err := c.Restore(ctx, &adminproto.RestoreRequest{CellId: "nope"})
			return err
		}, codes.NotFound, ""},
		{"table missing", func() error {
			_, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{})
			return err
		}, codes.InvalidArgument, "table"},
		{"table weight", func() error {
			_, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: table(func(t *adminproto.Table) { t.Cells[1].Weight = 200 })})
			return err
		}, codes.InvalidArgument, "table.cells[1].weight"},
		{"table hash_on", func() error {
			_, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: table(func(t *adminproto.Table) { t.Rules[0].HashOn = "colour" })})
			return err
		}, codes.InvalidArgument, "table.rules[0].hash_on"},
		{"table duplicate cell", func() error {
			_, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: table(func(t *adminproto.Table) { t.Cells[2].Id = "cell-a" })})
			return err
		}, codes.InvalidArgument, "table.cells[2].id"},
		{"table pool without cells", func() error {
			_, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: table(func(t *adminproto.Table) { t.Rules[0].Pool = "eu" })})
			return err
		}, codes.InvalidArgument, "table.rules[0].pool"},
		{"table shadowed rule", func() error {
			_, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: table(func(t *adminproto.Table) {
				t.Rules = append(t.Rules, &adminproto.Rule{Name: "gb", Markets: []string{"GB"}, Pool: "main"})
			})})
			return err
		}, codes.InvalidArgument, "table.rules[1]"},
		{"table version not raised", func() error {
			_, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: table(func(t *adminproto.Table) { t.Version = 1 })})
			return err
		}, codes.InvalidArgument, "table.version"},
		{"table version zero", func() error {
			_, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: table(func(t *adminproto.Table) { t.Version = 0 })})
			return err
		}, codes.InvalidArgument, "table.version"},
		{"dry run samples", func() error {
			_, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: good, DryRun: true, Samples: -1})
			return err
		}, codes.InvalidArgument, "samples"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := f.st.Table()
			err := tc.call()
			st := status.Convert(err)
			if st.Code() != tc.code {
				t.Fatalf("got %v, want %v", err, tc.code)
			}
			if tc.field != "" && !hasField(st, tc.field) {
				t.Fatalf("error %v does not name field %q (details %v)", err, tc.field, st.Details())
			}
			if f.st.Table() != before {
				t.Fatal("a refused request changed the table")
			}
		})
	}
}

func hasField(st *status.Status, field string) bool {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				if v.GetField() == field {
					return true
				}
			}
		}
	}
	return false
}

// TestSitesInTheTable: naming the cells' sites (and a pool's spill share)
// moves no key in a dry run; a partner homed in a site is explained and
// routed to its site's cells, and across once the site is below its
// share; a share outside 1..100 is refused naming the pool's field.
func TestSitesInTheTable(t *testing.T) {
	f := start(t, token)
	c := client(t, f.addr, token)
	ctx := ctxFor(t)
	tbl, err := c.GetTable(ctx, &adminproto.GetTableRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tbl.Version = 2
	for i, site := range []string{"site-a", "site-b", "site-b"} {
		tbl.Cells[i].Site = site
	}
	tbl.Pools = []*adminproto.Pool{{Name: tbl.Cells[0].Pool, SpillBelow: 60}}
	dry, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: tbl, DryRun: true, Samples: 5000})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range dry.Moves {
		if m.FromCell != m.ToCell {
			t.Fatalf("naming sites moves keys: %v", dry.Moves)
		}
	}
	bad := proto.Clone(tbl).(*adminproto.Table)
	bad.Pools[0].SpillBelow = 101
	if _, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: bad}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "spill_below 101") {
		t.Fatalf("spill_below 101: %v", err)
	}
	if res, err := c.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: tbl, ExpectedVersion: 1}); err != nil || !res.Applied {
		t.Fatalf("apply: %v %v", res, err)
	}
	if _, err := c.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: "p-homed", HomeSite: "site-a"}); err != nil {
		t.Fatal(err)
	}
	attrs := &adminproto.Attrs{PartnerId: "p-homed", Market: "GB", PaymentType: "CARD_AUTHORIZATION"}
	e, err := c.Explain(ctx, &adminproto.ExplainRequest{Attrs: attrs})
	if err != nil {
		t.Fatal(err)
	}
	ranked := 0
	for _, v := range e.Cells {
		if v.Rank > 0 {
			ranked++
			if v.Site != "site-a" {
				t.Fatalf("a site-a partner ranked on %s of %s:\n%s", v.CellId, v.Site, e.Text)
			}
		}
	}
	if e.HomeSite != "site-a" || e.Across || ranked != 1 || !strings.Contains(e.Text, "spill below 60%: its cells only") {
		t.Fatalf("explain: home %q across %v ranked %d:\n%s", e.HomeSite, e.Across, ranked, e.Text)
	}
	if _, err := c.SetWeight(ctx, &adminproto.SetWeightRequest{CellId: tbl.Cells[0].Id, Weight: 50}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the partner's keys across", func() bool {
		e, err = c.Explain(ctx, &adminproto.ExplainRequest{Attrs: attrs})
		return err == nil && strings.Contains(e.Text, "below spill 60%: ranked over every site")
	})

	// Homed in site-b instead: its cells only; a bad site or partner is refused.
	ch, err := c.SetPartnerHomeSite(ctx, &adminproto.SetPartnerHomeSiteRequest{PartnerId: "p-homed", HomeSite: "site-b"})
	if err != nil || ch.GetPartner().GetHomeSite() != "site-b" {
		t.Fatalf("set home site: %v, %v", ch, err)
	}
	if e, err = c.Explain(ctx, &adminproto.ExplainRequest{Attrs: attrs}); err != nil || e.HomeSite != "site-b" || !strings.Contains(e.Text, `home site "site-b": 100% of its 2 cells' capacity healthy`) {
		t.Fatalf("explain after the move: %v\n%s", err, e.GetText())
	}
	if _, err := c.SetPartnerHomeSite(ctx, &adminproto.SetPartnerHomeSiteRequest{PartnerId: "p-homed", HomeSite: "Site B"}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "home_site") {
		t.Fatalf("a bad site: %v", err)
	}
	if _, err := c.SetPartnerHomeSite(ctx, &adminproto.SetPartnerHomeSiteRequest{PartnerId: "p-nobody", HomeSite: "site-b"}); status.Code(err) != codes.NotFound {
		t.Fatalf("an unknown partner: %v", err)
	}
}
