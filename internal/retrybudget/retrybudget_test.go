package retrybudget

import (
	"sync"
	"testing"
	"time"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func retries(b *Budget, n int) int {
	ok := 0
	for range n {
		if b.Retry() {
			ok++
		}
	}
	return ok
}

// TestReserveOnly: with no requests, only the reserve (minPerSec over the
// window) may be spent.
func TestReserveOnly(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	b := New(0.2, 1, c.now)
	if got := retries(b, 100); got != 10 {
		t.Fatalf("re-routes allowed with no requests: %d, want 10", got)
	}
}

// TestBurstAfterTraffic: a cell failing at once under steady traffic finds
// the budget the traffic built, so a burst of a third of the requests of
// one second re-routes whole.
func TestBurstAfterTraffic(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	b := New(0.2, 3, c.now)
	for range 10 {
		for range 90 {
			b.Request()
		}
		c.add(time.Second)
	}
	if got := retries(b, 30); got != 30 {
		t.Fatalf("burst of 30 after 10 s at 90 req/s: %d allowed", got)
	}
}

// TestHoldsUnderSustainedFailure: when every request fails, re-routes stay
// at the share plus the reserve, second after second.
func TestHoldsUnderSustainedFailure(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	b := New(0.2, 3, c.now)
	total, allowed := 0, 0
	for range 60 {
		for range 100 {
			b.Request()
			total++
			if b.Retry() {
				allowed++
			}
		}
		c.add(time.Second)
	}
	// At most the share of the requests, the reserve of each second and
	// one window's slack.
	if max := int(0.2*float64(total)) + 3*60 + 30; allowed > max {
		t.Fatalf("%d re-routes of %d requests, more than %d", allowed, total, max)
	}
	if allowed < int(0.2*float64(total))-30 {
		t.Fatalf("%d re-routes of %d requests: the budget starves", allowed, total)
	}
}

// TestExpires: deposits older than the window no longer count.
func TestExpires(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	b := New(0.5, 0, c.now)
	for range 100 {
		b.Request()
	}
	c.add(9 * time.Second)
	if !b.Retry() {
		t.Fatal("deposit 9 s old did not count")
	}
	c.add(2 * time.Second)
	if b.Retry() {
		t.Fatal("deposit 11 s old still counted")
	}
}

func BenchmarkRequestRetry(b *testing.B) {
	bud := New(0.2, 3, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bud.Request()
			bud.Retry()
		}
	})
}
