package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/dev/testutil/cbrecv"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/client"
	"github.com/cellpay/cellpay/pkg/webhook"
)

// cbPartner is a partner a callbacks test registers for itself, with its
// own API key and signing secret, through the Admin API.
type cbPartner struct {
	id, key, secret string
	admin           adminproto.AdminClient
	payments        cellpayv1.PaymentsClient
}

func newCBPartner(t *testing.T, name string) *cbPartner {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	adm := platformAdmin(t)
	id := runID + "-" + name
	var add *adminproto.AddPartnerResponse
	var err error
	// Right after the platform starts, the GTR may not have reached its
	// config store yet (UNAVAILABLE): wait for it.
	testutil.Eventually(t, 20*time.Second, "the partner added", func() bool {
		add, err = adm.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: id})
		return status.Code(err) != codes.Unavailable
	})
	if err != nil {
		t.Fatal(err)
	}
	sec, err := adm.AddCallbackSecret(ctx, &adminproto.AddCallbackSecretRequest{PartnerId: id})
	if err != nil {
		t.Fatal(err)
	}
	p := &cbPartner{id: id, key: add.GetKey().GetApiKey(), secret: sec.GetSecret(), admin: adm}
	tlsOpt, err := client.TLS(env.p.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(env.gtrAddr, tlsOpt, grpc.WithChainUnaryInterceptor(client.PartnerKeys(map[string]string{id: p.key})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	p.payments = cellpayv1.NewPaymentsClient(conn)
	return p
}

func (p *cbPartner) receiver(t *testing.T, name string) *cbrecv.Receiver {
	cert, key := env.p.CallbackCertFiles()
	return cbrecv.Start(t, name, cert, key, func() []string { return []string{p.secret} })
}

// set sets the partner's callbacks and waits until every cell follows
// that registry version.
func (p *cbPartner) set(t *testing.T, mode string, endpoints []string, public string) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	ch, err := p.admin.SetCallbacks(ctx, &adminproto.SetCallbacksRequest{PartnerId: p.id, Mode: mode, Endpoints: endpoints, Public: public})
	if err != nil {
		t.Fatal(err)
	}
	// The last answer is kept, so that a cell that lags says which it is
	// and whether it answered (a cell's error) or lagged (its version).
	var last string
	follows := func() bool {
		resp, err := p.admin.ListCallbacks(ctx, &cellproto.ListCallbacksRequest{PartnerId: p.id, Limit: 1})
		if err != nil {
			last = err.Error()
			return false
		}
		ok := true
		last = ""
		for _, c := range resp.GetCells() {
			last += fmt.Sprintf("%s: registry version %d, error %q; ", c.GetCellId(), c.GetRegistryVersion(), c.GetError())
			if c.GetError() != "" || c.GetRegistryVersion() < ch.GetRegistryVersion() {
				ok = false
			}
		}
		return ok
	}
	if !testutil.Within(20*time.Second, follows) {
		t.Fatalf("not within 20s: every cell follows registry version %d; last seen: %s", ch.GetRegistryVersion(), last)
	}
}

func (p *cbPartner) submit(t *testing.T, ctx context.Context, suffix string) *cellpayv1.Transaction {
	t.Helper()
	r := request(suffix, freshPAN())
	r.PartnerId = p.id
	got, err := p.payments.SubmitTransaction(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func (p *cbPartner) events(t *testing.T, status string) []*cellproto.CallbackEvent {
	t.Helper()
	ctx := ctxFor(t, 10*time.Second)
	req := &cellproto.ListCallbacksRequest{PartnerId: p.id}
	if status != "" {
		req.Statuses = []string{status}
	}
	resp, err := p.admin.ListCallbacks(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetEvents()
}

// got reports whether the receivers together took the event of txn, with
// content equal to txn.
func got(txn *cellpayv1.Transaction, rs ...*cbrecv.Receiver) bool {
	id := webhook.EventID(txn.GetPartnerId(), txn.GetTransactionId())
	for _, r := range rs {
		for _, ev := range r.Events() {
			if ev.ID == id {
				return proto.Equal(ev.Transaction, txn)
			}
		}
	}
	return false
}

// TestCallbacksUnderLoad: every final transaction of a load run (three
// partners over every cell) gets one callback whose content equals the
// record as GetTransaction reads it; a transaction that answered PENDING
// gets its callback once it resolves.
func TestCallbacksUnderLoad(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	var ps []*cbPartner
	keys := map[string]string{}
	recv := map[string]*cbrecv.Receiver{}
	for i := range 3 {
		p := newCBPartner(t, fmt.Sprintf("cbload%d", i))
		r := p.receiver(t, p.id)
		p.set(t, "ordered", []string{r.URL}, "")
		ps = append(ps, p)
		keys[p.id] = p.key
		recv[p.id] = r
	}
	tlsOpt, err := client.TLS(env.p.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var results []load.Result
	cfg := load.Config{
		Target: load.TargetGTR, Addr: env.gtrAddr, Mode: load.ModeClosed, Concurrency: 16, Count: 600, Duration: 60 * time.Second,
		DialOptions: []grpc.DialOption{tlsOpt, grpc.WithChainUnaryInterceptor(client.PartnerKeys(keys))},
		Partners:    []string{ps[0].id, ps[1].id, ps[2].id}, Seed: uint64(time.Now().UnixNano()), RunID: runID + "-cbload",
		PerRequestTimeout: 10 * time.Second,
		OnResult: func(r load.Result) {
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		},
	}
	if _, err := load.Run(ctx, cfg, nil); err != nil {
		t.Fatal(err)
	}
	byPartner := map[string]*cbPartner{}
	for _, p := range ps {
		byPartner[p.id] = p
	}
	var finals []*cellpayv1.Transaction
	for _, r := range results {
		if r.Err != nil || r.Transaction == nil {
			continue
		}
		finals = append(finals, r.Transaction)
	}
	if len(finals) < 500 {
		t.Fatalf("only %d of %d answered", len(finals), len(results))
	}
	// Each poll reads back only the transactions still waiting for their
	// callback: reading all of them again on every poll (each read asks
	// every cell) cost the platform more than the deliveries it waits for.
	cells := map[string]int{}
	waiting := finals
	testutil.Eventually(t, 60*time.Second, "a callback for every final transaction", func() bool {
		var still []*cellpayv1.Transaction
		for _, a := range waiting {
			rec, err := byPartner[a.GetPartnerId()].payments.GetTransaction(ctx, &cellpayv1.GetTransactionRequest{PartnerId: a.GetPartnerId(), TransactionId: a.GetTransactionId()})
			if err != nil || rec.GetStatus() == cellpayv1.TransactionStatus_PENDING || !got(rec, recv[a.GetPartnerId()]) {
				still = append(still, a)
				continue
			}
			cells[rec.GetCellId()]++
		}
		waiting = still
		return len(waiting) == 0
	})
	for id, r := range recv {
		if n := len(r.Events()); n == 0 {
			t.Fatalf("%s: %d events", id, n)
		}
	}
	t.Logf("%d final transactions, each with a callback equal to its record; by cell %v", len(finals), cells)
}

// TestCallbackModes: ordered delivers to the first endpoint, reverse to
// the last, and the public endpoint takes what every private one fails.
func TestCallbackModes(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	p := newCBPartner(t, "cbmodes")
	a, b, pub := p.receiver(t, "a"), p.receiver(t, "b"), p.receiver(t, "pub")
	fail := func(int) cbrecv.Behaviour { return cbrecv.Behaviour{Status: 500} }
	for i, step := range []struct {
		mode string
		down []*cbrecv.Receiver
		want *cbrecv.Receiver
	}{
		{"ordered", nil, a},
		{"reverse", nil, b},
		{"ordered", []*cbrecv.Receiver{a}, b},
		{"reverse", []*cbrecv.Receiver{a, b}, pub},
	} {
		for _, r := range step.down {
			r.Behave(fail)
		}
		p.set(t, step.mode, []string{a.URL, b.URL}, pub.URL)
		var txns []*cellpayv1.Transaction
		for j := range 3 {
			txns = append(txns, p.submit(t, ctx, fmt.Sprintf("cbmodes-%d-%d", i, j)))
		}
		testutil.Eventually(t, 20*time.Second, step.mode+": delivered", func() bool {
			for _, txn := range txns {
				if !got(txn, step.want) {
					return false
				}
			}
			return true
		})
		for _, r := range []*cbrecv.Receiver{a, b, pub} {
			if r != step.want {
				for _, txn := range txns {
					if got(txn, r) {
						t.Fatalf("%s with %d down: %s took an event meant for %s", step.mode, len(step.down), r.Name, step.want.Name)
					}
				}
			}
			r.Behave(nil)
		}
	}
}

// TestCallbackRetries: a receiver down, slow past the cells' timeout, or
// answering 500 is retried, and served once it heals.
func TestCallbackRetries(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	p := newCBPartner(t, "cbretry")
	r := p.receiver(t, "r")
	p.set(t, "ordered", []string{r.URL}, "")
	for _, c := range []struct {
		name        string
		break_, fix func()
	}{
		{"down", r.Down, r.Up},
		{"slow", func() { r.Behave(func(int) cbrecv.Behaviour { return cbrecv.Behaviour{Delay: 3 * time.Second} }) }, func() { r.Behave(nil) }},
		{"500", func() { r.Behave(func(int) cbrecv.Behaviour { return cbrecv.Behaviour{Status: 500} }) }, func() { r.Behave(nil) }},
	} {
		c.break_()
		txn := p.submit(t, ctx, "cbretry-"+c.name)
		id := webhook.EventID(p.id, txn.GetTransactionId())
		testutil.Eventually(t, 20*time.Second, c.name+": failed attempts", func() bool {
			for _, e := range p.events(t, "pending") {
				if e.GetEventId() == id && e.GetAttempts() >= 2 {
					return true
				}
			}
			return false
		})
		c.fix()
		testutil.Eventually(t, 20*time.Second, c.name+": served after healing", func() bool { return got(txn, r) })
	}
}

// TestCallbackDeadLetterReplayed: an event whose every attempt fails is a
// dead letter; gtrctl lists it and replays it, and it is delivered.
func TestCallbackDeadLetterReplayed(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	p := newCBPartner(t, "cbdead")
	r := p.receiver(t, "r")
	r.Behave(func(int) cbrecv.Behaviour { return cbrecv.Behaviour{Status: 500} })
	p.set(t, "ordered", []string{r.URL}, "")
	txn := p.submit(t, ctx, "cbdead")
	id := webhook.EventID(p.id, txn.GetTransactionId())
	testutil.Eventually(t, 30*time.Second, "a dead letter", func() bool {
		dead := p.events(t, "dead")
		return len(dead) == 1 && dead[0].GetEventId() == id
	})
	gtrctl := func(args ...string) string {
		cmd := exec.CommandContext(ctx, env.bin+"/gtrctl", args...)
		cmd.Env = append(os.Environ(), "GTR_ADMIN_ADDR="+env.p.Config().AdminAddr, "GTR_ADMIN_TOKEN_FILE="+env.p.AdminTokenFile(), "GTRCTL_CA="+env.p.CAFile())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("gtrctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := gtrctl("callbacks", "list", p.id, "--status", "dead"); !strings.Contains(out, id) || !strings.Contains(out, "HTTP 500") {
		t.Fatalf("gtrctl callbacks list:\n%s", out)
	}
	r.Behave(nil)
	if out := gtrctl("callbacks", "replay", p.id, "--event", id); !strings.Contains(out, "1 events due again") {
		t.Fatalf("gtrctl callbacks replay:\n%s", out)
	}
	testutil.Eventually(t, 20*time.Second, "the replayed dead letter delivered", func() bool { return got(txn, r) })
	// The receiver has it before the cell records the delivery: wait for
	// the record too.
	testutil.Eventually(t, 10*time.Second, "the delivery recorded, after one attempt", func() bool {
		d := p.events(t, "delivered")
		return len(d) == 1 && d[0].GetAttempts() == 1
	})
}

// TestCallbackCellKilledMidDelivery: kill -9 the cell while deliveries are
// in flight; after its restart every event is delivered, none lost (the
// receiver drops the duplicates of deliveries the cell could not record).
func TestCallbackCellKilledMidDelivery(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	p := newCBPartner(t, "cbkill")
	r := p.receiver(t, "r")
	r.Behave(func(int) cbrecv.Behaviour { return cbrecv.Behaviour{Delay: 700 * time.Millisecond} })
	p.set(t, "ordered", []string{r.URL}, "")
	var txns []*cellpayv1.Transaction
	for i := range 20 {
		txns = append(txns, p.submit(t, ctx, fmt.Sprintf("cbkill-%d", i)))
	}
	cell := txns[0].GetCellId()
	testutil.Eventually(t, 10*time.Second, "deliveries in flight", func() bool { return r.Calls() > 0 })
	if err := env.p.Process(cell).Kill(); err != nil {
		t.Fatal(err)
	}
	waitCellDown(t, cell, "killed")
	if err := env.p.Process(cell).Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitCellUp(t, cell, "restarted")
	r.Behave(nil)
	testutil.Eventually(t, 60*time.Second, "every event delivered after the restart", func() bool {
		for _, txn := range txns {
			if !got(txn, r) {
				return false
			}
		}
		return true
	})
	t.Logf("%d events, %d calls: %d delivered again after the kill and dropped as duplicates", len(txns), r.Calls(), r.Calls()-len(r.Events()))
}
