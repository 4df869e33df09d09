package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TokenHeader is the metadata key carrying "Bearer <token>".
const TokenHeader = "authorization"

// healthPrefix is the one service on the admin listener reachable without
// the token, so that probes need no secret.
const healthPrefix = "/grpc.health.v1.Health/"

// Auth checks the admin token on every call except gRPC health. With an
// empty token nothing is allowed: a GTR started without a token serves no
// admin call at all. Tokens are compared in constant time (over their
// SHA-256, so that neither content nor length leaks through timing).
type Auth struct {
	want [sha256.Size]byte
	set  bool
}

// NewAuth returns an Auth for token; "" refuses every call.
func NewAuth(token string) *Auth {
	return &Auth{want: sha256.Sum256([]byte(token)), set: token != ""}
}

func (a *Auth) check(ctx context.Context, method string) error {
	if strings.HasPrefix(method, healthPrefix) {
		return nil
	}
	if !a.set {
		return status.Error(codes.Unauthenticated, "admin API disabled: this GTR has no admin token configured")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(TokenHeader)
	if len(vals) != 1 {
		return status.Error(codes.Unauthenticated, "missing admin token (authorization: Bearer <token>)")
	}
	tok, ok := strings.CutPrefix(vals[0], "Bearer ")
	got := sha256.Sum256([]byte(tok))
	if subtle.ConstantTimeCompare(got[:], a.want[:]) != 1 || !ok {
		return status.Error(codes.Unauthenticated, "invalid admin token")
	}
	return nil
}

// Unary is the unary server interceptor.
func (a *Auth) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := a.check(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// Stream is the stream server interceptor (health Watch, reflection).
func (a *Auth) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := a.check(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// ServerOptions install the interceptors.
func (a *Auth) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(a.Unary), grpc.ChainStreamInterceptor(a.Stream)}
}

// TokenCredentials is the client side: per-RPC credentials sending the
// token. Insecure transport is allowed because the admin listener is
// loopback or inside the cluster network; put TLS in front otherwise.
type TokenCredentials string

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (t TokenCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{TokenHeader: "Bearer " + string(t)}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (TokenCredentials) RequireTransportSecurity() bool { return false }
