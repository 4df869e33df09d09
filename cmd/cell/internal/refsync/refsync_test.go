package refsync

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/internal/refdata/refnats"
	"github.com/cellpay/cellpay/internal/telemetry"
)

// TestMain starts a private Postgres for the benchmark; each test checks
// for leaked goroutines itself (checkLeaks).
func TestMain(m *testing.M) { pgtest.Main(m) }

// checkLeaks fails t if goroutines outlive it, after its cleanups ran.
func checkLeaks(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, pgtest.IgnoreGoroutines()) })
}

// fakeStore keeps one version in memory with the store's ordering rules;
// fail makes every write fail, as Postgres being away would.
type fakeStore struct {
	mu   sync.Mutex
	f    *refdata.File
	meta store.RefdataMeta
	fail bool
}

func (s *fakeStore) LoadRefdata(context.Context) (refdata.File, store.RefdataMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return refdata.File{}, store.RefdataMeta{}, store.ErrNoRefdata
	}
	snap, _ := refdata.FromFile(*s.f)
	return snap.File(), s.meta, nil
}

func (s *fakeStore) SaveRefdataSnapshotDiff(_ context.Context, _ uint64, _ refdata.Diff, next *refdata.Snapshot, meta store.RefdataMeta) error {
	f := next.File()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return errors.New("fake: down")
	}
	if s.f != nil && s.f.Version >= f.Version {
		return store.ErrRefdataOrder
	}
	s.f, s.meta = &f, meta
	return nil
}

func (s *fakeStore) SaveRefdataUpdate(_ context.Context, base, version uint64, u refdata.Update, meta store.RefdataMeta) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return errors.New("fake: down")
	}
	if s.f == nil || s.f.Version != base {
		return store.ErrRefdataOrder
	}
	snap, _ := refdata.FromFile(*s.f)
	next, err := snap.Apply(version, u)
	if err != nil {
		return err
	}
	f := next.File()
	s.f, s.meta = &f, meta
	return nil
}

// runNATS starts a NATS server with JetStream for the test and returns its
// URL.
func runNATS(t *testing.T) string {
	t.Helper()
	return natstest.Start(t).URL()
}

