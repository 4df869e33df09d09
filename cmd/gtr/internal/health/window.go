package health

import "time"

// outcomeWindow counts outcomes over a sliding time window, in one-tenth
// buckets of its span, without allocating per observation.
type outcomeWindow struct {
	span    time.Duration
	buckets [10]struct {
		start      time.Time
		n, failure int
	}
}

func newOutcomeWindow(span time.Duration) *outcomeWindow { return &outcomeWindow{span: span} }

func (w *outcomeWindow) bucket(now time.Time) int {
	width := w.span / time.Duration(len(w.buckets))
	return int(now.UnixNano()/int64(width)) % len(w.buckets)
}

func (w *outcomeWindow) add(now time.Time, ok bool) {
	width := w.span / time.Duration(len(w.buckets))
	start := now.Truncate(width)
	b := &w.buckets[w.bucket(now)]
	if !b.start.Equal(start) {
		b.start, b.n, b.failure = start, 0, 0
	}
	b.n++
	if !ok {
		b.failure++
	}
}

// counts returns the requests and failures seen in the last span.
func (w *outcomeWindow) counts(now time.Time) (n, failures int) {
	for _, b := range w.buckets {
		if now.Sub(b.start) < w.span {
			n += b.n
			failures += b.failure
		}
	}
	return n, failures
}

func (w *outcomeWindow) reset() {
	for i := range w.buckets {
		w.buckets[i].n, w.buckets[i].failure = 0, 0
	}
}

// ring keeps the last N outcomes.
type ring struct {
	ok   []bool
	next int
	full bool
	good int
}

func newRing(n int) *ring { return &ring{ok: make([]bool, n)} }

func (r *ring) add(ok bool) {
	if r.full && r.ok[r.next] {
		r.good--
	}
	r.ok[r.next] = ok
	if ok {
		r.good++
	}
	r.next++
	if r.next == len(r.ok) {
		r.next, r.full = 0, true
	}
}

func (r *ring) counts() (n, ok int) {
	if r.full {
		return len(r.ok), r.good
	}
	return r.next, r.good
}

func (r *ring) reset() { *r = ring{ok: make([]bool, len(r.ok))} }

func (w *outcomeWindow) clone() *outcomeWindow { c := *w; return &c }

func (r *ring) clone() *ring {
	c := *r
	c.ok = append([]bool(nil), r.ok...)
	return &c
}
