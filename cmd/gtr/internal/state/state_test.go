package state

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cellpay/cellpay/pkg/routing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a fake clock tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func testDoc() Doc {
	return FromSpec(routing.Spec{
		Version: 1,
		Cells: []routing.Cell{
			{ID: "cell-a", Addr: "127.0.0.1:1", Pool: "main", Weight: 100},
			{ID: "cell-b", Addr: "127.0.0.1:2", Pool: "main", Weight: 100},
			{ID: "cell-c", Addr: "127.0.0.1:3", Pool: "main", Weight: 100},
		},
		Rules: []routing.Rule{{Name: "everything", Pool: "main"}},
	})
}

func newState(t testing.TB) (*State, *clock) {
	t.Helper()
	s, clk, _ := newStateH(t)
	return s, clk
}

// newStateH is newState with the fake health monitor it reads.
func newStateH(t testing.TB) (*State, *clock, *fakeHealth) {
	t.Helper()
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	h := &fakeHealth{}
	s, err := New(Config{Now: clk.Now, Health: h})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(testDoc(), 1); err != nil {
		t.Fatal(err)
	}
	return s, clk, h
}

// fakeHealth is a health monitor whose shares tests set by hand.
type fakeHealth struct {
	mu sync.Mutex
	m  map[string]int
}

func (h *fakeHealth) Share(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v, ok := h.m[id]; ok {
		return v
	}
	return 100
}

// set changes a cell's share and, as the compiler in Run would on the
// monitor's signal, refreshes s (when s is not nil).
func (h *fakeHealth) set(s *State, id string, share int) {
	h.mu.Lock()
	if h.m == nil {
		h.m = map[string]int{}
	}
	h.m[id] = share
	h.mu.Unlock()
	if s != nil {
		s.Refresh()
	}
}

func up(ok bool) int {
	if ok {
		return 100
	}
	return 0
}

func home(t testing.TB, tbl *routing.Table, partner string) string {
	t.Helper()
	var buf [8]routing.Choice
	res, err := tbl.Route(&routing.Attrs{PartnerID: partner, Market: "GB", PaymentType: routing.PaymentCardAuthorization}, buf[:0])
	if err != nil {
		t.Fatalf("route %s: %v", partner, err)
	}
	return res.Ranked[0].Cell.ID
}

func TestApplyAndDoc(t *testing.T) {
	s, _ := newState(t)
	d, rev, ok := s.Doc()
	if !ok || rev != 1 || d.Version != 1 || len(d.Cells) != 3 || len(d.Rules) != 1 {
		t.Fatalf("Doc() = %+v, %d, %v", d, rev, ok)
	}
	if got := [3]string{d.Cells[0].ID, d.Cells[1].ID, d.Cells[2].ID}; got != [3]string{"cell-a", "cell-b", "cell-c"} {
		t.Fatalf("cell order %v", got)
	}
	if s.Table().Version() != 1 {
		t.Fatalf("table version %d", s.Table().Version())
	}
}

