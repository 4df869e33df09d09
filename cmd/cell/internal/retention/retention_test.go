package retention

import (
	"slices"
	"testing"
	"time"

	"github.com/cellpay/cellpay/cmd/cell/internal/store"
)

func month(y int, m time.Month) time.Time { return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC) }

func part(table string, from, to time.Time) store.Partition {
	name := table + "_legacy"
	if !from.IsZero() {
		name = table + "_" + from.Format("2006_01")
	}
	return store.Partition{Table: table, Name: name, From: from, To: to}
}

// both is the same months of both tables.
func both(ranges ...[2]time.Time) []store.Partition {
	var out []store.Partition
	for _, table := range store.PartitionedTables {
		for _, r := range ranges {
			out = append(out, part(table, r[0], r[1]))
		}
	}
	return out
}

func TestDecideCreatesQuarters(t *testing.T) {
	// Migration 011 in December 2026: the first partitions end with it,
	// then January to March 2027.
	parts := both([2]time.Time{{}, month(2027, 1)}, [2]time.Time{month(2027, 1), month(2027, 4)})
	now := time.Date(2026, 12, 31, 23, 59, 0, 0, time.UTC)
	if p := Decide(parts, now, DefaultKeep, 2); len(p.Create) != 0 || len(p.Drop) != 0 {
		t.Fatalf("plan %+v, want nothing", p)
	}
	// Two months ahead of February reach April: the next quarter.
	p := Decide(parts, month(2027, 2).Add(time.Hour), DefaultKeep, 2)
	want := []Span{{"transactions", month(2027, 4), 3}, {"outbox", month(2027, 4), 3}}
	if !slices.Equal(p.Create, want) {
		t.Fatalf("create %v, want %v", p.Create, want)
	}
	// Migrated in January: the rest of the quarter, February and March.
	parts = both([2]time.Time{{}, month(2027, 2)})
	p = Decide(parts, month(2027, 1).Add(time.Hour), DefaultKeep, 2)
	want = []Span{{"transactions", month(2027, 2), 2}, {"outbox", month(2027, 2), 2}}
	if !slices.Equal(p.Create, want) {
		t.Fatalf("create %v, want %v", p.Create, want)
	}
	// A cell whose partitions ran out (its leader was down for months):
	// from the current month, not the gap behind, cut short before a
	// partition that exists, in any time zone.
	parts = append(both([2]time.Time{{}, month(2027, 1)}), part("outbox", month(2027, 7), month(2027, 10)))
	p = Decide(parts, time.Date(2027, 5, 10, 0, 0, 0, 0, time.FixedZone("x", 5*3600)), DefaultKeep, 3)
	want = []Span{{"transactions", month(2027, 5), 2}, {"transactions", month(2027, 7), 3},
		{"outbox", month(2027, 5), 2}}
	if !slices.Equal(p.Create, want) {
		t.Fatalf("create %v, want %v", p.Create, want)
	}
}

func TestDecideDropsEndedMonths(t *testing.T) {
	parts := both([2]time.Time{{}, month(2026, 1)}, [2]time.Time{month(2026, 1), month(2026, 2)},
		[2]time.Time{month(2026, 2), month(2026, 3)}, [2]time.Time{month(2026, 3), month(2026, 4)})
	now := month(2026, 3).Add(30 * 24 * time.Hour) // 2026-03-31
	p := Decide(parts, now, 30*24*time.Hour, 0)    // retained since 2026-03-01
	var names []string
	for _, d := range p.Drop {
		names = append(names, d.Name)
	}
	want := []string{"transactions_legacy", "transactions_2026_01", "transactions_2026_02", "outbox_legacy", "outbox_2026_01", "outbox_2026_02"}
	if !slices.Equal(names, want) {
		t.Fatalf("drop %v, want %v", names, want)
	}
}

func TestHorizon(t *testing.T) {
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	parts := both([2]time.Time{{}, month(2027, 1)}, [2]time.Time{month(2027, 1), month(2027, 2)})
	if h, want := Horizon(parts, now), month(2027, 2).Sub(now); h != want {
		t.Fatalf("horizon %s, want %s", h, want)
	}
	// A gap ends it; a table short of the other sets it.
	parts = append(both([2]time.Time{{}, month(2027, 1)}), part("transactions", month(2027, 2), month(2027, 3)), part("outbox", month(2027, 1), month(2027, 2)))
	if h, want := Horizon(parts, now), month(2027, 1).Sub(now); h != want {
		t.Fatalf("horizon with a gap %s, want %s", h, want)
	}
	if h := Horizon(nil, now); h != 0 {
		t.Fatalf("horizon of nothing %s, want 0", h)
	}
}

func TestNewRefusesAShortRetention(t *testing.T) {
	for _, cfg := range []Config{{Keep: 7 * 24 * time.Hour}, {Ahead: MaxAhead + 1}, {}} {
		if cfg.Keep != 0 || cfg.Ahead != 0 {
			cfg.Store = &store.Store{}
		}
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}
