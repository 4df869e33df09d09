package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// newCertExpiries registers, on every process, the expiry of the
// certificates it serves and of those its peers served it:
//
//	cellpay_tls_served_not_after_seconds{certificate}   Unix time a certificate this process's servers present now expires
//	cellpay_tls_peer_not_after_seconds{peer}            Unix time the certificate a peer (NATS, a cell, the issuer) last presented to this process expires
//
// Both are what is actually presented, not what the issuer last wrote: a
// renewal cert-manager wrote but a server never loaded (NATS without its
// reloader, a stuck pod) shows as the old certificate ageing, where the
// issuer's own record shows the renewal. The peer's is taken at each
// handshake (hop.Pin), and NATS clients handshake afresh every few minutes
// to see it (natsconn), as NATS serves no metric of its certificate.
func newCertExpiries(m metric.Meter) error {
	served, err := m.Float64ObservableGauge("cellpay.tls.served.not_after", metric.WithUnit("s"),
		metric.WithDescription("When the certificate this process's TLS server presents now expires, by its identity (first URI SAN, else DNS name), as Unix time."))
	if err != nil {
		return err
	}
	peer, err := m.Float64ObservableGauge("cellpay.tls.peer.not_after", metric.WithUnit("s"),
		metric.WithDescription("When the certificate a peer (by its SPIFFE identity) last presented to this process on an internal hop expires, as Unix time."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, s := range tlsconf.Served() {
			o.ObserveFloat64(served, float64(s.NotAfter.Unix()), metric.WithAttributes(attribute.String("certificate", s.Name)))
		}
		for _, p := range hop.PeerExpiries() {
			o.ObserveFloat64(peer, float64(p.NotAfter.Unix()), metric.WithAttributes(attribute.String("peer", p.Identity)))
		}
		return nil
	}, served, peer)
	return err
}
