package admin

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Failed logins (a missing or wrong operator token, on the admin API or
// the console's login) are audited and throttled per source address (PCI
// DSS 10.2.1.4, 8.3.4): after maxFailures within failureWindow, the
// address is refused without its token being looked at until the window
// it started ends. The audit keeps at most auditBurst failure records,
// then auditPerSecond a second, whatever the flood; a record then says how
// many were left out before it.
const (
	maxFailures     = 10
	failureWindow   = time.Minute
	maxSources      = 4096
	auditPerSecond  = 2
	auditBurst      = 20
	unknownSourceIP = "unknown"
)

// failures counts failed logins per source address, bounded.
type failures struct {
	mu      sync.Mutex
	now     func() time.Time
	sources map[string]*source
	// The audit's own budget: tokens, refilled at auditPerSecond, and the
	// failures not audited since the last record.
	tokens     float64
	refilled   time.Time
	suppressed int
}

type source struct {
	since time.Time // the window's start
	n     int
}

func newFailures(now func() time.Time) *failures {
	return &failures{now: now, sources: make(map[string]*source), tokens: auditBurst}
}

// sourceOf is the address part of a peer's "host:port" ("unknown" when it
// has none).
func sourceOf(addr string) string {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return ap.Addr().Unmap().String()
	}
	if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
		return host
	}
	return unknownSourceIP
}

// locked reports whether src is refused now, and for how much longer.
func (f *failures) locked(src string) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sources[src]
	if s == nil {
		return 0, false
	}
	left := s.since.Add(failureWindow).Sub(f.now())
	if left <= 0 {
		delete(f.sources, src)
		return 0, false
	}
	return left, s.n >= maxFailures
}

// fail counts a failed login from src. audit: the failure is to be
// audited (within the audit's budget), with suppressed failures left out
// before it.
func (f *failures) fail(src string) (audit bool, suppressed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	s := f.sources[src]
	if s == nil || now.Sub(s.since) >= failureWindow {
		if s == nil && len(f.sources) >= maxSources {
			f.evict(now)
		}
		s = &source{since: now}
		f.sources[src] = s
	}
	s.n++
	f.tokens = min(auditBurst, f.tokens+now.Sub(f.refilled).Seconds()*auditPerSecond)
	f.refilled = now
	if f.tokens < 1 {
		f.suppressed++
		return false, 0
	}
	f.tokens--
	suppressed, f.suppressed = f.suppressed, 0
	return true, suppressed
}

// evict makes room for a new source: the windows that ended go, and if
// none did, the oldest window.
func (f *failures) evict(now time.Time) {
	var oldest string
	for k, s := range f.sources {
		if now.Sub(s.since) >= failureWindow {
			delete(f.sources, k)
		} else if oldest == "" || s.since.Before(f.sources[oldest].since) {
			oldest = k
		}
	}
	if len(f.sources) >= maxSources {
		delete(f.sources, oldest)
	}
}
