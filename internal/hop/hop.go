// Package hop secures the platform's internal hops (GTR→cell, cell→issuer):
// mutual TLS with the certificates of package pki, and an authorization
// policy per method on the serving side that names which callers'
// identities may call what.
//
// An identity is the SPIFFE-style URI SAN of a peer's verified certificate:
//
//	spiffe://cellpay.internal/gtr            the GTR (every replica)
//	spiffe://cellpay.internal/cell/<cell ID> a cell
//	spiffe://cellpay.internal/issuer         the issuer (simulator)
//	spiffe://cellpay.internal/ops            operators' and tests' tools
//	spiffe://cellpay.internal/replicator     the reference data replicator (NATS only)
//	spiffe://cellpay.internal/nats-admin     NATS's administrator: the launcher, tests
//	spiffe://cellpay.internal/nats           the NATS servers (their server certificate)
//
// Clients pin the identity of the peer they dial (Dialer.To, Pin), and
// servers authorize their callers' (Policy).
//
// NATS maps the same identities to its users (package natsauth).
//
// The policy is checked in an interceptor before any handler runs, and it
// denies what it does not name: a method added to a service is closed
// until a rule opens it. It never looks at a request's contents.
package hop

import (
	"context"
	"crypto/x509"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Trust domain and identities.
const (
	Domain = "cellpay.internal"
	prefix = "spiffe://" + Domain + "/"
	GTR    = prefix + "gtr"
	Issuer = prefix + "issuer"
	Ops    = prefix + "ops"
	cells  = prefix + "cell/"
	// Replicator publishes reference data; NATSAdmin may do anything on
	// NATS. Neither is served by a gRPC hop.
	Replicator = prefix + "replicator"
	NATSAdmin  = prefix + "nats-admin"
	// NATS is the NATS servers' identity, pinned by their clients.
	NATS = prefix + "nats"
)

// Cell is the identity of the cell id.
func Cell(id string) string { return cells + id }

// CellHost is the DNS name in a cell's certificate besides its addresses,
// e.g. cell-a.cellpay.internal.
func CellHost(id string) string { return id + "." + Domain }

// IsCell reports whether identity is some cell's.
func IsCell(identity string) bool {
	return strings.HasPrefix(identity, cells) && len(identity) > len(cells)
}

// Identity is the caller's identity: the first URI SAN in this domain of
// the certificate that TLS verified, or "" when there is none (plaintext,
// no client certificate, or a certificate of another domain).
func Identity(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return ""
	}
	return certIdentity(info.State.VerifiedChains[0][0])
}

// CertIdentity is the identity in the certificate c (its first URI SAN in
// this domain), or "" when it has none.
func CertIdentity(c *x509.Certificate) string { return certIdentity(c) }

// CellID is the cell ID in a cell's identity, or "" for another identity.
func CellID(identity string) string {
	if !IsCell(identity) {
		return ""
	}
	return identity[len(cells):]
}

func certIdentity(c *x509.Certificate) string {
	for _, u := range c.URIs {
		if s := u.String(); strings.HasPrefix(s, prefix) {
			return s
		}
	}
	return ""
}

// Rule lets the callers that Allow accepts call the methods under Prefix:
// a full method ("/cellpay.cell.v1.Cell/Process") or a service with its
// trailing slash ("/grpc.health.v1.Health/").
type Rule struct {
	Prefix string
	Allow  func(identity string) bool
}

// Policy is a server's rules; the first rule whose prefix matches decides,
// and a method that none matches is denied.
type Policy []Rule

// Only accepts exactly the identities given.
func Only(identities ...string) func(string) bool {
	return func(id string) bool {
		for _, want := range identities {
			if id == want {
				return true
			}
		}
		return false
	}
}

// Anyone accepts every verified caller of the domain.
func Anyone(string) bool { return true }

// Authorize returns nil when the caller in ctx may call method, and an
// Unauthenticated or PermissionDenied status otherwise.
func (p Policy) Authorize(ctx context.Context, method string) error {
	id := Identity(ctx)
	if id == "" {
		return status.Error(codes.Unauthenticated, "hop: no verified client certificate of "+Domain)
	}
	for _, r := range p {
		if strings.HasPrefix(method, r.Prefix) {
			if r.Allow(id) {
				return nil
			}
			break
		}
	}
	return status.Errorf(codes.PermissionDenied, "hop: %s may not call %s", id, method)
}

// ServerOptions are the interceptors that enforce p on every call.
func (p Policy) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := p.Authorize(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := p.Authorize(ss.Context(), info.FullMethod); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}
