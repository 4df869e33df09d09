package client

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cellpay/cellpay/pkg/client/failover"
)

// Event is one switch between access points.
type Event struct {
	At time.Time `json:"at"`
	// From and To are the access points' addresses.
	From string `json:"from"`
	To   string `json:"to"`
	// FromSite and ToSite are their sites ("" without sites).
	FromSite string `json:"from_site,omitempty"`
	ToSite   string `json:"to_site,omitempty"`
	// Rule is the rule that switched: probe, success-rate or fast.
	Rule string `json:"rule"`
	// Reason names the rule and its numbers ("probe: 5 of 5 failed").
	Reason string `json:"reason"`
}

// FailoverStats are a client's failover counters.
type FailoverStats struct {
	// Current is the address calls go to (but for the split); "" with one
	// access point. CurrentSite is its site ("" without sites).
	Current, CurrentSite string
	// Switches made, and switches the flap damping held back.
	Switches, Damped int
	// Calls answered, and calls failed (connect or read timeout,
	// UNAVAILABLE), by access point address.
	Answered, Failed map[string]int
	// AnswerTime is the moving average of the time answered calls took,
	// by access point address (absent before its first answer): among
	// access points otherwise alike, the quickest ranks first.
	AnswerTime map[string]time.Duration
}

// maxEvents is how many events a client keeps for Events.
const maxEvents = 1000

// switcher drives the failover machine: it serialises calls into it,
// turns its events into Events, and counts outcomes.
type switcher struct {
	client *Client

	mu       sync.Mutex // guards everything below; never held across I/O
	m        *failover.Machine
	events   []Event
	answered []int // by endpoint index, one per access point
	failed   []int
}

// newSwitcher returns the switcher of c's access points over m.
func newSwitcher(c *Client, m *failover.Machine) *switcher {
	n := len(c.endpoints)
	return &switcher{client: c, m: m, answered: make([]int, n), failed: make([]int, n)}
}

// pick returns the access point of a new call.
func (c *Client) pick() failover.Endpoint {
	s := c.fo
	if s == nil {
		return failover.Primary
	}
	roll := rand.IntN(100)
	s.mu.Lock()
	s.m.Tick(time.Now())
	ep := s.m.Pick(roll)
	ev := s.m.Events()
	s.mu.Unlock()
	s.emit(ev)
	return ep
}

// other returns where the one retry of a call that failed on ep goes: the
// best other access point.
func (s *switcher) other(ep failover.Endpoint) failover.Endpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, _ := s.m.Other(ep)
	return o
}

// observe records a call's outcome at ep: failed when the access point
// did not answer. A call that ended for the caller's reasons (err is not
// nil, failed is false, and the caller's context ended) still counts as
// answered: only the access point's failures move the client. took is the
// time an answer took, which ranks the access point among its equals; 0
// when the call says nothing of it.
func (c *Client) observe(ep failover.Endpoint, took time.Duration, failed bool) {
	s := c.fo
	if s == nil {
		return
	}
	now := time.Now()
	s.mu.Lock()
	s.m.ObserveTimed(now, ep, !failed, took)
	if failed {
		s.failed[ep]++
	} else {
		s.answered[ep]++
	}
	s.mu.Unlock()
}

// emit reports machine events: kept, logged, passed to OnSwitch. It is
// called without s.mu held.
func (s *switcher) emit(ev []failover.Event) {
	if len(ev) == 0 {
		return
	}
	out := make([]Event, len(ev))
	for i, e := range ev {
		from, to := s.client.endpoints[e.From], s.client.endpoints[e.To]
		out[i] = Event{At: e.At, From: from.addr, To: to.addr, FromSite: from.site, ToSite: to.site, Rule: string(e.Rule), Reason: e.Reason}
	}
	s.mu.Lock()
	s.events = append(s.events, out...)
	if n := len(s.events) - maxEvents; n > 0 {
		s.events = append(s.events[:0], s.events[n:]...)
	}
	s.mu.Unlock()
	for _, e := range out {
		s.client.cfg.Logger.Info("client: access point switched", "from", e.From, "from_site", e.FromSite, "to", e.To, "to_site", e.ToSite, "rule", e.Rule, "reason", e.Reason, "at", e.At)
		if f := s.client.cfg.OnSwitch; f != nil {
			f(e)
		}
	}
}

// Events returns the switches between access points so far (the last
// 1000), oldest first.
func (c *Client) Events() []Event {
	if c.fo == nil {
		return nil
	}
	c.fo.mu.Lock()
	defer c.fo.mu.Unlock()
	return append([]Event(nil), c.fo.events...)
}

// FailoverStats returns the failover counters.
func (c *Client) FailoverStats() FailoverStats {
	st := FailoverStats{Answered: map[string]int{}, Failed: map[string]int{}, AnswerTime: map[string]time.Duration{}}
	s := c.fo
	if s == nil {
		return st
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := s.m.Stats()
	cur := c.endpoints[ms.Current]
	st.Current, st.CurrentSite, st.Switches, st.Damped = cur.addr, cur.site, ms.Switches, ms.Damped
	for i, ep := range c.endpoints {
		st.Answered[ep.addr], st.Failed[ep.addr] = s.answered[i], s.failed[i]
		if d := s.m.AnswerTime(failover.Endpoint(i)); d > 0 {
			st.AnswerTime[ep.addr] = d
		}
	}
	return st
}

// probeTick is how often the prober lets the machine's clock move when no
// call does: a tenth of the shortest interval, within 10ms..1s.
func probeTick(cfg failover.Config) time.Duration {
	d := min(cfg.ProbeInterval, cfg.EvalInterval) / 10
	return max(10*time.Millisecond, min(d, time.Second))
}

// probeLoop ticks the machine and runs the probe rounds it asks for, until
// Close.
func (c *Client) probeLoop() {
	defer close(c.done)
	s := c.fo
	s.mu.Lock()
	cfg := s.m.Config()
	s.mu.Unlock()
	t := time.NewTicker(probeTick(cfg))
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-c.stop; cancel() }()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		s.mu.Lock()
		s.m.Tick(now)
		due := s.m.ProbeDue(now)
		ev := s.m.Events()
		s.mu.Unlock()
		s.emit(ev)
		if !due {
			continue
		}
		s.mu.Lock()
		targets := s.m.ProbeTargets()
		s.mu.Unlock()
		failed := c.probeRound(ctx, targets, cfg.ProbeCount)
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		s.m.ProbeResults(time.Now(), failed)
		ev = s.m.Events()
		s.mu.Unlock()
		s.emit(ev)
	}
}

// probeRound asks each target access point's gRPC health n times in a
// row, each bounded by ProbeTimeout, the targets at once (at most
// failover.MaxEndpoints), and returns how many of each did not answer
// SERVING.
func (c *Client) probeRound(ctx context.Context, targets []failover.Endpoint, n int) []int {
	failed := make([]int, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		ep := c.endpoints[t]
		wg.Go(func() {
			for range n {
				pctx, cancel := context.WithTimeout(ctx, c.cfg.ProbeTimeout)
				resp, err := ep.health.Check(pctx, &healthpb.HealthCheckRequest{})
				cancel()
				if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
					failed[i]++
				}
			}
		})
	}
	wg.Wait()
	return failed
}
