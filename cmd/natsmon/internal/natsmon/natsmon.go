// Package natsmon watches nats-server through its HTTP monitoring
// endpoints and serves what they report as Prometheus metrics: each
// server's health, its JetStream storage and memory, the meta group's size
// and leader, and every stream's (and so every key-value bucket's) size,
// limit, replicas and leader. It stands in for the official
// prometheus-nats-exporter, which cannot be built here, and keeps its
// metric names where one exists (metrics.go).
//
// It polls each server in the background every Config.Interval, every
// request bounded by Config.Timeout and every answer by a size limit, and
// serves the last poll's results; a scrape never waits on NATS. It only
// reads: it never connects to NATS as a client, and nothing of a
// message's content is in a monitoring answer or a metric.
package natsmon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Server is one nats-server to watch.
type Server struct {
	// Name labels the server's metrics (server="nats-1"): stable whether
	// or not it answers.
	Name string
	// URL is its monitoring base URL, http://127.0.0.1:8222.
	URL string
}

// Config is a Monitor's configuration.
type Config struct {
	// Servers are the servers to watch; at least one, names distinct.
	Servers []Server
	// Interval between polls; default 5 s.
	Interval time.Duration
	// Timeout bounds each HTTP request; default 2 s, and at most Interval.
	Timeout time.Duration
	// Log receives a line when a server stops or starts answering; nil
	// discards them.
	Log *slog.Logger
	// Transport, if set, replaces http.DefaultTransport (tests).
	Transport http.RoundTripper
}

// Defaults.
const (
	DefaultInterval = 5 * time.Second
	DefaultTimeout  = 2 * time.Second
)

// The answers' size bounds: /varz is a few KiB; /jsz grows with the
// streams (some 2 KiB each with their config), so 8 MiB holds thousands.
const (
	maxVarz    = 1 << 20
	maxJsz     = 8 << 20
	maxHealthz = 64 << 10
)

// The endpoints polled. /jsz asks for every account's streams with their
// configuration (for max_bytes and replicas), not their consumers.
const (
	varzPath    = "/varz"
	jszPath     = "/jsz?accounts=true&streams=true&config=true"
	healthzPath = "/healthz?js-enabled-only=true"
)

func (c Config) withDefaults() Config {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Timeout == 0 {
		c.Timeout = min(DefaultTimeout, c.Interval)
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Transport == nil {
		c.Transport = http.DefaultTransport
	}
	return c
}

func (c Config) validate() error {
	if len(c.Servers) == 0 {
		return errors.New("no servers")
	}
	seen := map[string]bool{}
	for _, s := range c.Servers {
		if err := label("server name", s.Name); err != nil {
			return err
		}
		if seen[s.Name] {
			return fmt.Errorf("server name %q twice", s.Name)
		}
		seen[s.Name] = true
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("server %s: URL %q: want http://host:port", s.Name, s.URL)
		}
	}
	if c.Interval < 0 || c.Timeout < 0 || c.Timeout > c.Interval {
		return fmt.Errorf("interval %v, timeout %v: want positive, the timeout at most the interval", c.Interval, c.Timeout)
	}
	return nil
}

// Sample is what one poll learnt of one server.
type Sample struct {
	Server Server
	// Err is why the server could not be read (Varz is then nil); a
	// failed /jsz or /healthz leaves the rest.
	Err error
	// Varz is nil when the server did not answer /varz.
	Varz *Varz
	// Jsz is nil when JetStream is off or /jsz failed.
	Jsz *Jsz
	// Healthz is nil when /healthz failed.
	Healthz *Healthz
}

// Monitor polls the servers and holds the last poll's samples.
type Monitor struct {
	cfg    Config
	client *http.Client
	last   atomic.Pointer[[]Sample]

	mu     sync.Mutex // guards cancel, done
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a Monitor for cfg; Start starts it.
func New(cfg Config) (*Monitor, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("natsmon: config: %w", err)
	}
	return &Monitor{cfg: cfg, client: &http.Client{Transport: cfg.Transport, Timeout: cfg.Timeout}}, nil
}

// Start polls once (bounded by ctx and the timeout), then every Interval
// in the background until Shutdown.
func (m *Monitor) Start(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done != nil {
		return
	}
	m.Poll(ctx)
	ctx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
	m.done = make(chan struct{})
	go m.run(ctx, m.done)
}

func (m *Monitor) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.Poll(ctx)
		}
	}
}

// Shutdown stops the polling and waits for a poll under way, or for ctx.
func (m *Monitor) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	cancel, done := m.cancel, m.done
	m.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Poll reads every server once, at once, and keeps the samples for the
// next scrape. It returns when every request has answered or timed out.
func (m *Monitor) Poll(ctx context.Context) []Sample {
	out := make([]Sample, len(m.cfg.Servers))
	var wg sync.WaitGroup
	for i, s := range m.cfg.Servers {
		wg.Go(func() { out[i] = m.sample(ctx, s) })
	}
	wg.Wait()
	if prev := m.last.Load(); prev != nil {
		for i, s := range out {
			m.logChange((*prev)[i], s)
		}
	} else {
		for _, s := range out {
			m.logChange(Sample{}, s)
		}
	}
	m.last.Store(&out)
	return out
}

// logChange logs a server that stops or starts answering, once.
func (m *Monitor) logChange(prev, cur Sample) {
	switch {
	case cur.Err != nil && (prev.Err == nil || prev.Varz != nil):
		m.cfg.Log.Warn("NATS server not answering its monitoring endpoint", "server", cur.Server.Name, "err", cur.Err)
	case cur.Err == nil && (prev.Err != nil || prev.Varz == nil):
		m.cfg.Log.Info("NATS server answering its monitoring endpoint", "server", cur.Server.Name)
	}
}

// Samples returns the last poll's samples, nil before the first.
func (m *Monitor) Samples() []Sample {
	if p := m.last.Load(); p != nil {
		return *p
	}
	return nil
}

// sample reads one server's /varz, then /jsz (when JetStream is on) and
// /healthz.
func (m *Monitor) sample(ctx context.Context, s Server) Sample {
	out := Sample{Server: s}
	b, err := m.get(ctx, s.URL+varzPath, maxVarz, false)
	if err == nil {
		out.Varz, err = DecodeVarz(b)
	}
	if err != nil {
		out.Err = err
		return out
	}
	if out.Varz.JetStream != nil {
		if b, err := m.get(ctx, s.URL+jszPath, maxJsz, false); err != nil {
			out.Err = err
		} else if out.Jsz, err = DecodeJsz(b); err != nil {
			out.Err = err
		}
	}
	// /healthz answers 503 with its reason when unhealthy.
	if b, err := m.get(ctx, s.URL+healthzPath, maxHealthz, true); err != nil {
		out.Err = errors.Join(out.Err, err)
	} else if h, err := DecodeHealthz(b); err != nil {
		out.Err = errors.Join(out.Err, err)
	} else {
		out.Healthz = h
	}
	return out
}

// get fetches url within the timeout and returns its body, at most limit
// bytes (more is an error). Only 200 is accepted, and 503 too if any.
func (m *Monitor) get(ctx context.Context, url string, limit int64, any503 bool) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && !(any503 && resp.StatusCode == http.StatusServiceUnavailable) {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("GET %s: answer over %d bytes", url, limit)
	}
	return b, nil
}
