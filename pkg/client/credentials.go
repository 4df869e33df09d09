package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// APIKey returns per-call credentials that send key as
// `authorization: Bearer <key>`. They refuse to travel without TLS.
func APIKey(key string) credentials.PerRPCCredentials { return bearer(key) }

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

// TLS returns transport credentials that trust the CA certificates in
// caFile (PEM), or the system's roots when caFile is "".
func TLS(caFile string) (grpc.DialOption, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("client: CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("client: CA: %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg)), nil
}

// errNoPartnerKey is what PartnerKeys answers for a partner it has no key
// for, without sending anything.
var errNoPartnerKey = errors.New("client: no API key for this partner")

// PartnerKeys returns a client interceptor for tools that act for many
// partners over one connection (a load generator, a checker, tests): each
// Payments call carries the API key of the partner its request names
// (partner_id). A call for a partner without a key fails locally with
// UNAUTHENTICATED. keys must not change afterwards.
func PartnerKeys(keys map[string]string) grpc.UnaryClientInterceptor {
	paymentsPrefix := "/" + cellpayv1.Payments_ServiceDesc.ServiceName + "/"
	creds := make(map[string]grpc.CallOption, len(keys))
	for p, k := range keys {
		creds[p] = grpc.PerRPCCredentials(APIKey(k))
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		r, ok := req.(interface{ GetPartnerId() string })
		if !ok || !strings.HasPrefix(method, paymentsPrefix) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		partner := r.GetPartnerId()
		c, ok := creds[partner]
		if !ok {
			return status.Errorf(codes.Unauthenticated, "%v %q", errNoPartnerKey, partner)
		}
		return invoker(ctx, method, req, reply, cc, append(opts, c)...)
	}
}
