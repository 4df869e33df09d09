package natsconn

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// ProbeEvery is how often a process looks afresh at the certificate each
// NATS server of its configured list presents.
const ProbeEvery = 5 * time.Minute

// ProbeTimeout bounds one server's probe: connect, its INFO, the TLS
// handshake.
const ProbeTimeout = 5 * time.Second

// MaxServers bounds the servers a connection's list may have probed, and
// the servers whose expiry a process keeps (ServedExpiries): a cluster has
// three, and the bound keeps the metric's cardinality at most the
// configured servers whatever a URL holds.
const MaxServers = 8

// maxInfo bounds the INFO line read before the handshake; nats-server's is
// well under a kilobyte.
const maxInfo = 16 << 10

// Servers is the list of servers in a Connect url (comma-separated, with
// or without a scheme), as host:port (NATS's 4222 when no port is given),
// each once, at most MaxServers: the servers a connection may use, and so
// the ones whose certificates it probes.
func Servers(urls string) []string {
	var out []string
	for _, u := range strings.Split(urls, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		if !strings.Contains(u, "://") {
			u = "nats://" + u
		}
		p, err := url.Parse(u)
		if err != nil || p.Hostname() == "" {
			continue
		}
		port := p.Port()
		if port == "" {
			port = "4222"
		}
		hp := net.JoinHostPort(p.Hostname(), port)
		if !slices.Contains(out, hp) && len(out) < MaxServers {
			out = append(out, hp)
		}
	}
	return out
}

// served is what each probed server last presented, by host:port, and
// when each was last probed: a process's several connections to one
// cluster share the probes.
var served struct {
	sync.Mutex
	notAfter map[string]time.Time
	probed   map[string]time.Time
}

// ServedExpiry is when the certificate a NATS server last presented to
// this process's probe expires.
type ServedExpiry struct {
	Server   string // host:port, as configured
	NotAfter time.Time
}

// ServedExpiries lists, by server (host:port of the configured list),
// the expiry of the certificate each NATS server presented to this
// process's last probe (telemetry exports it as
// cellpay_tls_nats_not_after_seconds{server}): every server of the list,
// not only the one a connection happens to use, so that a server that
// never reloaded its renewed certificate shows even when no client is on
// it. At most MaxServers.
func ServedExpiries() []ServedExpiry {
	served.Lock()
	defer served.Unlock()
	out := make([]ServedExpiry, 0, len(served.notAfter))
	for s, t := range served.notAfter {
		out = append(out, ServedExpiry{s, t})
	}
	slices.SortFunc(out, func(a, b ServedExpiry) int { return strings.Compare(a.Server, b.Server) })
	return out
}

func recordServed(server string, notAfter time.Time) {
	served.Lock()
	defer served.Unlock()
	if served.notAfter == nil {
		served.notAfter = map[string]time.Time{}
	}
	if _, ok := served.notAfter[server]; ok || len(served.notAfter) < MaxServers {
		served.notAfter[server] = notAfter
	}
}

// dueProbe reports whether server is due a probe at now, and if so counts
// it as probed. A process probes at most MaxServers servers: past them, a
// new one is never due.
func dueProbe(server string, now time.Time) bool {
	served.Lock()
	defer served.Unlock()
	if served.probed == nil {
		served.probed = map[string]time.Time{}
	}
	last, ok := served.probed[server]
	if ok && now.Sub(last) < ProbeEvery || !ok && len(served.probed) >= MaxServers {
		return false
	}
	served.probed[server] = now
	return true
}

// probeServedCerts probes, every ProbeEvery while nc is open, every server
// of its configured list (ProbeServer). A connection lives for days, and
// NATS reloads its certificate only when told to (its reloader in
// Kubernetes); only a new handshake shows whether it did, and only one
// with each server shows it for all of them. It returns within a quarter
// of a second of nc's closing, or of the probe under way ending
// (ProbeTimeout at most).
func probeServedCerts(nc *nats.Conn, servers []string, files tlsconf.Files) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		for _, s := range servers {
			if nc.IsClosed() {
				return
			}
			if dueProbe(s, time.Now()) {
				_ = ProbeServer(s, files, ProbeTimeout)
			}
		}
	}
}

// ProbeServer opens a TCP connection to the NATS server at hostport,
// reads its INFO, performs the TLS handshake as a client does (mutual TLS
// with files.Cert, the server's chain verified against files.CA and its
// NATS identity pinned, hop.Pin), records the certificate it presented
// (ServedExpiries; its identity's in hop.PeerExpiries), and closes
// without sending CONNECT: no NATS session, only a handshake. All of it
// within timeout.
func ProbeServer(hostport string, files tlsconf.Files, timeout time.Duration) error {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("natsconn: probe %s: %w", hostport, err)
	}
	roots, err := tlsconf.CertPool(files.CA)
	if err != nil {
		return fmt.Errorf("natsconn: probe %s: %w", hostport, err)
	}
	pin := hop.Pin(hop.Only(hop.NATS))
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: host,
		RootCAs:    roots,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := tlsconf.LoadKeyPair(files.Cert, files.Key)
			return &c, err
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 {
				recordServed(hostport, cs.VerifiedChains[0][0].NotAfter)
			}
			return pin(cs)
		},
	}
	conn, err := net.DialTimeout("tcp", hostport, timeout)
	if err != nil {
		return fmt.Errorf("natsconn: probe %s: %w", hostport, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return fmt.Errorf("natsconn: probe %s: %w", hostport, err)
	}
	if err := readInfo(conn); err != nil {
		return fmt.Errorf("natsconn: probe %s: %w", hostport, err)
	}
	tc := tls.Client(conn, cfg)
	if err := tc.Handshake(); err != nil {
		return fmt.Errorf("natsconn: probe %s: %w", hostport, err)
	}
	return tc.Close()
}

// readInfo reads the server's INFO line, byte by byte so that nothing of
// the handshake that follows is consumed.
func readInfo(conn net.Conn) error {
	line := make([]byte, 0, 1024)
	b := make([]byte, 1)
	for len(line) < maxInfo {
		if _, err := conn.Read(b); err != nil {
			return fmt.Errorf("reading INFO: %w", err)
		}
		line = append(line, b[0])
		if b[0] == '\n' {
			if !strings.HasPrefix(string(line), "INFO ") {
				return fmt.Errorf("want INFO, got %q", strings.TrimSpace(string(line)))
			}
			return nil
		}
	}
	return fmt.Errorf("INFO longer than %d bytes", maxInfo)
}
