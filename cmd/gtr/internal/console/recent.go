package console

import (
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/status"
)

// recentSize is how many events Recent keeps: the last few minutes of a
// bad incident, not a history (the logs and metrics are that).
const recentSize = 256

// Event is one re-route or health change of a cell, as this replica saw it.
type Event struct {
	Time time.Time `json:"time"`
	// Kind is "reroute" (an attempt given up before its point of no
	// return and sent to the next cell), "down" (the cell's health share
	// fell to 0: ejected, or failing its checks) or "up" (back from 0).
	Kind   string `json:"kind"`
	Cell   string `json:"cell"`
	Detail string `json:"detail,omitempty"`
	// Replica is the GTR replica that saw it, in a view merged across
	// replicas (MergeEvents).
	Replica string `json:"replica,omitempty"`
}

// MergeEvents merges replicas' lists (each newest first, as List returns
// them) into one, newest first, cut to limit.
func MergeEvents(limit int, lists ...[]Event) []Event {
	var out []Event
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.SortStableFunc(out, func(a, b Event) int { return b.Time.Compare(a.Time) })
	return out[:min(len(out), max(limit, 0))]
}

type entry struct {
	at      time.Time
	kind    string
	cell    string
	share   int
	err     error // a re-route's cause, turned into text when read
	healthy bool
}

// Recent is a bounded ring of this replica's recent re-routes and cell
// ejections, for the console. Its writers are the payment path's
// re-routes and the health monitor's OnChange, so a write takes one short
// lock and allocates nothing: the error is kept as it is and only made text
// when the ring is read. The zero value is not usable; use NewRecent.
type Recent struct {
	now func() time.Time

	mu    sync.Mutex
	buf   [recentSize]entry
	next  int            // where the next entry goes
	n     int            // entries held, up to recentSize
	share map[string]int // each cell's last health share, to see it cross 0
}

// NewRecent returns an empty ring; now is the clock (nil: time.Now).
func NewRecent(now func() time.Time) *Recent {
	if now == nil {
		now = time.Now
	}
	return &Recent{now: now, share: map[string]int{}}
}

func (r *Recent) add(e entry) {
	r.buf[r.next] = e
	r.next = (r.next + 1) % recentSize
	r.n = min(r.n+1, recentSize)
}

// Rerouted records an attempt on cell given up before its point of no
// return (payments.Metrics' method of the same name). It must not block.
func (r *Recent) Rerouted(cell string, err error, cellHealthy bool) {
	at := r.now()
	r.mu.Lock()
	r.add(entry{at: at, kind: "reroute", cell: cell, err: err, healthy: cellHealthy})
	r.mu.Unlock()
}

// HealthChanged records a cell's health share crossing 0 (the health
// monitor's OnChange); shares between 1 and 100 (a ramp back) are not
// events. It must not block.
func (r *Recent) HealthChanged(cell string, share int) {
	at := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	prev, known := r.share[cell]
	if !known {
		prev = 100 // the monitor starts every cell at 100
	}
	r.share[cell] = share
	switch {
	case share == 0 && prev > 0:
		r.add(entry{at: at, kind: "down", cell: cell, share: share})
	case share > 0 && prev == 0:
		r.add(entry{at: at, kind: "up", cell: cell, share: share})
	}
}

// List returns up to limit events, newest first.
func (r *Recent) List(limit int) []Event {
	r.mu.Lock()
	n := min(r.n, max(limit, 0))
	es := make([]entry, 0, n)
	for i := 1; i <= n; i++ {
		es = append(es, r.buf[(r.next-i+recentSize)%recentSize])
	}
	r.mu.Unlock()
	out := make([]Event, 0, len(es))
	for _, e := range es {
		ev := Event{Time: e.at, Kind: e.kind, Cell: e.cell}
		switch e.kind {
		case "reroute":
			ev.Detail = status.Convert(e.err).Code().String()
			if e.err != nil {
				ev.Detail += ": " + status.Convert(e.err).Message()
			}
			if e.healthy {
				ev.Detail += " (cell healthy: not its transaction)"
			}
		case "down":
			ev.Detail = "health share 0: ejected or failing its checks"
		case "up":
			ev.Detail = "re-admitted"
		}
		out = append(out, ev)
	}
	return out
}
