package partnerstate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/internal/kvsync"
	"github.com/cellpay/cellpay/internal/partners"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type opts struct {
	url, file, stateFile string
	log                  io.Writer
	readOnly             bool
}

func start(t *testing.T, o opts) *Store {
	t.Helper()
	if o.log == nil {
		o.log = io.Discard
	}
	s, err := Start(Config{File: o.file, NATSURL: o.url, StateFile: o.stateFile, ReplicaID: t.Name(),
		PollInterval: 100 * time.Millisecond, OpTimeout: time.Second, ReadOnly: o.readOnly,
		Log: slog.New(slog.NewTextHandler(o.log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// addPartner adds an active partner with one new key and returns the key.
func addPartner(t *testing.T, s *Store, id string) string {
	t.Helper()
	plain, key, err := partners.NewKey(nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctxFor(t), func(r *partners.Registry) error {
		return r.Add(partners.Partner{ID: id, Status: partners.StatusActive, Keys: []partners.Key{key}})
	}); err != nil {
		t.Fatal(err)
	}
	return plain
}

func authenticates(s *Store, key, partner string) bool {
	p, err := s.Index().Authenticate(key)
	return err == nil && p.ID == partner
}

func connected(ss ...*Store) func() bool {
	return func() bool {
		for _, s := range ss {
			if s.Status() != kvsync.StatusConnected {
				return false
			}
		}
		return true
	}
}

func TestConverge(t *testing.T) {
	ns := natstest.Start(t)
	r1 := start(t, opts{url: ns.URL()})
	r2 := start(t, opts{url: ns.URL()})
	testutil.Eventually(t, 5*time.Second, "both connected", connected(r1, r2))
	key := addPartner(t, r1, "p-001")
	if !authenticates(r1, key, "p-001") {
		t.Fatal("the writer does not authenticate the new key at once")
	}
	testutil.Eventually(t, 2*time.Second, "replica 2 authenticates the new partner", func() bool { return authenticates(r2, key, "p-001") })
	if v1, v2 := r1.Index().Version(), r2.Index().Version(); v1 != 1 || v2 != 1 {
		t.Fatalf("versions %d and %d, want 1 (seeded empty at 0, one change)", v1, v2)
	}
	// A suspension through replica 2 reaches replica 1.
	if err := r2.Update(ctxFor(t), func(r *partners.Registry) error {
		_, err := r.SetStatus("p-001", partners.StatusSuspended)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Second, "replica 1 sees the suspension", func() bool {
		_, err := r1.Index().Authenticate(key)
		return errors.Is(err, partners.ErrSuspended)
	})
}

// TestReadOnlyFollows: a read-only store (a cell's) waits for the bucket
// and the entry without creating either, follows every change the writers
// make, keeps its last-known registry in its state file, and refuses to
// write.
func TestReadOnlyFollows(t *testing.T) {
	ns := natstest.Start(t)
	file := filepath.Join(t.TempDir(), "cell-partners.json")
	ro := start(t, opts{url: ns.URL(), stateFile: file, readOnly: true})
	time.Sleep(300 * time.Millisecond)
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.KeyValue(ctxFor(t), kvsync.DefaultBucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("a read-only store touched the bucket: %v", err)
	}
	w := start(t, opts{url: ns.URL()})
	testutil.Eventually(t, 5*time.Second, "both connected", connected(w, ro))
	key := addPartner(t, w, "p-001")
	testutil.Eventually(t, 3*time.Second, "the read-only store follows", func() bool { return authenticates(ro, key, "p-001") })
	if err := ro.Update(ctxFor(t), func(*partners.Registry) error { return nil }); !errors.Is(err, kvsync.ErrReadOnly) {
		t.Fatalf("read-only Update: %v, want ErrReadOnly", err)
	}
	ro.Close()
	again := start(t, opts{stateFile: file, readOnly: true})
	if !authenticates(again, key, "p-001") {
		t.Fatal("a read-only store does not start from its state file")
	}
}

func TestNATSDownAndRestartFromFile(t *testing.T) {
	ns := natstest.Start(t)
	dir := t.TempDir()
	file1 := filepath.Join(dir, "r1.json")
	r1 := start(t, opts{url: ns.URL(), stateFile: file1})
	r2 := start(t, opts{url: ns.URL(), stateFile: filepath.Join(dir, "r2.json")})
	testutil.Eventually(t, 5*time.Second, "both connected", connected(r1, r2))
	key := addPartner(t, r1, "p-001")
	testutil.Eventually(t, 2*time.Second, "replica 2 has the partner", func() bool { return authenticates(r2, key, "p-001") })

	ns.Stop()
	testutil.Eventually(t, 5*time.Second, "both disconnected", func() bool {
		return r1.Status() == kvsync.StatusDisconnected && r2.Status() == kvsync.StatusDisconnected
	})
	for i, r := range []*Store{r1, r2} {
		if !authenticates(r, key, "p-001") {
			t.Fatalf("replica %d stopped authenticating with NATS down", i+1)
		}
	}
	before := r1.Index()
	begin := time.Now()
	err := r1.Update(ctxFor(t), func(r *partners.Registry) error {
		return r.Add(partners.Partner{ID: "p-002", Status: partners.StatusActive})
	})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("update with NATS down: %v, want ErrUnavailable", err)
	}
	if d := time.Since(begin); d > 500*time.Millisecond {
		t.Fatalf("a write with NATS down took %v; it must fail fast", d)
	}
	if r1.Index() != before {
		t.Fatal("the registry changed while NATS was down")
	}

	// A replica restarted while NATS is down serves from its state file at once.
	r1.Close()
	begin = time.Now()
	r3 := start(t, opts{url: ns.URL(), stateFile: file1})
	if d := time.Since(begin); d > time.Second {
		t.Fatalf("start with NATS down took %v", d)
	}
	if !authenticates(r3, key, "p-001") {
		t.Fatal("the restarted replica does not authenticate from its state file")
	}
	if st, err := os.Stat(file1); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode %v (%v), want 0600: it holds hashes and callback secrets", st.Mode(), err)
	}

	// NATS back with its store: both take new changes.
	ns.Restart()
	testutil.Eventually(t, 10*time.Second, "reconnected", connected(r2, r3))
	key2 := addPartner(t, r2, "p-002")
	testutil.Eventually(t, 3*time.Second, "replica 3 has the new partner", func() bool { return authenticates(r3, key2, "p-002") })
	if !authenticates(r3, key, "p-001") {
		t.Fatal("the first partner was lost")
	}
}

// TestBadEntriesRefused: an entry that does not decode, or a registry that
// fails validation, written by someone else, is refused and logged, and
// the registry in force stays.
func TestBadEntriesRefused(t *testing.T) {
	ns := natstest.Start(t)
	var log testutil.Buffer
	r := start(t, opts{url: ns.URL(), log: &log})
	testutil.Eventually(t, 5*time.Second, "connected", connected(r))
	key := addPartner(t, r, "p-001")
	good := r.Index()

	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctxFor(t), kvsync.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	reg := good.Registry().Clone()
	reg.Version++
	reg.Partners = append(reg.Partners, reg.Partners[0]) // listed twice
	invalid, _ := json.Marshal(reg)
	for _, c := range []struct {
		name, value, logged string
	}{
		{"garbage", "\x00not json{", "not a JSON object"},
		{"unknown field", `{"version": 9, "partners": [], "extra": true}`, "unknown field"},
		{"invalid registry", string(invalid), "listed twice"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := strings.Count(log.String(), "refused an entry")
			rev, err := kv.Put(ctxFor(t), Key, []byte(c.value))
			if err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 2*time.Second, "the refusal logged", func() bool { return strings.Count(log.String(), "refused an entry") == n+1 })
			if !strings.Contains(log.String(), c.logged) {
				t.Fatalf("the refusal does not say why (%s):\n%s", c.logged, log.String())
			}
			if !strings.Contains(log.String(), "revision="+itoa(rev)) {
				t.Fatalf("the refusal does not name revision %d:\n%s", rev, log.String())
			}
			if r.Index() != good || !authenticates(r, key, "p-001") {
				t.Fatal("a bad entry replaced the registry in force")
			}
		})
	}
	if strings.Contains(log.String(), key) {
		t.Fatal("a key reached the log")
	}
}

func itoa(n uint64) string { b, _ := json.Marshal(n); return string(b) }

// TestSeedFromFile: the first replica on an empty bucket seeds it from its
// file; a replica started later with another file takes the bucket's.
func TestSeedFromFile(t *testing.T) {
	ns := natstest.Start(t)
	dir := t.TempDir()
	plain, key, _ := partners.NewKey(nil, time.Now())
	seedFile := filepath.Join(dir, "partners.yaml")
	yaml := "version: 3\npartners:\n  - id: p-seed\n    status: active\n    keys:\n      - id: " + key.ID + "\n        hash: " + key.Hash + "\n        created: " + key.Created.Format(time.RFC3339) + "\n"
	if err := os.WriteFile(seedFile, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	r1 := start(t, opts{url: ns.URL(), file: seedFile})
	if !authenticates(r1, plain, "p-seed") {
		t.Fatal("not serving its seed file before NATS answered")
	}
	testutil.Eventually(t, 5*time.Second, "connected", connected(r1))
	other := filepath.Join(dir, "other.yaml")
	os.WriteFile(other, []byte("version: 9\npartners: []\n"), 0o644)
	r2 := start(t, opts{url: ns.URL(), file: other})
	testutil.Eventually(t, 5*time.Second, "replica 2 takes the bucket's registry", func() bool { return authenticates(r2, plain, "p-seed") })
	if v := r2.Index().Version(); v != 3 {
		t.Fatalf("version %d, want the bucket's 3", v)
	}
}

// TestEmptyByDefault: without a file every key is refused, and Index is
// never nil, before and after Start.
func TestEmptyByDefault(t *testing.T) {
	ns := natstest.Start(t)
	url := ns.URL()
	ns.Stop()
	r := start(t, opts{url: url})
	if r.Index() == nil || len(r.Index().Registry().Partners) != 0 {
		t.Fatal("want an empty registry")
	}
	k, _, _ := partners.NewKey(nil, time.Now())
	if _, err := r.Index().Authenticate(k); !errors.Is(err, partners.ErrUnauthenticated) {
		t.Fatalf("a key against the empty registry: %v", err)
	}
	if err := r.Update(ctxFor(t), func(*partners.Registry) error { return nil }); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("update before NATS ever answered: %v", err)
	}
}

func TestStandaloneAndVersion(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state.json")
	r := start(t, opts{stateFile: file})
	if r.Status() != kvsync.StatusStandalone {
		t.Fatal(r.Status())
	}
	key := addPartner(t, r, "p-001")
	// fn sees the raised version; a version fn sets is set back.
	var seen uint64
	if err := r.Update(ctxFor(t), func(reg *partners.Registry) error {
		seen = reg.Version
		reg.Version = 100
		_, err := reg.SetStatus("p-001", partners.StatusSuspended)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if seen != 2 || r.Index().Version() != 2 {
		t.Fatalf("fn saw version %d, in force %d; want 2 and 2", seen, r.Index().Version())
	}
	// An invalid change and fn's own error change nothing.
	before := r.Index()
	err := r.Update(ctxFor(t), func(reg *partners.Registry) error {
		reg.Partners[0].Markets = []string{"gb"}
		return nil
	})
	var fe *partners.FieldError
	if !errors.Is(err, partners.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "markets[0]" {
		t.Fatalf("invalid change: %v", err)
	}
	boom := errors.New("boom")
	if err := r.Update(ctxFor(t), func(*partners.Registry) error { return boom }); err != boom {
		t.Fatalf("fn's error: %v", err)
	}
	if r.Index() != before {
		t.Fatal("a refused change replaced the registry")
	}
	r.Close()
	again := start(t, opts{stateFile: file})
	if _, err := again.Index().Authenticate(key); !errors.Is(err, partners.ErrSuspended) || again.Index().Version() != 2 {
		t.Fatalf("restart from the state file: %v, version %d", err, again.Index().Version())
	}
}

func TestCorruptStateFileFallsBackToSeed(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "state.json")
	os.WriteFile(file, []byte(`{"revision": 4, "doc": {"version": 1, "partners": [{"id": "a b", "status": "active"}]}}`), 0o600)
	seedFile := filepath.Join(dir, "partners.yaml")
	os.WriteFile(seedFile, []byte("version: 7\npartners:\n  - {id: p-1, status: active}\n"), 0o644)
	r := start(t, opts{stateFile: file, file: seedFile})
	if r.Index().Version() != 7 {
		t.Fatalf("version %d: did not fall back to the seed file", r.Index().Version())
	}
}

func TestIndexDoesNotAllocate(t *testing.T) {
	r := start(t, opts{})
	addPartner(t, r, "p-001")
	if n := testing.AllocsPerRun(1000, func() { _ = r.Index() }); n != 0 {
		t.Fatalf("Index allocates %v times per call", n)
	}
}

func FuzzDecodeEntry(f *testing.F) {
	_, key, _ := partners.NewKey(nil, time.Unix(1700000000, 0))
	good, _ := json.Marshal(partners.Registry{Version: 2, Partners: []partners.Partner{{
		ID: "p-001", Status: partners.StatusActive, Keys: []partners.Key{key}, SettlementCurrency: "EUR",
		Markets: []string{"GB"}, PaymentTypes: []string{"CARD_AUTHORIZATION"}, Limits: partners.Limits{RatePerSecond: 10},
		Callbacks: partners.Callbacks{Mode: partners.ModeOrdered, Endpoints: []string{"https://example.test/cb"}},
	}}})
	f.Add(good)
	f.Add([]byte(`{"version":1,"partners":[]}`))
	f.Add([]byte(`{"version":1,"partners":null}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"version":1,"partners":[{"id":"x","status":"suspended","keys":[{"id":"aaaaaaaaaaaaaaaa","hash":"` + strings.Repeat("0", 64) + `","created":"2026-01-01T00:00:00Z"}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeEntry(b)
		if err != nil {
			if !errors.Is(err, partners.ErrInvalid) {
				t.Fatalf("a refusal that is not ErrInvalid: %v", err)
			}
			return
		}
		if _, err := partners.Compile(r.Clone()); err != nil {
			t.Fatalf("an entry that decoded does not compile: %v", err)
		}
		// What decodes, encodes and decodes again to the same registry.
		enc, err := target{}.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := decodeEntry(enc)
		if err != nil {
			t.Fatalf("re-encoded entry refused: %v", err)
		}
		enc2, _ := target{}.Encode(r2)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip differs:\n%s\n%s", enc, enc2)
		}
	})
}
