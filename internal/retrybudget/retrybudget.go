// Package retrybudget bounds the re-routes a router makes to a share of the
// requests it was sent recently, as Finagle's retry budget does: each
// request deposits a fraction of a token, each re-route withdraws a whole
// one, and deposits expire after a window. A small reserve per second lets
// a quiet router re-route at all.
//
// Counting over a window, not over what is in flight at one instant, is
// what lets a router absorb the burst of one cell failing (every attempt in
// flight on it fails together) while still holding re-routes to the share
// under sustained overload, where re-routes would only multiply the load.
package retrybudget

import (
	"sync"
	"time"
)

// slots is the window's length in seconds: deposits older than that
// expire.
const slots = 10

type slot struct {
	sec       int64 // the Unix second the counts are for
	requests  int64
	withdrawn int64
}

// Budget is safe for concurrent use. The zero value is not usable; call New.
type Budget struct {
	ratio     float64
	minPerSec int64
	now       func() time.Time

	mu    sync.Mutex
	slots [slots]slot
}

// New returns a budget that allows re-routes of up to ratio of the requests
// deposited in the last 10 seconds plus minPerSec per second of that
// window. now is the clock (time.Now when nil).
func New(ratio float64, minPerSec int, now func() time.Time) *Budget {
	if now == nil {
		now = time.Now
	}
	return &Budget{ratio: ratio, minPerSec: int64(minPerSec), now: now}
}

// current returns the slot for this second, reset if it held an older
// second's counts. b.mu is held.
func (b *Budget) current() *slot {
	sec := b.now().Unix()
	s := &b.slots[sec%slots]
	if s.sec != sec {
		*s = slot{sec: sec}
	}
	return s
}

// Request deposits one request's share.
func (b *Budget) Request() {
	b.mu.Lock()
	b.current().requests++
	b.mu.Unlock()
}

// Retry withdraws one re-route, reporting false (and withdrawing nothing)
// when the budget is spent.
func (b *Budget) Retry() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.current()
	var requests, withdrawn int64
	for i := range b.slots {
		if s := &b.slots[i]; cur.sec-s.sec < slots {
			requests += s.requests
			withdrawn += s.withdrawn
		}
	}
	if float64(withdrawn+1) > b.ratio*float64(requests)+float64(b.minPerSec*slots) {
		return false
	}
	cur.withdrawn++
	return true
}