func sample(t *testing.T) refdata.File {
	t.Helper()
	f, err := refdata.ReadSource("../../../../config/refdata")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

type publisher struct {
	t  *testing.T
	js jetstream.JetStream
	s  jetstream.Stream
}

func newPublisher(t *testing.T, url string) *publisher {
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	s, _, err := refnats.EnsureStream(ctxT(t), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	return &publisher{t, js, s}
}

func (p *publisher) publish(m *refdata.Message, body []byte) {
	p.t.Helper()
	m.PublishedAt = time.Now().UTC()
	_, seq, _ := refnats.Last(ctxT(p.t), p.s)
	if _, _, err := refnats.Publish(ctxT(p.t), p.js, m, seq, body); err != nil {
		p.t.Fatal(err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSyncAppliesRefusesAndRestarts(t *testing.T) {
	checkLeaks(t)
	url := runNATS(t)
	pub := newPublisher(t, url)
	st := &fakeStore{}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(ctxT(t), Config{CellID: "cell-t", Store: st, NATSURL: url, Log: log, StatusInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if s.Serving() {
		t.Fatal("serving with nothing to serve")
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	nc, _ := nats.Connect(url)
	defer nc.Close()
	statuses, _ := nc.SubscribeSync(refdata.StatusSubjectPrefix + "cell-t")

	f := sample(t)
	f.Version = 1
	pub.publish(&refdata.Message{Version: 1, Kind: refdata.KindSnapshot, Snapshot: &f, Hash: refdata.ContentHash(f)}, nil)
	if err := s.WaitServing(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	v1 := s.View()
	if v1.Version() != "1" {
		t.Fatalf("version %q", v1.Version())
	}
	if got, err := v1.Convert(10000, "EUR", "GBP"); err != nil || got != 8412 {
		t.Fatalf("convert: %d, %v", got, err)
	}
	if m, ok := v1.MCC("7995"); !ok || !v1.Blocked(m.Category) || v1.SettlementCurrency("p-004") != "JPY" || v1.SettlementCurrency("p-x") != "EUR" {
		t.Fatalf("view: %+v %v", m, ok)
	}

	// An update: the new view sees it, the old view still sees version 1.
	u := refdata.Update{FXRates: map[string]string{"GBP": "0.9"}}
	pub.publish(&refdata.Message{Version: 2, Kind: refdata.KindUpdate, Base: 1, Update: &u, Hash: refdata.ContentHash(u)}, nil)
	testutil.Eventually(t, 10*time.Second, "version 2", func() bool { return s.View().Version() == "2" })
	if got, _ := s.View().Convert(10000, "EUR", "GBP"); got != 9000 {
		t.Fatalf("after update: %d", got)
	}
	if got, _ := v1.Convert(10000, "EUR", "GBP"); got != 8412 || v1.Version() != "1" {
		t.Fatalf("old view changed: %d %s", got, v1.Version())
	}

	// Refused whole: garbage, a snapshot that does not validate, an update
	// on a base that is not served.
	bad := sample(t)
	bad.Version = 3
	bad.FXRates["GBP"] = "-1"
	pub.publish(&refdata.Message{Version: 3, Kind: refdata.KindSnapshot, Snapshot: &bad, Hash: "bad"}, nil)
	pub.publish(&refdata.Message{Version: 4, Kind: refdata.KindSnapshot, Hash: "garbage"}, []byte(`{"version": 4, "kind": "snap`))
	pub.publish(&refdata.Message{Version: 5, Kind: refdata.KindUpdate, Base: 4, Update: &u, Hash: "u"}, nil)
	testutil.Eventually(t, 10*time.Second, "three refusals", func() bool { return s.Status().Refused == 3 })
	if s.View().Version() != "2" || st.f.Version != 2 {
		t.Fatalf("served %s, stored %d after refusals", s.View().Version(), st.f.Version)
	}
	if !strings.Contains(s.Status().LastRefused, "based on 4, but 2 is served") {
		t.Fatalf("last refused: %q", s.Status().LastRefused)
	}

	// Postgres away: the version waits, nothing is half-applied, and it
	// lands once Postgres is back.
	st.mu.Lock()
	st.fail = true
	st.mu.Unlock()
	u2 := refdata.Update{MCC: map[string]refdata.MCC{"1111": {Category: "test", Risk: refdata.RiskLow}}}
	published := time.Now()
	pub.publish(&refdata.Message{Version: 6, Kind: refdata.KindUpdate, Base: 2, Update: &u2, Hash: "u2"}, nil)
	time.Sleep(200 * time.Millisecond)
	if _, ok := s.View().MCC("1111"); ok || s.View().Version() != "2" {
		t.Fatal("applied in memory without Postgres")
	}
	st.mu.Lock()
	st.fail = false
	st.mu.Unlock()
	testutil.Eventually(t, 10*time.Second, "version 6", func() bool { return s.View().Version() == "6" })

	// The status report carries the served version.
	testutil.Eventually(t, 10*time.Second, "a status for version 6", func() bool {
		msg, err := statuses.NextMsg(time.Second)
		if err != nil {
			return false
		}
		var got refdata.Status
		return json.Unmarshal(msg.Data, &got) == nil && got.Version == 6 && got.Cell == "cell-t" && got.Source == SourceNATS
	})
	// Staleness is the age of the served version's publication: no more
	// than the time since version 6 was published (however long the
	// store's recovery took on this machine), and more than the 200 ms
	// the store was down for.
	if st, since := s.Staleness(), time.Since(published); st < 200*time.Millisecond || st > since+time.Second {
		t.Fatalf("staleness %v, %v after version 6 was published", st, since)
	}
	tel, err := telemetry.Setup(ctxT(t), telemetry.Config{Service: "cell", Instance: "cell-t",
		Labels: map[string]string{"cell": "cell-t"}, MetricsListen: "127.0.0.1:0", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctxT(t))
	if _, err := s.RegisterMetrics(tel.Meter("test")); err != nil {
		t.Fatal(err)
	}
	metrics := testutil.Scrape(t, tel.MetricsAddr())
	for _, want := range []string{
		`cellpay_refdata_version{cell="cell-t",service_instance_id="cell-t",service_name="cell"} 6`,
		`cellpay_refdata_refused_total{cell="cell-t",service_instance_id="cell-t",service_name="cell"} 3`,
		`cellpay_refdata_applied_total{cell="cell-t",service_instance_id="cell-t",service_name="cell"} 3`,
		`cellpay_refdata_nats_connected{cell="cell-t",service_instance_id="cell-t",service_name="cell"} 1`,
		`cellpay_refdata_serving{cell="cell-t",service_instance_id="cell-t",service_name="cell"} 1`,
		`cellpay_refdata_staleness_seconds{cell="cell-t",`,
		`cellpay_refdata_last_apply_seconds{cell="cell-t",`,
	} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("metrics lack %s:\n%s", want, metrics)
		}
	}

	// A restart without NATS serves the stored version.
	again, err := New(ctxT(t), Config{CellID: "cell-t", Store: st, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Serving() || again.View().Version() != "6" || again.Status().Source != SourcePostgres {
		t.Fatalf("after restart: %+v", again.Status())
	}
	if _, ok := again.View().MCC("1111"); !ok {
		t.Fatal("restart lost the update")
	}
}

func TestBootstrap(t *testing.T) {
	checkLeaks(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(ctxT(t), Config{CellID: "c", Store: &fakeStore{}, BootstrapFile: "../../../../config/refdata.json", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Serving() || s.View().Version() != "0" || s.Status().Source != SourceBootstrap {
		t.Fatalf("bootstrap: %+v", s.Status())
	}
	if _, err := New(ctxT(t), Config{CellID: "c", Store: &fakeStore{}, Log: log}); err == nil {
		t.Fatal("no data, no NATS: accepted")
	}
}
