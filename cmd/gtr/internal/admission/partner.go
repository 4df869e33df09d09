package admission

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/cellpay/cellpay/cmd/gtr/internal/refusals"
	"github.com/cellpay/cellpay/internal/partners"
)

// Partners holds each partner's token bucket and in-flight count. Entries
// exist only for partners that authenticated, so the map is bounded by the
// registry (partners.MaxPartners). It is safe for concurrent use.
type Partners struct {
	disabled bool
	now      func() time.Time
	mu       sync.RWMutex // guards the map only
	byID     map[string]*partnerLimit
	// active counts the partners with requests in flight (Share). It can
	// drift by one when a partner's limits change in the registry while
	// one of its requests is being refused (the refusal counts out of
	// the replaced limiter); Share reports at least 1.
	active atomic.Int64
	// refusals logs the tap's refusals, at a bounded rate (LogRefusals);
	// nil logs none.
	refusals *refusalLog
	// kept keeps every refusal of the tap's by its request ID, for
	// operators (KeepRefusals); nil keeps none.
	kept *refusals.Ring
}

type partnerLimit struct {
	limits   partners.Limits // the limits the limiter was made with
	lim      *rate.Limiter
	inflight atomic.Int64
	shed     atomic.Int64
}

// NewPartners returns the partners' limiters; disabled admits everything.
// now is the clock (time.Now when nil).
func NewPartners(disabled bool, now func() time.Time) *Partners {
	if now == nil {
		now = time.Now
	}
	return &Partners{disabled: disabled, now: now, byID: map[string]*partnerLimit{}}
}

// Verdict says why a request was refused, and when to try again.
type Verdict struct {
	OK bool
	// Reason is "rate" (over the partner's rate) or "in_flight" (too many
	// of its requests at once) when refused.
	Reason string
	// RetryAfter is when a retry may be admitted.
	RetryAfter time.Duration
}

// Acquire admits one request of p, or refuses it. An admitted request is
// followed by one Release(p.ID).
func (a *Partners) Acquire(p *partners.Partner) Verdict { return a.acquire(p, nil) }

// acquire is Acquire for a request whose rate token the tap handle
// already took (t; nil when it did not): only its in-flight count is
// left to check, and the token is given back if that refuses it.
func (a *Partners) acquire(p *partners.Partner, t *rate.Reservation) Verdict {
	if a.disabled {
		return Verdict{OK: true}
	}
	l := a.limit(p)
	if n := a.inc(l); n > int64(l.limits.MaxInFlight) {
		a.dec(l)
		l.shed.Add(1)
		if t != nil {
			t.CancelAt(a.now())
		}
		return Verdict{Reason: "in_flight", RetryAfter: inFlightRetry}
	}
	if t == nil {
		if _, v := a.reserve(l); !v.OK {
			a.dec(l)
			l.shed.Add(1)
			return v
		}
	}
	return Verdict{OK: true}
}

// inFlightRetry is the retry hint of a request over its partner's
// in-flight cap.
const inFlightRetry = 50 * time.Millisecond

// reserve takes one of l's rate tokens now, or says when one will be
// there.
func (a *Partners) reserve(l *partnerLimit) (*rate.Reservation, Verdict) {
	now := a.now()
	r := l.lim.ReserveN(now, 1)
	if !r.OK() {
		return nil, Verdict{Reason: "rate", RetryAfter: time.Second}
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return nil, Verdict{Reason: "rate", RetryAfter: d}
	}
	return r, Verdict{OK: true}
}

// peek is the tap handle's verdict on a request of p before the request
// exists: refused if p is at its in-flight cap (counted, not taken: the
// interceptor takes it) or over its rate (the token is taken, and
// returned for the interceptor to pass on to acquire).
func (a *Partners) peek(p *partners.Partner) (*rate.Reservation, Verdict) {
	l := a.limit(p)
	if l.inflight.Load() >= int64(l.limits.MaxInFlight) {
		l.shed.Add(1)
		return nil, Verdict{Reason: "in_flight", RetryAfter: inFlightRetry}
	}
	r, v := a.reserve(l)
	if !v.OK {
		l.shed.Add(1)
	}
	return r, v
}

// inc and dec count one of l's requests in or out of flight, and the
// partners with requests in flight.
func (a *Partners) inc(l *partnerLimit) int64 {
	n := l.inflight.Add(1)
	if n == 1 {
		a.active.Add(1)
	}
	return n
}

func (a *Partners) dec(l *partnerLimit) {
	if l.inflight.Add(-1) == 0 {
		a.active.Add(-1)
	}
}

// Share returns how many of partner id's requests are in flight (admitted
// and not yet released), and how many partners have requests in flight:
// for a limit over all partners to tell a partner within its fair share
// of it from one over it (CellLimit.AcquireShare).
func (a *Partners) Share(id string) (inflight, active int64) {
	if a == nil || a.disabled {
		return 0, 0
	}
	a.mu.RLock()
	l := a.byID[id]
	a.mu.RUnlock()
	if l == nil {
		return 0, max(1, a.active.Load())
	}
	return l.inflight.Load(), max(1, a.active.Load())
}

// Release ends an admitted request of partner id.
func (a *Partners) Release(id string) {
	if a.disabled {
		return
	}
	a.mu.RLock()
	l := a.byID[id]
	a.mu.RUnlock()
	if l != nil {
		a.dec(l)
	}
}

// limit returns p's limiter, made anew when p's limits changed in the
// registry.
func (a *Partners) limit(p *partners.Partner) *partnerLimit {
	want := p.EffectiveLimits()
	a.mu.RLock()
	l := a.byID[p.ID]
	a.mu.RUnlock()
	if l != nil && l.limits == want {
		return l
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if l = a.byID[p.ID]; l != nil && l.limits == want {
		return l
	}
	nl := &partnerLimit{limits: want, lim: rate.NewLimiter(rate.Limit(want.RatePerSecond), want.Burst)}
	if l != nil {
		nl.inflight.Store(l.inflight.Load()) // requests in flight keep counting
		nl.shed.Store(l.shed.Load())
	}
	if len(a.byID) < partners.MaxPartners || l != nil {
		a.byID[p.ID] = nl
	}
	return nl
}

// Shed returns how many of partner id's requests were refused.
func (a *Partners) Shed(id string) int64 {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if l := a.byID[id]; l != nil {
		return l.shed.Load()
	}
	return 0
}
