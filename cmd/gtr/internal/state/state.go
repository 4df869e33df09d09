// Package state holds the GTR's routing state in go-memdb (cells, rules,
// weights, health, the reference data version each cell reports) and
// publishes it, compiled into an immutable
// routing.Table, through an atomic pointer.
//
// Writers (the config sync applying a replicated Doc, the health checker,
// the reference data watcher, the ramp ticker) take s.mu, write memdb in one transaction, compile and
// publish. Readers on the payment hot path call Table, which is one atomic
// load: it never takes a lock and never waits on a writer. This package
// must never be called from Route's path with anything but Table, InFlight
// and Outcome, which are lock-free.
//
// Lock order: s.mu, then memdb's own writer lock. Nothing else is held
// while compiling.
package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-memdb"

	"github.com/cellpay/cellpay/pkg/routing"
)

// Table names in memdb.
const (
	tCells   = "cells"
	tRules   = "rules"
	tWeights = "weights"
	tHealth  = "health"
	tRefdata = "refdata"
	tMeta    = "meta"
)

type cellRow struct {
	ID    string
	Order int
	Addr  string
	Pool  string
}

type ruleRow struct {
	Order int
	Rule  routing.Rule
}

type weightRow struct {
	CellID      string
	TableWeight int
	Weight      int
	Ramp        *Ramp // immutable once stored
}

type healthRow struct {
	CellID string
	Share  int // 0 (down) .. 100 (fully healthy)
	Since  time.Time
}

type metaRow struct {
	Key      string // always metaKey
	Version  uint64
	Revision uint64
}

const metaKey = "doc"

func schema() *memdb.DBSchema {
	id := func(idx memdb.Indexer) map[string]*memdb.IndexSchema {
		return map[string]*memdb.IndexSchema{"id": {Name: "id", Unique: true, Indexer: idx}}
	}
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		tCells:   {Name: tCells, Indexes: id(&memdb.StringFieldIndex{Field: "ID"})},
		tRules:   {Name: tRules, Indexes: id(&memdb.IntFieldIndex{Field: "Order"})},
		tWeights: {Name: tWeights, Indexes: id(&memdb.StringFieldIndex{Field: "CellID"})},
		tHealth:  {Name: tHealth, Indexes: id(&memdb.StringFieldIndex{Field: "CellID"})},
		tRefdata: {Name: tRefdata, Indexes: id(&memdb.StringFieldIndex{Field: "CellID"})},
		tMeta:    {Name: tMeta, Indexes: id(&memdb.StringFieldIndex{Field: "Key"})},
	}}
}

// Config configures a State.
type Config struct {
	// Now is the clock ramps are computed from; default time.Now.
	Now func() time.Time
	// RampTick is how often Run recomputes ramping weights; default 50ms.
	RampTick time.Duration
}

// State is the GTR's routing state. Its methods are safe for concurrent use.
type State struct {
	now      func() time.Time
	rampTick time.Duration
	db       *memdb.MemDB
	table    atomic.Pointer[routing.Table]
	stats    stats
	changed  chan struct{} // signalled after every replicated change

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
	return &State{now: cfg.Now, rampTick: cfg.RampTick, db: db, changed: make(chan struct{}, 1)}, nil
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
	d = d.Clone()
	txn := s.db.Txn(true)
	defer txn.Abort()
	for _, t := range []string{tCells, tRules, tWeights} {
		if _, err := txn.DeleteAll(t, "id"); err != nil {
			return fmt.Errorf("state: %w", err)
		}
	}
	for i, c := range d.Cells {
		if err := txn.Insert(tCells, &cellRow{ID: c.ID, Order: i, Addr: c.Addr, Pool: c.Pool}); err != nil {
			return fmt.Errorf("state: %w", err)
		}
		if err := txn.Insert(tWeights, &weightRow{CellID: c.ID, TableWeight: c.TableWeight, Weight: c.Weight, Ramp: c.Ramp}); err != nil {
			return fmt.Errorf("state: %w", err)
		}
	}
	for i, r := range d.Rules {
		if err := txn.Insert(tRules, &ruleRow{Order: i, Rule: r}); err != nil {
			return fmt.Errorf("state: %w", err)
		}
	}
	if err := txn.Insert(tMeta, &metaRow{Key: metaKey, Version: d.Version, Revision: rev}); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	tbl, err := s.compile(txn)
	if err != nil {
		return err
	}
	txn.Commit()
	s.table.Store(tbl)
	select {
	case s.changed <- struct{}{}:
	default: // a signal is already pending
	}
	return nil
}

// Changed is signalled (coalesced: one pending signal at most) after every
// Apply that changed the replicated configuration, for those that follow
// the set of cells, such as the health monitor. Read the state after
// receiving; the signal carries nothing.
func (s *State) Changed() <-chan struct{} { return s.changed }

