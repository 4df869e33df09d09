package state

import (
	"maps"
	"sync"
	"sync/atomic"
)

// counters are one cell's lock-free traffic counters. Outcomes are not
// here: the health monitor keeps the one outcome window per cell, the one
// that ejects it.
type counters struct {
	inFlight atomic.Int64
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

// CellStats are a cell's traffic counters on this replica.
type CellStats struct {
	InFlight int64
}

// Stats returns the cell's counters.
func (s *State) Stats(cellID string) CellStats {
	return CellStats{InFlight: s.stats.get(cellID).inFlight.Load()}
}
