// Package natsconn opens the NATS connection of a component (a cell's
// reference data consumer and transaction directory, the GTR's KV
// replicas, report watcher and audit log, the replicator), with the
// options they all need: start without waiting for NATS, reconnect
// forever, fail fast, and, with TLS files, the component's certificate as
// its NATS identity (package natsauth).
package natsconn

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/natsauth"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// Connect connects to url as name: one server, or a cluster's servers
// comma-separated (tls://a,tls://b,tls://c), any of which it may use. It
// returns at once even when NATS is down (the connection retries in the
// background, without end, every 250 ms, moving to another server); each
// request times out after a second. A server that stops answering (frozen,
// cut off without a reset) is given up after three unanswered pings 2 s
// apart (6 to 8 s: fewer would risk giving up a server merely short of
// CPU on a loaded host), and the connection moves to another: the default
// (two minutes a ping) would leave a component on a frozen server for
// minutes. With files set, it speaks TLS, trusting only files.CA, and
// presents files.Cert, read again at every (re)connect, so that a renewed
// certificate is used from the next connection on; its replies come to the
// certificate identity's own inbox prefix. opts come after the defaults,
// so they may override them. With files set, the process also handshakes
// every ProbeEvery with each server of url's list, to watch the
// certificate each presents (ServedExpiries).
func Connect(url, name string, files tlsconf.Files, opts ...nats.Option) (*nats.Conn, error) {
	base := []nats.Option{
		nats.Name(name),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(time.Second),
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(3),
	}
	tlsOpts, err := TLSOptions(files)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(url, append(append(base, tlsOpts...), opts...)...)
	if err == nil && tlsOpts != nil {
		go probeServedCerts(nc, Servers(url), files)
	}
	return nc, err
}

// PingInterval is how often a connection pings its server.
const PingInterval = 2 * time.Second

// TLSOptions are the options that make a connection present files.Cert
// and trust only files.CA, both read from their files at every TLS
// handshake (every connect and reconnect: nats.go calls the callbacks of
// nats.ClientTLSConfig each time), with the inbox prefix of the
// certificate's identity; none when files are not set. The server must
// present the NATS servers' identity (hop.NATS), not merely a certificate
// of the CA for its host. A certificate
// replaced in place (cert-manager, Platform.RotateCertificates) is thus
// presented from the next reconnect on; the identity, and so the inbox
// prefix, must stay the same.
func TLSOptions(files tlsconf.Files) ([]nats.Option, error) {
	if !files.Set() {
		return nil, nil
	}
	if files.Cert == "" || files.Key == "" || files.CA == "" {
		return nil, fmt.Errorf("natsconn: TLS needs a certificate, a key and a CA file")
	}
	pair, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		return nil, fmt.Errorf("natsconn: certificate %s: %w", files.Cert, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("natsconn: certificate %s: %w", files.Cert, err)
	}
	id := hop.CertIdentity(leaf)
	if id == "" {
		return nil, fmt.Errorf("natsconn: certificate %s has no identity in %s", files.Cert, hop.Domain)
	}
	if _, err := tlsconf.CertPool(files.CA); err != nil {
		return nil, err
	}
	return []nats.Option{
		// First: ClientTLSConfig keeps this configuration and adds the
		// certificate and CA to a copy at each handshake.
		nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12, VerifyConnection: hop.Pin(hop.Only(hop.NATS))}),
		nats.ClientTLSConfig(
			func() (tls.Certificate, error) { return tlsconf.LoadKeyPair(files.Cert, files.Key) },
			func() (*x509.CertPool, error) { return tlsconf.CertPool(files.CA) }),
		nats.CustomInboxPrefix(natsauth.InboxPrefix(id)),
	}, nil
}
