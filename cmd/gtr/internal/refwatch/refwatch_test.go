package refwatch

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/cellpay/cellpay/cmd/gtr/internal/state"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/pkg/routing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// startNATS starts an in-process core NATS server (no JetStream) on a
// loopback port, which the test can stop and start again on that port.
func startNATS(t *testing.T) *natstest.Server {
	t.Helper()
	return natstest.StartWith(t, func(o *server.Options) { o.JetStream = false })
}

// fakeSink records the last version per cell.
type fakeSink struct {
	mu sync.Mutex
	v  map[string]uint64
}

func (f *fakeSink) SetRefdataVersion(cell string, v uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cell == "not-routed" {
		return false
	}
	if f.v == nil {
		f.v = map[string]uint64{}
	}
	f.v[cell] = v
	return true
}

func (f *fakeSink) get(cell string) (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.v[cell]
	return v, ok
}

// cellPub publishes status reports as a cell does.
type cellPub struct {
	t  *testing.T
	nc *nats.Conn
}

func newPub(t *testing.T, url string) *cellPub {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &cellPub{t: t, nc: nc}
}

func (p *cellPub) report(cell string, v uint64) {
	p.t.Helper()
	b, _ := json.Marshal(refdata.Status{Cell: cell, Version: v, Source: "nats", ReportedAt: time.Now()})
	p.raw(refdata.StatusSubjectPrefix+cell, b)
}

func (p *cellPub) raw(subject string, b []byte) {
	p.t.Helper()
	if err := p.nc.Publish(subject, b); err != nil {
		p.t.Fatal(err)
	}
	if err := p.nc.Flush(); err != nil {
		p.t.Fatal(err)
	}
}

