package payments

import (
	"sync"
	"sync/atomic"

	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/routing"
)

// movedCache remembers, for transactions that were re-routed, the cell that
// completed them, so that a replay goes there first instead of starting
// over on the cell that failed. Transactions are keyed by (partner,
// transaction ID). It is bounded (oldest entries go first) and per replica:
// a replica that does not know still gets the same answer, because the
// first cell answers Reroutable for a transaction it abandoned and the
// issuer suppresses duplicates by partner and ID.
type movedCache struct {
	n     atomic.Int64 // entries; lets the common case skip the lock
	mu    sync.Mutex
	cells map[idempotency.Key]moved
	order []idempotency.Key // a ring; the zero Key marks a free slot
	next  int
}

// moved is where a re-routed transaction completed, and its payload.
type moved struct {
	cellID string
	fp     idempotency.Fingerprint
}

func newMovedCache(size int) *movedCache {
	return &movedCache{cells: make(map[idempotency.Key]moved), order: make([]idempotency.Key, size)}
}

func (m *movedCache) remember(k idempotency.Key, cellID string, fp idempotency.Fingerprint) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.cells[k]; !ok {
		if old := m.order[m.next]; old != (idempotency.Key{}) {
			delete(m.cells, old)
		}
		m.order[m.next] = k
		m.next = (m.next + 1) % len(m.order)
	}
	m.cells[k] = moved{cellID, fp}
	m.n.Store(int64(len(m.cells)))
}

// promote returns ranked with the remembered cell of transaction k moved to
// the front, when it is in the ranking. A remembered k with another payload
// is a conflict: the cell that holds it would say so, but the cell this
// replay would otherwise start on may never have seen it. Another partner's
// transaction with k's ID is not k, and is neither promoted nor a conflict.
func (m *movedCache) promote(k idempotency.Key, fp idempotency.Fingerprint, ranked []routing.Choice) ([]routing.Choice, error) {
	if m.n.Load() == 0 {
		return ranked, nil
	}
	m.mu.Lock()
	mv, ok := m.cells[k]
	m.mu.Unlock()
	if !ok {
		return ranked, nil
	}
	if err := idempotency.Check(mv.fp, fp); err != nil {
		return nil, err
	}
	cellID := mv.cellID
	if len(ranked) == 0 || ranked[0].Cell.ID == cellID {
		return ranked, nil
	}
	for i := 1; i < len(ranked); i++ {
		if ranked[i].Cell.ID == cellID {
			c := ranked[i]
			copy(ranked[1:i+1], ranked[:i])
			ranked[0] = c
			break
		}
	}
	return ranked, nil
}
