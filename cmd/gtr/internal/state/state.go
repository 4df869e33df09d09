// Package state holds the GTR's routing state and publishes it, compiled
// into an immutable routing.Table, through an atomic pointer.
//
// Each piece has one owner. The operator's table (a Doc: cells with their
// configured weights and ramps, rules, version) is one immutable value in
// go-memdb, replaced whole by Apply; it is what the admin API's GetTable
// returns. The reference data version each cell reports is a memdb table
// of its own. Health is not here: the health monitor owns it, and the
// compiler reads each cell's share from it (Config.Health) when it builds a
// table. The compiled table, with weights scaled by health and moved along
// ramps, is derived from those three and never written back: it is the
// effective view, which the admin API labels as such.
//
// Writers that are off the payment path (the config sync's Apply, the
// reference data watcher) compile on their own goroutine. A health change
// may be reported on a payment's goroutine (an ejection by Observe), so
// HealthChanged only signals; the compiler in Run rebuilds the table and
// publishes it, as it does when a ramp moves a weight. Readers on the
// payment hot path call Table, which is one atomic load: it never takes a
// lock and never waits on a writer. This package must never be called
// from Route's path with anything but Table, InFlight and HealthChanged,
// which are lock-free.
//
// Lock order: s.mu, then memdb's own writer lock. Nothing else is held
// while compiling (Health.Share takes no lock of ours).
package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-memdb"

	"github.com/cellpay/cellpay/pkg/routing"
)

// Table names in memdb.
const (
	tDoc     = "doc"
	tRefdata = "refdata"
)

// docRow is the operator's table: one value, replaced whole, never
// modified once stored.
type docRow struct {
	Key      string // always docKey
	Doc      Doc
	Revision uint64
}

const docKey = "doc"

func schema() *memdb.DBSchema {
	id := func(idx memdb.Indexer) map[string]*memdb.IndexSchema {
		return map[string]*memdb.IndexSchema{"id": {Name: "id", Unique: true, Indexer: idx}}
	}
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		tDoc:     {Name: tDoc, Indexes: id(&memdb.StringFieldIndex{Field: "Key"})},
		tRefdata: {Name: tRefdata, Indexes: id(&memdb.StringFieldIndex{Field: "CellID"})},
	}}
}

// Health is where the compiler reads the cells' health on this replica.
// *health.Monitor implements it.
type Health interface {
	// Share is the cell's health share, 0 (down) to 100 (fully healthy),
	// and 100 for a cell it does not know. It must not block or take a lock
	// a writer of ours may hold: the compiler calls it for every cell of
	// every table it builds.
	Share(cellID string) int
}

// Config configures a State.
type Config struct {
	// Now is the clock ramps are computed from; default time.Now.
	Now func() time.Time
	// RampTick is how often Run recomputes ramping weights; default 50ms.
	RampTick time.Duration
	// Health gives the cells' health shares; nil: every cell is fully
	// healthy. Tell the state of a change with HealthChanged.
	Health Health
}

// State is the GTR's routing state. Its methods are safe for concurrent use.
type State struct {
	now      func() time.Time
	rampTick time.Duration
	health   Health
	db       *memdb.MemDB
	table    atomic.Pointer[routing.Table]
	stats    stats
	changed  chan struct{} // signalled after every replicated change
	dirty    chan struct{} // HealthChanged's signal to the compiler in Run
	compiles atomic.Uint64 // tables compiled and published, for tests
	// checked is when the table in force was last found to match what
	// the configuration says (published, or Refresh found nothing
	// moved), in Unix nanoseconds: RampStalled's reference.
	checked atomic.Int64

	mu sync.Mutex // serialises writers: memdb write, compile, publish
}

// ErrNoTable is returned by writers that need a Doc before one was applied.
var ErrNoTable = errors.New("state: no table applied yet")

// New returns an empty State. Table returns nil until the first Apply.
func New(cfg Config) (*State, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RampTick <= 0 {
		cfg.RampTick = 50 * time.Millisecond
	}
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	return &State{now: cfg.Now, rampTick: cfg.RampTick, health: cfg.Health, db: db,
		changed: make(chan struct{}, 1), dirty: make(chan struct{}, 1)}, nil
}

// Table returns the routing table in force: one atomic load, never a lock,
// so it never waits on a writer. It is nil only before the first Apply.
func (s *State) Table() *routing.Table { return s.table.Load() }

// Apply replaces the replicated configuration with d, recorded as KV
// revision rev, in one memdb transaction, and publishes the recompiled
// table. An invalid d is refused whole and nothing changes.
func (s *State) Apply(d Doc, rev uint64) error {
	if err := d.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyLocked(d, rev)
}

func (s *State) applyLocked(d Doc, rev uint64) error {
	txn := s.db.Txn(true)
	defer txn.Abort()
	if err := txn.Insert(tDoc, &docRow{Key: docKey, Doc: d.Clone(), Revision: rev}); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	tbl, err := s.compile(txn)
	if err != nil {
		return err
	}
	txn.Commit()
	s.publish(tbl)
	select {
	case s.changed <- struct{}{}:
	default: // a signal is already pending
	}
	return nil
}