// SetHealth records this replica's view of a cell's health and publishes a
// table in which an unhealthy cell is routing.CellDown. It is
// SetHealthShare(cellID, 100) or SetHealthShare(cellID, 0).
func (s *State) SetHealth(cellID string, up bool) {
	share := 0
	if up {
		share = 100
	}
	s.SetHealthShare(cellID, share)
}

// SetHealthShare records this replica's health share of a cell, 0..100
// (health.Monitor's OnChange), and publishes the recompiled table: at 0
// the cell is routing.CellDown, below 100 its weight is scaled by the
// share. It is for the health checker: it compiles on the caller's
// goroutine (off the hot path) and does nothing when the share did not
// change. Health is local to the replica and never replicated. Cells with
// no health record are fully healthy (100).
func (s *State) SetHealthShare(cellID string, share int) {
	share = min(max(share, 0), 100)
	s.setLocal(func(txn *memdb.Txn) bool { return healthShare(txn, cellID) == share },
		tHealth, &healthRow{CellID: cellID, Share: share, Since: s.now()})
}

// setLocal writes row to the replica-local table unless unchanged says it
// holds that value already, and publishes the recompiled table. Local
// state (health, reference data versions) is never replicated; it is
// remembered even before a routing table arrives.
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
	s.table.Store(tbl)
}

func healthShare(txn *memdb.Txn, cellID string) int {
	raw, err := txn.First(tHealth, "id", cellID)
	if err != nil || raw == nil {
		return 100
	}
	return raw.(*healthRow).Share
}

// Healthy reports this replica's view of a cell's health: share above 0.
func (s *State) Healthy(cellID string) bool { return s.HealthShare(cellID) > 0 }

// HealthShare is this replica's health share of a cell, 0..100.
func (s *State) HealthShare(cellID string) int { return healthShare(s.db.Txn(false), cellID) }

// Doc returns the replicated configuration in force and the KV revision it
// came from. ok is false before the first Apply.
func (s *State) Doc() (d Doc, rev uint64, ok bool) { return s.docTxn(s.db.Txn(false)) }

func (s *State) docTxn(txn *memdb.Txn) (Doc, uint64, bool) {
	raw, err := txn.First(tMeta, "id", metaKey)
	if err != nil || raw == nil {
		return Doc{}, 0, false
	}
	m := raw.(*metaRow)
	d := Doc{Version: m.Version}
	it, _ := txn.Get(tCells, "id")
	var cells []*cellRow
	for o := it.Next(); o != nil; o = it.Next() {
		cells = append(cells, o.(*cellRow))
	}
	slices.SortFunc(cells, func(a, b *cellRow) int { return a.Order - b.Order })
	for _, c := range cells {
		cc := CellConfig{ID: c.ID, Addr: c.Addr, Pool: c.Pool}
		if raw, err := txn.First(tWeights, "id", c.ID); err == nil && raw != nil {
			w := raw.(*weightRow)
			cc.TableWeight, cc.Weight, cc.Ramp = w.TableWeight, w.Weight, w.Ramp
		}
		d.Cells = append(d.Cells, cc)
	}
	it, _ = txn.Get(tRules, "id")
	var rules []*ruleRow
	for o := it.Next(); o != nil; o = it.Next() {
		rules = append(rules, o.(*ruleRow))
	}
	slices.SortFunc(rules, func(a, b *ruleRow) int { return a.Order - b.Order })
	for _, r := range rules {
		d.Rules = append(d.Rules, r.Rule)
	}
	return d.Clone(), m.Revision, true
}

// localSpec is the spec d describes at s.now() as this replica sees it:
// weights scaled by its health shares, and each cell's reference data
// version as reported to it.
func (s *State) localSpec(txn *memdb.Txn, d Doc) routing.Spec {
	spec := d.Spec(s.now(), func(id string) int { return healthShare(txn, id) })
	for i := range spec.Cells {
		spec.Cells[i].RefdataVersion = refdataVersion(txn, spec.Cells[i].ID)
	}
	return spec
}

// SpecFor is the routing spec this replica would compile if d were
// applied now: d's weights with this replica's health shares and
// reported reference data versions. The admin API's dry runs use it.
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

// Refresh republishes the table if a ramp has moved any weight since the
// last publish, and reports whether it did. Run calls it on a ticker.
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
	spec := s.localSpec(txn, d)
	changed := false
	for _, c := range spec.Cells {
		if pub, ok := cur.Cell(c.ID); !ok || pub.Weight != c.Weight {
			changed = true
			break
		}
	}
	if !changed {
		return false
	}
	tbl, err := s.compile(txn)
	if err != nil {
		return false
	}
	s.table.Store(tbl)
	return true
}

// Run keeps ramping weights moving until ctx ends.
func (s *State) Run(ctx context.Context) {
	t := time.NewTicker(s.rampTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Refresh()
		}
	}
}

// Now is the state's clock.
func (s *State) Now() time.Time { return s.now() }
