package tlsconf

import (
	"context"
	"crypto/x509"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/credentials/tls/certprovider"
)

// servers are the certificate providers of this process's TLS servers,
// read at each collection (Served): a process has a few listeners, and
// each adds its provider once, at start, and takes it out when it stops.
var servers struct {
	mu    sync.Mutex
	provs map[certprovider.Provider]bool
}

func serving(prov certprovider.Provider) func() {
	servers.mu.Lock()
	defer servers.mu.Unlock()
	if servers.provs == nil {
		servers.provs = map[certprovider.Provider]bool{}
	}
	servers.provs[prov] = true
	return func() {
		servers.mu.Lock()
		defer servers.mu.Unlock()
		delete(servers.provs, prov)
	}
}

// ServedCert is a certificate one of this process's servers presents now.
type ServedCert struct {
	// Name is the certificate's first URI SAN (its SPIFFE identity), or
	// else its first DNS name, or else its subject's common name.
	Name     string
	NotAfter time.Time
}

// Served lists the certificates this process's TLS servers (ServerConfig,
// MutualServerConfig) present to a new connection now, as reloaded from
// their files; telemetry exports them as
// cellpay_tls_served_not_after_seconds{certificate}. One name is listed
// once, with its earliest expiry.
func Served() []ServedCert {
	servers.mu.Lock()
	provs := make([]certprovider.Provider, 0, len(servers.provs))
	for p := range servers.provs {
		provs = append(provs, p)
	}
	servers.mu.Unlock()
	byName := map[string]time.Time{}
	for _, p := range provs {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		km, err := p.KeyMaterial(ctx)
		cancel()
		if err != nil || len(km.Certs) == 0 || len(km.Certs[0].Certificate) == 0 {
			continue
		}
		leaf := km.Certs[0].Leaf
		if leaf == nil {
			if leaf, err = x509.ParseCertificate(km.Certs[0].Certificate[0]); err != nil {
				continue
			}
		}
		name := certName(leaf)
		if t, ok := byName[name]; !ok || leaf.NotAfter.Before(t) {
			byName[name] = leaf.NotAfter
		}
	}
	out := make([]ServedCert, 0, len(byName))
	for n, t := range byName {
		out = append(out, ServedCert{n, t})
	}
	slices.SortFunc(out, func(a, b ServedCert) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func certName(c *x509.Certificate) string {
	switch {
	case len(c.URIs) > 0:
		return c.URIs[0].String()
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	}
	return c.Subject.CommonName
}
