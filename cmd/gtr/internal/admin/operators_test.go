package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/cmd/gtr/internal/audit"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/internal/logging"
	"github.com/cellpay/cellpay/internal/operators"
	"github.com/cellpay/cellpay/internal/partnerstate"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

// TestPolicyCovers: every method of the Admin service is in the policy
// table, and the table names no method the service lacks.
func TestPolicyCovers(t *testing.T) {
	desc := adminproto.Admin_ServiceDesc
	names := map[string]bool{}
	for _, m := range desc.Methods {
		names[m.MethodName] = true
	}
	for _, m := range desc.Streams {
		names[m.StreamName] = true
	}
	for name := range names {
		if _, ok := policy[name]; !ok {
			t.Errorf("Admin method %s is not in the policy table (policy.go): say which role may call it", name)
		}
		if need, open := required(servicePrefix + name); open || need > operators.RoleAdmin || need == operators.RoleNone {
			t.Errorf("%s: need %v, open %v", name, need, open)
		}
	}
	for name := range policy {
		if !names[name] {
			t.Errorf("the policy names %s, which the Admin service has not", name)
		}
	}
	if need, open := required(servicePrefix + "NotAMethod"); open || need <= operators.RoleAdmin {
		t.Errorf("an unknown method needs %v (open %v): must be refused to every role", need, open)
	}
}

// blockedHandler blocks every record until release is closed: a logger
// over it, behind the bounded async handler, is saturated and drops.
type blockedHandler struct{ release chan struct{} }

func (h blockedHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h blockedHandler) Handle(context.Context, slog.Record) error {
	<-h.release
	return nil
}
func (h blockedHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h blockedHandler) WithGroup(string) slog.Handler      { return h }