func start(t *testing.T, url string, sink Sink) *Watcher {
	t.Helper()
	w, err := Start(Config{NATSURL: url, Sink: sink, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// subscribed waits until the watcher's subscription is known to the
// server, so that a report published now reaches it.
func subscribed(t *testing.T, w *Watcher) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, "the subscription", func() bool { return w.nc.IsConnected() && w.nc.Flush() == nil })
}

func TestReportsReachTheSink(t *testing.T) {
	ns := startNATS(t)
	sink := &fakeSink{}
	w := start(t, ns.URL(), sink)
	subscribed(t, w)
	pub := newPub(t, ns.URL())

	pub.report("cell-a", 3)
	pub.report("cell-b", 0)
	testutil.Eventually(t, 5*time.Second, "cell-a v3 and cell-b v0", func() bool {
		a, okA := sink.get("cell-a")
		b, okB := sink.get("cell-b")
		return okA && okB && a == 3 && b == 0
	})
	pub.report("cell-a", 4)
	testutil.Eventually(t, 5*time.Second, "cell-a v4", func() bool { v, _ := sink.get("cell-a"); return v == 4 })

	// Unreadable reports are dropped and counted; the last version stays.
	pub.raw(refdata.StatusSubjectPrefix+"cell-a", []byte("not json"))
	pub.raw(refdata.StatusSubjectPrefix+"cell-a", []byte(`{"cell":"cell-a","version":"nine"}`))
	b, _ := json.Marshal(refdata.Status{Cell: "cell-b", Version: 9})
	pub.raw(refdata.StatusSubjectPrefix+"cell-a", b) // names another cell
	testutil.Eventually(t, 5*time.Second, "three drops", func() bool { return w.Stats().Dropped == 3 })
	if v, _ := sink.get("cell-a"); v != 4 {
		t.Fatalf("cell-a at v%d after bad reports, want v4", v)
	}
	if _, ok := sink.get("cell-b"); !ok {
		t.Fatal("cell-b lost")
	}
	if v, _ := sink.get("cell-b"); v != 0 {
		t.Fatalf("a report on cell-a's subject moved cell-b to v%d", v)
	}
	// A cell the sink does not route to is counted apart, and not kept.
	pub.report("not-routed", 5)
	testutil.Eventually(t, 5*time.Second, "one unknown", func() bool { return w.Stats().Unknown == 1 })
	if st := w.Stats(); st.Reports != 3 {
		t.Fatalf("stats %+v, want 3 reports", st)
	}
}

// TestNATSDownKeepsVersions: with NATS gone the versions stay as they
// were; when it comes back the watcher resubscribes and follows again.
func TestNATSDownKeepsVersions(t *testing.T) {
	ns := startNATS(t)
	sink := &fakeSink{}
	w := start(t, ns.URL(), sink)
	subscribed(t, w)
	pub := newPub(t, ns.URL())
	pub.report("cell-a", 5)
	testutil.Eventually(t, 5*time.Second, "cell-a v5", func() bool { v, _ := sink.get("cell-a"); return v == 5 })

	ns.Stop()
	testutil.Eventually(t, 5*time.Second, "the watcher to notice", func() bool { return !w.nc.IsConnected() })
	time.Sleep(300 * time.Millisecond)
	if v, _ := sink.get("cell-a"); v != 5 {
		t.Fatalf("cell-a at v%d with NATS down, want v5", v)
	}

	ns.Restart()
	subscribed(t, w)
	testutil.Eventually(t, 5*time.Second, "the publisher to reconnect", func() bool { return pub.nc.IsConnected() })
	pub.report("cell-a", 6)
	testutil.Eventually(t, 5*time.Second, "cell-a v6 after the restart", func() bool { v, _ := sink.get("cell-a"); return v == 6 })
}

// TestStartWhileNATSDown: Start does not wait for NATS.
func TestStartWhileNATSDown(t *testing.T) {
	ns := startNATS(t)
	ns.Stop()
	sink := &fakeSink{}
	began := time.Now()
	w := start(t, ns.URL(), sink)
	if d := time.Since(began); d > time.Second {
		t.Fatalf("Start waited %v for NATS", d)
	}
	ns.Restart()
	subscribed(t, w)
	newPub(t, ns.URL()).report("cell-c", 2)
	testutil.Eventually(t, 5*time.Second, "cell-c v2", func() bool { v, _ := sink.get("cell-c"); return v == 2 })
}

// TestGatesTheRoutingState: reports flow into a real state.State and a
// rule needing v3 routes only to cells that reported it.
func TestGatesTheRoutingState(t *testing.T) {
	ns := startNATS(t)
	st, err := state.New(state.Config{})
	if err != nil {
		t.Fatal(err)
	}
	doc := state.FromSpec(routing.Spec{
		Version: 1,
		Cells: []routing.Cell{
			{ID: "cell-a", Addr: "127.0.0.1:1", Pool: "main", Weight: 100},
			{ID: "cell-b", Addr: "127.0.0.1:2", Pool: "main", Weight: 100},
		},
		Rules: []routing.Rule{{Name: "fresh", Pool: "main", MinRefdataVersion: 3}},
	})
	if err := st.Apply(doc, 1); err != nil {
		t.Fatal(err)
	}
	w := start(t, ns.URL(), st)
	subscribed(t, w)
	route := func() ([]string, error) {
		var buf [4]routing.Choice
		res, err := st.Table().Route(&routing.Attrs{PartnerID: "p"}, buf[:0])
		var ids []string
		for _, c := range res.Ranked {
			ids = append(ids, c.Cell.ID)
		}
		return ids, err
	}
	if _, err := route(); !errors.Is(err, routing.ErrNoCell) {
		t.Fatalf("before any report: %v", err)
	}
	pub := newPub(t, ns.URL())
	pub.report("cell-a", 2)
	pub.report("cell-b", 3)
	testutil.Eventually(t, 5*time.Second, "cell-b alone", func() bool { ids, err := route(); return err == nil && len(ids) == 1 && ids[0] == "cell-b" })
	pub.report("cell-a", 3)
	testutil.Eventually(t, 5*time.Second, "both cells", func() bool { ids, err := route(); return err == nil && len(ids) == 2 })
	// A cell not in the table: the state keeps nothing for it.
	pub.report("cell-z", 7)
	testutil.Eventually(t, 5*time.Second, "cell-z refused", func() bool { return w.Stats().Unknown == 1 })
	if v, since := st.RefdataVersion("cell-z"); v != 0 || !since.IsZero() {
		t.Fatalf("cell-z, not in the table, recorded at v%d", v)
	}
}

func TestConfig(t *testing.T) {
	if _, err := Start(Config{Sink: &fakeSink{}}); err == nil {
		t.Fatal("no URL accepted")
	}
	if _, err := Start(Config{NATSURL: "nats://127.0.0.1:1"}); err == nil {
		t.Fatal("no Sink accepted")
	}
}
