package hop

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cellpay/cellpay/internal/tlsconf"
)

// Dialer dials the internal hops with mutual TLS as one identity (its
// certificate reloaded from its files, tlsconf.MutualClientConfig) and
// pins each peer's identity: a peer whose verified certificate does not
// carry the identity the caller expects is refused at the handshake. Host
// names alone would let any certificate of the CA stand in for any peer
// (a namespace that may obtain one, in Kubernetes); the identity says
// which peer it is.
type Dialer struct {
	cfg *tls.Config // nil: plaintext
}

// NewDialer returns the dialer of files' identity, or a plaintext one
// when no file is named (a component reaches that only through
// -insecure-plaintext, RequireTLS). The func stops the certificate's
// reloading.
func NewDialer(files tlsconf.Files) (*Dialer, func(), error) {
	if !files.Set() {
		return &Dialer{}, func() {}, nil
	}
	cfg, stop, err := tlsconf.MutualClientConfig(files, 0)
	if err != nil {
		return nil, nil, err
	}
	return &Dialer{cfg: cfg}, stop, nil
}

// To is the transport to a peer whose identity want accepts (Only(GTR),
// Only(Cell(id)), IsCell). Each handshake records the served
// certificate's expiry under the peer's identity (PeerExpiries).
func (d *Dialer) To(want func(identity string) bool) grpc.DialOption {
	if d.cfg == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	cfg := d.cfg.Clone()
	cfg.VerifyConnection = Pin(want)
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg))
}

// DialOption is NewDialer(files).To(want): the transport to one kind of
// peer.
func DialOption(files tlsconf.Files, want func(identity string) bool) (grpc.DialOption, func(), error) {
	d, stop, err := NewDialer(files)
	if err != nil {
		return nil, nil, err
	}
	return d.To(want), stop, nil
}

// Pin is a tls.Config.VerifyConnection for a client: after the chain and
// host name are verified, the server's certificate must carry an identity
// that want accepts. It records the certificate's expiry (PeerExpiries)
// whether or not the identity is accepted: what a peer serves is worth
// watching either way.
func Pin(want func(identity string) bool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		who := cs.ServerName
		if who == "" {
			who = "the server"
		}
		if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
			return fmt.Errorf("hop: %s: no verified certificate to pin", who)
		}
		leaf := cs.VerifiedChains[0][0]
		id := certIdentity(leaf)
		if id == "" {
			return fmt.Errorf("hop: %s presented a certificate with no identity of %s", who, Domain)
		}
		peers.observe(id, leaf.NotAfter)
		if !want(id) {
			return fmt.Errorf("hop: %s presented identity %s, not the peer dialled", who, id)
		}
		return nil
	}
}

// maxPeers bounds the identities whose expiry a process remembers: a
// process has a handful of peers (a GTR: one per cell), and identities
// come only from certificates the CA signed.
const maxPeers = 1024

// expiries is what the process's clients were last served, by peer
// identity.
type expiries struct {
	mu sync.Mutex
	m  map[string]time.Time
}

var peers = &expiries{m: map[string]time.Time{}}

func (e *expiries) observe(id string, notAfter time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.m[id]; !ok && len(e.m) >= maxPeers {
		return
	}
	e.m[id] = notAfter
}

// PeerExpiry is when the certificate a peer last served to this process
// expires.
type PeerExpiry struct {
	Identity string
	NotAfter time.Time
}

// PeerExpiries lists, by identity, the expiry of the certificate each
// peer this process dialled last served (telemetry exports it as
// cellpay_tls_peer_not_after_seconds{peer}): the certificate each
// endpoint actually serves, not the one its issuer last wrote, so a
// renewal that a server never loaded shows here.
func PeerExpiries() []PeerExpiry {
	peers.mu.Lock()
	defer peers.mu.Unlock()
	out := make([]PeerExpiry, 0, len(peers.m))
	for id, t := range peers.m {
		out = append(out, PeerExpiry{id, t})
	}
	slices.SortFunc(out, func(a, b PeerExpiry) int { return strings.Compare(a.Identity, b.Identity) })
	return out
}

// DialFrom dials TCP from the local address ip (a host on several
// networks: the one a connection must leave from).
func DialFrom(ip net.IP) grpc.DialOption {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	})
}