func dialAs(t *testing.T, addr, tok string) adminproto.AdminClient {
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

func weightOf(t *testing.T, c adminproto.AdminClient, id string) int32 {
	t.Helper()
	resp, err := c.ListCells(context.Background(), &adminproto.ListCellsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range resp.GetCells() {
		if cs.GetId() == id {
			return cs.GetTargetWeight()
		}
	}
	t.Fatalf("no cell %s", id)
	return 0
}

// threeOperators is an operators index of vera (viewer), otto (operator)
// and ada (admin), with each one's token by name.
func threeOperators(t *testing.T) (*operators.Index, map[string]string) {
	t.Helper()
	var f operators.File
	toks := map[string]string{}
	for _, o := range []struct {
		id   string
		role operators.Role
	}{{"vera", operators.RoleViewer}, {"otto", operators.RoleOperator}, {"ada", operators.RoleAdmin}} {
		tok, op, err := operators.NewToken(nil, o.id, o.role)
		if err != nil {
			t.Fatal(err)
		}
		toks[o.id] = tok
		f.Operators = append(f.Operators, op)
	}
	ix, err := operators.Compile(&f, "")
	if err != nil {
		t.Fatal(err)
	}
	return ix, toks
}

// TestOperatorRoles runs the admin API over loopback gRPC with three
// operators and the audit log on a real NATS server, while the process
// logger is saturated (every log record dropped): roles are enforced, and
// every change and refusal is in the audit with actor, before and after.
func TestOperatorRoles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ix, toks := threeOperators(t)
	ns := natstest.Start(t)
	al, err := audit.Open(audit.Config{NATSURL: ns.URL(), Replica: "test", File: filepath.Join(t.TempDir(), "spool.jsonl"),
		MaxSpool: 1, Timeout: 300 * time.Millisecond, RetryInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	release := make(chan struct{})
	async := logging.NewAsync(blockedHandler{release}, 1)
	defer async.Close()
	defer close(release)
	log := slog.New(async)
	for range 4 { // fill the buffer: from here on the logger drops
		log.Info("filler")
	}
	fx := startServer(t, ix, al, log, partnerstate.Config{}, nil)
	viewer, oper, adm := dialAs(t, fx.addr, toks["vera"]), dialAs(t, fx.addr, toks["otto"]), dialAs(t, fx.addr, toks["ada"])
	start := time.Now().Add(-time.Second)

	// A viewer reads, but cannot drain; the drain did not happen.
	if w := weightOf(t, viewer, "cell-b"); w != 100 {
		t.Fatalf("cell-b weight %d before any change", w)
	}
	_, err = viewer.Drain(ctx, &adminproto.DrainRequest{CellId: "cell-b", Percent: 30})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "needs role operator") || strings.Contains(err.Error(), toks["vera"]) {
		t.Fatalf("viewer Drain: %v", err)
	}
	if w := weightOf(t, adm, "cell-b"); w != 100 {
		t.Fatalf("cell-b weight %d after a refused drain", w)
	}
	// An operator drains.
	if cs, err := oper.Drain(ctx, &adminproto.DrainRequest{CellId: "cell-b", Percent: 30}); err != nil || cs.GetTargetWeight() != 70 {
		t.Fatalf("operator Drain: %v, %v", cs, err)
	}
	// An operator cannot apply a table, not even as a dry run.
	tbl, err := oper.GetTable(ctx, &adminproto.GetTableRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tbl.Version++
	if _, err := oper.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: tbl, DryRun: true}); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "needs role admin") {
		t.Fatalf("operator ApplyTable: %v", err)
	}
	// An admin can.
	tbl.Cells[2].Weight = 50
	if r, err := adm.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: tbl}); err != nil || !r.GetApplied() {
		t.Fatalf("admin ApplyTable: %v, %v", r, err)
	}
	// No token, garbage, a forged secret: UNAUTHENTICATED; health needs none.
	forged := toks["otto"][:len(toks["otto"])-4] + "0000"
	for name, tok := range map[string]string{"none": "", "garbage": "garbage", "forged": forged} {
		if _, err := dialAs(t, fx.addr, tok).ListCells(ctx, &adminproto.ListCellsRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s token: %v", name, err)
		}
	}
	conn, _ := grpc.NewClient(fx.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health without a token: %v", err)
	}

	// The audit, read as a viewer: the refusals and the changes.
	resp, err := viewer.ListAudit(ctx, &adminproto.ListAuditRequest{Since: timestamppb.New(start)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var changes []*adminproto.AuditRecord
	failed := 0
	for _, r := range resp.GetRecords() {
		if r.GetTime().AsTime().Before(start) || r.GetReplica() != "test" {
			t.Errorf("record %v: time or replica", r)
		}
		if r.GetOutcome() == codes.Unauthenticated.String() {
			// A failed login: who is unknown; where from, never the token.
			failed++
			if r.GetActor() != "" || r.GetMethod() != "ListCells" || !strings.Contains(r.GetError(), "from 127.0.0.1") ||
				strings.Contains(r.GetError(), "garbage") || strings.Contains(r.GetError(), forged) {
				t.Errorf("failed login record %v", r)
			}
			continue
		}
		changes = append(changes, r)
		got = append(got, r.GetActor()+" "+r.GetMethod()+" "+r.GetOutcome())
	}
	want := []string{"vera Drain PermissionDenied", "otto Drain OK", "otto ApplyTable PermissionDenied", "ada ApplyTable OK"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") || failed != 3 {
		t.Fatalf("audit:\n got %q and %d failed logins\nwant %q and 3", got, failed, want)
	}
	var before, after cellView
	drain := changes[1]
	if err := json.Unmarshal([]byte(drain.GetBefore()), &before); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(drain.GetAfter()), &after); err != nil {
		t.Fatal(err)
	}
	if before.Cell != "cell-b" || before.Weight != 100 || after.Weight != 70 || !strings.Contains(drain.GetRequest(), `"percent":30`) {
		t.Fatalf("drain record: before %+v after %+v request %s", before, after, drain.GetRequest())
	}
	apply := resp.GetRecords()[3]
	if !strings.Contains(apply.GetBefore(), `"version":2`) || !strings.Contains(apply.GetAfter(), `"version":3`) || !strings.Contains(apply.GetAfter(), `"cell-c":50`) {
		t.Fatalf("apply record: before %s after %s", apply.GetBefore(), apply.GetAfter())
	}
	if async.Dropped() == 0 {
		t.Fatal("the logger dropped nothing: the test did not saturate it")
	}

	// With the stream down the spool takes one record; once it is full a
	// change is refused before it is made.
	ns.Stop()
	if _, err := oper.Restore(ctx, &adminproto.RestoreRequest{CellId: "cell-b"}); err != nil {
		t.Fatalf("Restore with the stream down (spooled): %v", err)
	}
	_, err = oper.Drain(ctx, &adminproto.DrainRequest{CellId: "cell-b", Percent: 50})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Drain with a full spool: %v", err)
	}
	if w := weightOf(t, viewer, "cell-b"); w != 100 {
		t.Fatalf("cell-b weight %d: a change that could not be audited was made", w)
	}
}

