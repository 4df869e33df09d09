package state

import (
	"maps"
	"sync"
	"sync/atomic"
)

// window is how many recent attempts per cell the success rate covers.
const window = 100

// Outcome slot values in a cell's window.
const (
	slotEmpty uint32 = iota
	slotOK
	slotFailed
)

// counters are one cell's lock-free traffic counters.
type counters struct {
	inFlight atomic.Int64
	next     atomic.Uint64
	recent   [window]atomic.Uint32
}

// stats maps cell IDs to counters. The map is copy-on-write: readers load
// it atomically, and only the first call for a new cell takes mu.
type stats struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]*counters]
}

func (st *stats) get(id string) *counters {
	if m := st.m.Load(); m != nil {
		if c := (*m)[id]; c != nil {
			return c
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	old := st.m.Load()
	if old != nil {
		if c := (*old)[id]; c != nil {
			return c
		}
	}
	next := map[string]*counters{}
	if old != nil {
		next = maps.Clone(*old)
	}
	c := &counters{}
	next[id] = c
	st.m.Store(&next)
	return c
}

// InFlight adds delta (+1 when an attempt on the cell starts, -1 when it
// ends) to the cell's in-flight count. It is lock-free and allocation-free
// once the cell has been seen, so the payments path may call it. Each +1
// must be matched by exactly one -1.
//
// The GTR wires it through a counting wrapper around the cell clients
// (see cmd/gtr/internal/gtr); the admin API's ListCells reports it.
func (s *State) InFlight(cellID string, delta int) { s.stats.get(cellID).inFlight.Add(int64(delta)) }

// Outcome records how an attempt on the cell ended: ok is false when the
// cell failed it (an error or a re-routable answer), true when the cell
// answered (approved or declined alike). The success rate ListCells
// reports covers the last 100 outcomes. Lock-free, like InFlight.
func (s *State) Outcome(cellID string, ok bool) {
	c := s.stats.get(cellID)
	v := slotFailed
	if ok {
		v = slotOK
	}
	c.recent[c.next.Add(1)%window].Store(v)
}

// CellStats are a cell's traffic counters on this replica.
type CellStats struct {
	InFlight int64
	// Recent is how many outcomes SuccessRate covers (at most 100).
	Recent int
	// SuccessRate is the share of Recent that were ok; -1 when Recent is 0.
	SuccessRate float64
}

// Stats returns the cell's counters.
func (s *State) Stats(cellID string) CellStats {
	c := s.stats.get(cellID)
	st := CellStats{InFlight: c.inFlight.Load(), SuccessRate: -1}
	ok := 0
	for i := range c.recent {
		switch c.recent[i].Load() {
		case slotOK:
			ok++
			st.Recent++
		case slotFailed:
			st.Recent++
		}
	}
	if st.Recent > 0 {
		st.SuccessRate = float64(ok) / float64(st.Recent)
	}
	return st
}
