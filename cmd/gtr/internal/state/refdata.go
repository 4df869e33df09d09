package state

import (
	"time"

	"github.com/hashicorp/go-memdb"
)

type refdataRow struct {
	CellID  string
	Version uint64
	Since   time.Time // when this replica first saw the cell at Version
}

// SetRefdataVersion records the reference data version cell cellID reports
// serving and, when it changed, publishes the recompiled table, so rules
// with a MinRefdataVersion skip the cell while it is behind. It is for the
// reference data watcher (cmd/gtr/internal/refwatch): it compiles on the
// caller's goroutine, off the hot path, and does nothing when the version
// did not change, so calling it for every report is cheap.
//
// The version is whatever the cell last said, also when it goes down (a
// cell restarted on a bootstrap file reports 0, and does serve older data).
// A cell that stops reporting keeps its last version: silence is not
// evidence of staleness, and NATS being away must not take every cell out
// of gated rules. A cell that never reported has version 0 (unknown), which
// every gated rule skips. Like health, versions are local to the replica
// and never replicated.
//
// Only cells in the table in force are recorded (ok false for any other):
// a report names its cell by its subject, and the GTR keeps no state for
// names it does not route to. A cell added later reports again within a
// second.
func (s *State) SetRefdataVersion(cellID string, v uint64) (ok bool) {
	if t := s.Table(); t == nil {
		return false
	} else if _, ok := t.Cell(cellID); !ok {
		return false
	}
	s.setLocal(func(txn *memdb.Txn) bool { return refdataVersion(txn, cellID) == v },
		tRefdata, &refdataRow{CellID: cellID, Version: v, Since: s.now()})
	return true
}

// RefdataVersion is the reference data version cell cellID last reported
// to this replica, and since when it has reported it; 0 and the zero time
// when it never reported.
func (s *State) RefdataVersion(cellID string) (v uint64, since time.Time) {
	raw, err := s.db.Txn(false).First(tRefdata, "id", cellID)
	if err != nil || raw == nil {
		return 0, time.Time{}
	}
	r := raw.(*refdataRow)
	return r.Version, r.Since
}

func refdataVersion(txn *memdb.Txn, cellID string) uint64 {
	raw, err := txn.First(tRefdata, "id", cellID)
	if err != nil || raw == nil {
		return 0
	}
	return raw.(*refdataRow).Version
}