func TestApplyRefusesBadDocWhole(t *testing.T) {
	s, _ := newState(t)
	before := s.Table()
	bad := testDoc()
	bad.Version = 2
	bad.Cells[1].Weight = 101
	bad.Rules = append(bad.Rules, routing.Rule{Name: "", Pool: "nowhere"})
	err := s.Apply(bad, 2)
	if err == nil {
		t.Fatal("Apply accepted a bad doc")
	}
	for _, want := range []string{"cells[1].weight: cell \"cell-b\": weight 101 outside 0..100"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if s.Table() != before {
		t.Fatal("a refused doc changed the published table")
	}
	if _, rev, _ := s.Doc(); rev != 1 {
		t.Fatalf("revision %d after a refused doc", rev)
	}
}

func TestHealth(t *testing.T) {
	s, _, h := newStateH(t)
	before := s.Table()
	h.set(s, "cell-b", 100) // no change: no republish
	if s.Table() != before {
		t.Fatal("an unchanged health republished")
	}
	h.set(s, "cell-b", 0)
	if c, _ := s.Table().Cell("cell-b"); c.State != routing.CellDown {
		t.Fatalf("cell-b state %v, want down", c.State)
	}
	for i := range 1000 {
		if h := home(t, s.Table(), "p-"+strconv.Itoa(i)); h == "cell-b" {
			t.Fatalf("key routed to a down cell")
		}
	}
	// Health is the monitor's: a new replicated doc does not reset it.
	d := testDoc()
	d.Version = 2
	if err := s.Apply(d, 2); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Table().Cell("cell-b"); c.State != routing.CellDown {
		t.Fatal("Apply forgot the health monitor")
	}
	h.set(s, "cell-b", 100)
	if c, _ := s.Table().Cell("cell-b"); c.State != routing.CellUp {
		t.Fatal("cell-b did not come back up")
	}
}

func TestHealthBeforeTable(t *testing.T) {
	h := &fakeHealth{}
	s, err := New(Config{Health: h})
	if err != nil {
		t.Fatal(err)
	}
	h.set(nil, "cell-a", 0)
	s.HealthChanged("cell-a", 0)
	if s.Refresh(); s.Table() != nil {
		t.Fatal("a table without a doc")
	}
	if err := s.Apply(testDoc(), 1); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Table().Cell("cell-a"); c.State != routing.CellDown {
		t.Fatal("health recorded before the first table was lost")
	}
}

func TestDrainMovesTheSameKeys(t *testing.T) {
	s, clk := newState(t)
	const n = 20000
	homes := make([]string, n)
	onB := 0
	for i := range homes {
		homes[i] = home(t, s.Table(), "p-"+strconv.Itoa(i))
		if homes[i] == "cell-b" {
			onB++
		}
	}
	moved := func() map[int]bool {
		m := map[int]bool{}
		for i := range homes {
			if h := home(t, s.Table(), "p-"+strconv.Itoa(i)); h != homes[i] {
				if homes[i] != "cell-b" {
					t.Fatalf("key %d moved from %s, which was not drained", i, homes[i])
				}
				m[i] = true
			}
		}
		return m
	}
	drain := func() map[int]bool {
		d, rev, _ := s.Doc()
		if err := d.Drain("cell-b", 30, clk.Now(), 0); err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(d, rev+1); err != nil {
			t.Fatal(err)
		}
		return moved()
	}
	first := drain()
	share := float64(len(first)) / float64(onB)
	if share < 0.28 || share > 0.32 {
		t.Fatalf("drained share %.3f, want 0.30±0.02", share)
	}
	d, rev, _ := s.Doc()
	if err := d.Restore("cell-b", clk.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(d, rev+1); err != nil {
		t.Fatal(err)
	}
	if m := moved(); len(m) != 0 {
		t.Fatalf("%d keys still moved after restore", len(m))
	}
	second := drain()
	if len(second) != len(first) {
		t.Fatalf("second drain moved %d keys, first %d", len(second), len(first))
	}
	for k := range first {
		if !second[k] {
			t.Fatalf("key %d moved the first time and not the second", k)
		}
	}
}

func TestRamp(t *testing.T) {
	s, clk := newState(t)
	d, rev, _ := s.Doc()
	if err := d.Drain("cell-b", 100, clk.Now(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(d, rev+1); err != nil {
		t.Fatal(err)
	}
	weight := func() int { c, _ := s.Table().Cell("cell-b"); return c.Weight }
	if w := weight(); w != 100 {
		t.Fatalf("weight at ramp start %d", w)
	}
	if s.Refresh() {
		t.Fatal("Refresh republished with the clock standing still")
	}
	for _, step := range []struct {
		after time.Duration
		want  int
	}{{2500 * time.Millisecond, 75}, {2500 * time.Millisecond, 50}, {5 * time.Second, 0}, {time.Hour, 0}} {
		clk.Add(step.after)
		s.Refresh()
		if w := weight(); w != step.want {
			t.Fatalf("weight %d, want %d", w, step.want)
		}
	}
	// Restore ramps back up from where the weight is.
	d, rev, _ = s.Doc()
	if err := d.Restore("cell-b", clk.Now(), 4*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(d, rev+1); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Second)
	s.Refresh()
	if w := weight(); w != 25 {
		t.Fatalf("restore ramp weight %d, want 25", w)
	}
}

func TestWeightAtIsDeterministic(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := CellConfig{Weight: 0, Ramp: &Ramp{From: 100, Start: start, End: start.Add(time.Minute)}}
	prev := 101
	for ms := -1000; ms <= 61000; ms += 7 {
		w := c.WeightAt(start.Add(time.Duration(ms) * time.Millisecond))
		if w > prev || w < 0 || w > 100 {
			t.Fatalf("weight %d at %dms after %d: not monotone within range", w, ms, prev)
		}
		prev = w
	}
	if prev != 0 {
		t.Fatalf("ramp ended at %d", prev)
	}
}

func TestDocOpsRejectBadInput(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		op    func(d *Doc) error
		field string
	}{
		{"weight high", func(d *Doc) error { return d.SetWeight("cell-a", 101, now, 0) }, "weight"},
		{"weight negative", func(d *Doc) error { return d.SetWeight("cell-a", -1, now, 0) }, "weight"},
		{"negative over", func(d *Doc) error { return d.SetWeight("cell-a", 50, now, -time.Second) }, "over"},
		{"too long", func(d *Doc) error { return d.Restore("cell-a", now, 48*time.Hour) }, "over"},
		{"percent", func(d *Doc) error { return d.Drain("cell-a", 130, now, 0) }, "percent"},
		{"drain negative over", func(d *Doc) error { return d.Drain("cell-a", 30, now, -time.Minute) }, "over"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := testDoc()
			err := tc.op(&d)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("error %v, want a FieldError on %q", err, tc.field)
			}
			if d.Version != 1 {
				t.Fatal("a refused operation changed the version")
			}
		})
	}
	d := testDoc()
	for _, err := range []error{d.SetWeight("cell-z", 5, now, 0), d.Drain("cell-z", 5, now, 0), d.Restore("cell-z", now, 0)} {
		if !errors.Is(err, ErrUnknownCell) {
			t.Fatalf("unknown cell: %v", err)
		}
	}
}

// TestRouteNeverWaitsOnWriter holds the writer lock and a memdb write
// transaction and routes meanwhile: Table is an atomic load, so routing
// must finish while the writer is stuck.
func TestRouteNeverWaitsOnWriter(t *testing.T) {
	s, _, h := newStateH(t)
	s.mu.Lock()
	txn := s.db.Txn(true)
	release := func() { txn.Abort(); s.mu.Unlock() }
	defer func() {
		if release != nil {
			release()
		}
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 10000 {
			home(t, s.Table(), "p-"+strconv.Itoa(i))
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("routing waited on a writer")
	}
	// A writer blocked meanwhile is fine; it goes once the lock is free.
	wrote := make(chan struct{})
	go func() { h.set(s, "cell-a", 0); close(wrote) }()
	release()
	release = nil
	select {
	case <-wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("writer never got the lock")
	}
}

func TestConcurrentWritersAndReaders(t *testing.T) {
	s, clk, h := newStateH(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				tbl := s.Table()
				home(t, tbl, "p-1")
			}
		})
	}
	for i := range 200 {
		h.set(s, "cell-"+string(rune('a'+i%3)), up(i%2 == 0))
		d, rev, _ := s.Doc()
		if err := d.SetWeight("cell-c", i%101, clk.Now(), 0); err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(d, rev+1); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

func TestStats(t *testing.T) {
	s, _ := newState(t)
	if st := s.Stats("cell-a"); st.InFlight != 0 {
		t.Fatalf("fresh stats %+v", st)
	}
	s.InFlight("cell-a", 1)
	s.InFlight("cell-a", 1)
	s.InFlight("cell-a", -1)
	if st := s.Stats("cell-a"); st.InFlight != 1 {
		t.Fatalf("stats %+v", st)
	}
	if allocs := testing.AllocsPerRun(100, func() { s.InFlight("cell-a", 1); s.InFlight("cell-a", -1) }); allocs != 0 {
		t.Fatalf("InFlight allocates %.1f times", allocs)
	}
}

func TestRouteThroughStateAllocs(t *testing.T) {
	s, _ := newState(t)
	a := routing.Attrs{PartnerID: "p-1", Market: "GB", PaymentType: routing.PaymentCardAuthorization}
	dst := make([]routing.Choice, 0, 8)
	if allocs := testing.AllocsPerRun(1000, func() { _, _ = s.Table().Route(&a, dst) }); allocs != 0 {
		t.Fatalf("Route through State.Table allocates %.1f times", allocs)
	}
}

func TestHealthShareScalesWeight(t *testing.T) {
	s, clk, h := newStateH(t)
	d, rev, _ := s.Doc()
	if err := d.Drain("cell-b", 20, clk.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(d, rev+1); err != nil {
		t.Fatal(err)
	}
	h.set(s, "cell-b", 50)
	if c, _ := s.Table().Cell("cell-b"); c.Weight != 40 || c.State != routing.CellUp {
		t.Fatalf("cell-b %+v, want weight 80*50%% = 40, up", c)
	}
	// The operator's table keeps the configured weight: health scales
	// only the compiled, effective one.
	if d, _, _ := s.Doc(); d.Cell("cell-b").Weight != 80 {
		t.Fatalf("doc cell-b %+v, want configured weight 80", *d.Cell("cell-b"))
	}
	h.set(s, "cell-b", 0)
	if c, _ := s.Table().Cell("cell-b"); c.State != routing.CellDown {
		t.Fatalf("cell-b %+v, want down", c)
	}
}

func TestChangedSignals(t *testing.T) {
	s, _, h := newStateH(t)
	select {
	case <-s.Changed():
	default:
		t.Fatal("no signal after the first Apply")
	}
	h.set(s, "cell-a", 0) // health is not a replicated change
	s.HealthChanged("cell-a", 0)
	select {
	case <-s.Changed():
		t.Fatal("signal after a health change")
	default:
	}
}

// TestWithTableKeepsConfiguredWeights: re-applying the operator's table
// as it stands (version raised) leaves drains and ramps alone; a changed
// weight becomes the cell's table weight.
func TestWithTableKeepsConfiguredWeights(t *testing.T) {
	s, clk := newState(t)
	d, _, _ := s.Doc()
	if err := d.Drain("cell-b", 30, clk.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if err := d.Restore("cell-b", clk.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := d.Drain("cell-c", 40, clk.Now(), 0); err != nil {
		t.Fatal(err)
	}
	spec := d.Spec(clk.Now(), nil)
	spec.Version = d.Version + 1
	for i, c := range d.Cells { // as GetTable shows it: configured weights
		spec.Cells[i].Weight = c.Weight
	}
	next := d.WithTable(spec)
	want := d.Clone()
	want.Version = spec.Version
	if !reflect.DeepEqual(next, want) {
		t.Fatalf("re-applied %+v\nwant %+v", next, want)
	}
	spec.Cells[2].Weight = 50
	n := d.WithTable(spec)
	if c := n.Cell("cell-c"); c.TableWeight != 50 || c.Weight != 50 || c.Ramp != nil {
		t.Fatalf("changed weight: %+v", *c)
	}
}

// TestSitesFlowThrough: a cell's site goes from the spec into the Doc,
// through its JSON (the KV bucket's and the state file's form) and a
// table apply, into the compiled table, and a Doc without sites reads as
// it did before they existed.
func TestSitesFlowThrough(t *testing.T) {
	spec := testDoc().Spec(time.Time{}, nil)
	spec.Cells[0].Site, spec.Cells[1].Site = "site-a", "site-b"
	d := FromSpec(spec)
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back Doc
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, d) {
		t.Fatalf("JSON round trip %+v, want %+v", back, d)
	}
	if plain, _ := json.Marshal(testDoc()); strings.Contains(string(plain), `"site"`) {
		t.Fatalf("a Doc without sites names one: %s", plain)
	}
	s, _ := newState(t)
	cur, _, _ := s.Doc()
	spec.Version = cur.Version + 1
	if err := s.Apply(cur.WithTable(spec), 2); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"cell-a": "site-a", "cell-b": "site-b", "cell-c": ""} {
		if c, ok := s.Table().Cell(id); !ok || c.Site != want {
			t.Errorf("compiled %s: site %q, want %q", id, c.Site, want)
		}
	}
	bad := back.Clone()
	bad.Cells[2].Site = "Site C"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), `cell "cell-c": site "Site C"`) {
		t.Errorf("Validate of a bad site: %v", err)
	}
}