// TestFailedLoginsThrottled: after ten failed logins from one address
// within a minute, its calls are refused (RESOURCE_EXHAUSTED) before any
// token is looked at, a valid one included.
func TestFailedLoginsThrottled(t *testing.T) {
	const tok = "cpo_legacy_token_for_the_test"
	fx := start(t, tok)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 10 {
		if _, err := dialAs(t, fx.addr, "wrong").ListCells(ctx, &adminproto.ListCellsRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	_, err := dialAs(t, fx.addr, tok).ListCells(ctx, &adminproto.ListCellsRequest{})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "retry in") {
		t.Fatalf("after 10 failures, the right token: %v; want RESOURCE_EXHAUSTED with when to retry", err)
	}
}

// TestFailureBudget: failures are counted per address, the oldest address
// goes when the table is full, and the audit records at most auditBurst
// failures at once, then auditPerSecond, saying how many it left out.
func TestFailureBudget(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	f := newFailures(func() time.Time { return now })
	recorded := 0
	for i := range auditBurst + 5 {
		if ok, _ := f.fail(fmt.Sprintf("10.0.0.%d", i%200)); ok {
			recorded++
		}
	}
	if recorded != auditBurst {
		t.Fatalf("recorded %d of a burst, want %d", recorded, auditBurst)
	}
	now = now.Add(time.Second)
	if ok, suppressed := f.fail("10.0.0.1"); !ok || suppressed != 5 {
		t.Fatalf("a second later: recorded %v, suppressed %d; want true, 5", ok, suppressed)
	}
	for i := range maxSources + 10 {
		f.fail(fmt.Sprintf("192.168.%d.%d", i/256, i%256))
	}
	if n := len(f.sources); n > maxSources {
		t.Fatalf("%d sources held, bound %d", n, maxSources)
	}
	now = now.Add(failureWindow)
	if _, locked := f.locked("10.0.0.1"); locked {
		t.Fatal("still locked after the window")
	}
	if got := sourceOf("[::ffff:10.1.2.3]:443"); got != "10.1.2.3" {
		t.Fatalf("sourceOf = %q", got)
	}
}

// TestLoginFailuresCounted: the console's login counts each failure by
// reason, and the attempts refused once the address is throttled.
func TestLoginFailuresCounted(t *testing.T) {
	ix, err := operators.Compile(nil, "cpo_legacy_token_for_the_test")
	if err != nil {
		t.Fatal(err)
	}
	a := NewAuth(ix)
	counts := map[string]int{}
	a.OnFailure = func(reason string) { counts[reason]++ }
	for range maxFailures {
		if _, err := a.Login(context.Background(), "wrong", "10.9.8.7:5555"); err == nil {
			t.Fatal("a wrong token logged in")
		}
	}
	if _, err := a.Login(context.Background(), "cpo_legacy_token_for_the_test", "10.9.8.7:5556"); !errors.Is(err, operators.ErrThrottled) {
		t.Fatalf("the right token from a throttled address: %v, want ErrThrottled", err)
	}
	if _, err := a.Login(context.Background(), "cpo_legacy_token_for_the_test", "10.9.8.8:5555"); err != nil {
		t.Fatalf("the right token from another address: %v", err)
	}
	if counts["invalid_token"] != maxFailures || counts["throttled"] != 1 || len(counts) != 2 {
		t.Fatalf("counted %v", counts)
	}
	// The console's in-process connection (no IP address) is never
	// refused, however many of its calls fail.
	for range 2 * maxFailures {
		a.fails.fail(sourceOf("bufconn"))
	}
	if _, locked := a.locked(sourceOf("bufconn")); locked {
		t.Fatal("the console's in-process connection is throttled")
	}
}