func (s *State) publish(tbl *routing.Table) {
	s.checked.Store(s.now().UnixNano())
	s.table.Store(tbl)
	s.compiles.Add(1)
}

// Changed is signalled (coalesced: one pending signal at most) after every
// Apply that changed the replicated configuration, for those that follow
// the set of cells, such as the health monitor. Read the state after
// receiving; the signal carries nothing.
func (s *State) Changed() <-chan struct{} { return s.changed }

// HealthChanged tells the state that a cell's health share changed (it is
// health.Monitor's OnChange; the arguments are not kept, since the
// monitor owns health and the compiler asks it). It only signals the
// compiler in Run, coalescing with any signal pending, and returns at
// once: it never compiles, so it may be called on a payment's goroutine.
func (s *State) HealthChanged(string, int) {
	select {
	case s.dirty <- struct{}{}:
	default: // a recompile is already due
	}
}

// setLocal writes row to the replica-local table unless unchanged says it
// holds that value already, and publishes the recompiled table. Local
// state (reference data versions) is never replicated; it is remembered
// even before a routing table arrives.
func (s *State) setLocal(unchanged func(*memdb.Txn) bool, table string, row any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	txn := s.db.Txn(true)
	defer txn.Abort()
	if unchanged(txn) {
		return
	}
	if err := txn.Insert(table, row); err != nil {
		return // the schema is fixed: Insert cannot fail on a well-formed row
	}
	if _, _, ok := s.docTxn(txn); !ok {
		txn.Commit() // remembered for when a table arrives
		return
	}
	tbl, err := s.compile(txn)
	if err != nil {
		return // the doc validated when applied; local state cannot invalidate it
	}
	txn.Commit()
	s.publish(tbl)
}

// healthShare is the health monitor's share of a cell, 100 without one.
func (s *State) healthShare(cellID string) int {
	if s.health == nil {
		return 100
	}
	return s.health.Share(cellID)
}

// Doc returns the replicated configuration in force and the KV revision it
// came from. ok is false before the first Apply.
func (s *State) Doc() (d Doc, rev uint64, ok bool) { return s.docTxn(s.db.Txn(false)) }

func (s *State) docTxn(txn *memdb.Txn) (Doc, uint64, bool) {
	raw, err := txn.First(tDoc, "id", docKey)
	if err != nil || raw == nil {
		return Doc{}, 0, false
	}
	r := raw.(*docRow)
	return r.Doc.Clone(), r.Revision, true
}

// localSpec is the spec d describes at s.now() as this replica sees it:
// weights scaled by the health monitor's shares, and each cell's reference
// data version as reported to it.
func (s *State) localSpec(txn *memdb.Txn, d Doc) routing.Spec {
	spec := d.Spec(s.now(), s.healthShare)
	for i := range spec.Cells {
		spec.Cells[i].RefdataVersion = refdataVersion(txn, spec.Cells[i].ID)
	}
	return spec
}

// SpecFor is the routing spec this replica would compile if d were
// applied now: d's weights with this replica's health shares and
// reported reference data versions. The admin API's dry runs use it. It
// is an effective view, never a Doc to apply.
func (s *State) SpecFor(d Doc) routing.Spec { return s.localSpec(s.db.Txn(false), d) }

// compile builds the table txn describes at s.now().
func (s *State) compile(txn *memdb.Txn) (*routing.Table, error) {
	d, _, ok := s.docTxn(txn)
	if !ok {
		return nil, ErrNoTable
	}
	tbl, err := routing.Compile(s.localSpec(txn, d))
	if err != nil {
		return nil, fmt.Errorf("state: compile: %w", err)
	}
	return tbl, nil
}

// Refresh republishes the table if what it is compiled from moved since
// the last publish (a ramp's weight, a health share), and reports whether
// it did. It compiles on the caller's goroutine: Run calls it, on a ticker
// and on HealthChanged's signal.
func (s *State) Refresh() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.table.Load()
	if cur == nil {
		return false
	}
	txn := s.db.Txn(false)
	d, _, ok := s.docTxn(txn)
	if !ok {
		return false
	}
	at := s.now()
	if !moved(cur, s.localSpec(txn, d)) {
		s.checked.Store(at.UnixNano())
		return false
	}
	tbl, err := s.compile(txn)
	if err != nil {
		return false
	}
	s.publish(tbl)
	return true
}

// moved reports whether spec's cells differ from tbl's in what health,
// ramps or reference data change.
func moved(tbl *routing.Table, spec routing.Spec) bool {
	for _, c := range spec.Cells {
		if pub, ok := tbl.Cell(c.ID); !ok || pub.Weight != c.Weight || pub.State != c.State || pub.RefdataVersion != c.RefdataVersion {
			return true
		}
	}
	return false
}

// Run is the compiler: until ctx ends it rebuilds and publishes the table
// when HealthChanged signals and when a ramp moves a weight. It is the
// only place a health change is compiled.
func (s *State) Run(ctx context.Context) {
	t := time.NewTicker(s.rampTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.dirty:
		}
		s.Refresh()
	}
}

// Checked is when the table in force was last found to match the
// configuration (see CellConfig.RampStalled); zero before the first table.
func (s *State) Checked() time.Time {
	if n := s.checked.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Now is the state's clock.
func (s *State) Now() time.Time { return s.now() }
