package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/natsconn"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// newCertExpiries registers, on every process, the expiry of the
// certificates it serves and of those its peers served it:
//
//	cellpay_tls_served_not_after_seconds{certificate}   Unix time a certificate this process's servers present now expires
//	cellpay_tls_peer_not_after_seconds{peer}            Unix time the certificate a peer (NATS, a cell, the issuer) last presented to this process expires
//	cellpay_tls_nats_not_after_seconds{server}          Unix time the certificate each NATS server of the configured list (host:port) presented to this process's last probe expires
//
// Both are what is actually presented, not what the issuer last wrote: a
// renewal cert-manager wrote but a server never loaded (NATS without its
// reloader, a stuck pod) shows as the old certificate ageing, where the
// issuer's own record shows the renewal. The peer's is taken at each
// handshake (hop.Pin), and NATS clients handshake afresh every few minutes
// to see it (natsconn), as NATS serves no metric of its certificate. The
// peer's is by identity, which the three NATS servers share; the NATS
// servers' is by address, each server of the configured list probed
// (natsconn.ServedExpiries: at most natsconn.MaxServers of them), so that
// every server's certificate is watched, not only the one a process uses.
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
	nats, err := m.Float64ObservableGauge("cellpay.tls.nats.not_after", metric.WithUnit("s"),
		metric.WithDescription("When the certificate each NATS server of this process's configured list (by host:port) presented to its last probe expires, as Unix time."))
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
		for _, s := range natsconn.ServedExpiries() {
			o.ObserveFloat64(nats, float64(s.NotAfter.Unix()), metric.WithAttributes(attribute.String("server", s.Server)))
		}
		return nil
	}, served, peer, nats)
	return err
}
