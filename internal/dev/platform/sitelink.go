package platform

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// SiteLink is the network between two sites on this host: every
// connection that crosses it goes through a TCP proxy of its own
// (toxiproxy, run in this process: this kernel has no netem), which adds
// the link's latency each way, and all of them are cut and healed
// together, as a fibre cut between two cities would. Each proxy listens
// on 127.0.0.1 and forwards to one upstream on loopback: the sites are
// told apart by which side of a proxy they are, not by address.
//
// A link holds at most MaxSiteLinkProxies proxies. Its methods are safe
// for concurrent use.
type SiteLink struct {
	latency time.Duration
	srv     *toxiproxy.ApiServer

	mu      sync.Mutex
	proxies []*toxiproxy.Proxy
	cut     bool
	closed  bool
}

// MaxSiteLinkProxies bounds a SiteLink's proxies: a test's link carries a
// handful of connections (a database copy, a directory mirror), not a
// site's whole traffic.
const MaxSiteLinkProxies = 8

// ErrSiteLinkClosed is returned by a SiteLink's methods once Close ran.
var ErrSiteLinkClosed = errors.New("platform: site link closed")

// NewSiteLink returns a link that adds latency to each direction of
// every connection through it (20 ms for two cities a few hundred km
// apart; 0 for none). It has no proxy until Proxy is called.
func NewSiteLink(latency time.Duration) *SiteLink {
	if latency < 0 {
		latency = 0
	}
	return &SiteLink{
		latency: latency,
		// Its own registry and a silent logger: the proxies' metrics and
		// log lines (one per connection) are nobody's business here.
		srv: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
	}
}

// Latency is what the link adds to each direction.
func (l *SiteLink) Latency() time.Duration { return l.latency }

// Proxy adds a proxy called name (unique on the link) that forwards to
// upstream (host:port on loopback) and returns the address it listens on
// (127.0.0.1, a free port), which the other site dials instead of
// upstream. On a cut link the proxy is made but cut too, until Heal.
func (l *SiteLink) Proxy(name, upstream string) (string, error) {
	host, _, err := net.SplitHostPort(upstream)
	if err != nil {
		return "", fmt.Errorf("platform: site link: upstream %q: %w", upstream, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", fmt.Errorf("platform: site link: upstream %q is not on loopback", upstream)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return "", ErrSiteLinkClosed
	}
	if len(l.proxies) >= MaxSiteLinkProxies {
		return "", fmt.Errorf("platform: site link: at most %d proxies", MaxSiteLinkProxies)
	}
	for _, p := range l.proxies {
		if p.Name == name {
			return "", fmt.Errorf("platform: site link: proxy %q exists", name)
		}
	}
	p := toxiproxy.NewProxy(l.srv, name, "127.0.0.1:0", upstream)
	if l.latency > 0 {
		ms := l.latency.Milliseconds()
		for _, dir := range []string{"upstream", "downstream"} {
			js := fmt.Sprintf(`{"name":"latency-%s","type":"latency","stream":%q,"attributes":{"latency":%d}}`, dir, dir, ms)
			if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
				return "", fmt.Errorf("platform: site link: proxy %s: latency: %w", name, err)
			}
		}
	}
	// Started even on a cut link, for its port: then stopped at once.
	if err := p.Start(); err != nil {
		return "", fmt.Errorf("platform: site link: proxy %s: %w", name, err)
	}
	if l.cut {
		p.Stop()
	}
	l.proxies = append(l.proxies, p)
	return p.Listen, nil // the port the listener took
}

// Cut severs the link: every proxy stops listening (a new connection is
// refused) and closes the connections it carries (each ends on both
// sides at once; nothing in flight is delivered after). Cutting a cut
// link does nothing.
func (l *SiteLink) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut || l.closed {
		return
	}
	l.cut = true
	for _, p := range l.proxies {
		p.Stop()
	}
}

// Heal restores a cut link: every proxy listens again on its address,
// with its latency; connections cut stay cut, their clients reconnect.
func (l *SiteLink) Heal() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrSiteLinkClosed
	}
	if !l.cut {
		return nil
	}
	var errs []error
	for _, p := range l.proxies {
		if err := p.Start(); err != nil {
			errs = append(errs, fmt.Errorf("platform: site link: proxy %s on %s: %w", p.Name, p.Listen, err))
		}
	}
	l.cut = false
	return errors.Join(errs...)
}

// IsCut reports whether the link is cut.
func (l *SiteLink) IsCut() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cut
}

// Close stops every proxy for good. Closing twice does nothing.
func (l *SiteLink) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	for _, p := range l.proxies {
		p.Stop()
	}
}
