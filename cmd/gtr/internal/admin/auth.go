package admin

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/cmd/gtr/internal/audit"
	"github.com/cellpay/cellpay/internal/operators"
)

// TokenHeader is the metadata key carrying "Bearer <token>".
const TokenHeader = "authorization"

// Auth authenticates every call on the admin listener against the
// operators' credentials and authorizes it against the policy table: a
// missing or unknown token is UNAUTHENTICATED, a role below the method's
// PERMISSION_DENIED (naming the role needed, never the token), a method
// not in the policy PERMISSION_DENIED for everyone. gRPC health is the one
// service reachable without a token, so that probes need no secret. A
// failed login, here or at the console (Login), is audited, and an
// address with too many of them is refused for a while
// (RESOURCE_EXHAUSTED) before its token is looked at (logins.go).
type Auth struct {
	ix    atomic.Pointer[operators.Index]
	fails *failures
	// ExemptLoopback: an address of this host is audited when it fails
	// but never refused for it. Off by default, and in Kubernetes, where
	// kubectl port-forward arrives from loopback on behalf of anyone the
	// cluster lets forward; the GTR sets it when told to
	// (-admin-throttle-loopback=false), for a machine whose tests share
	// 127.0.0.1.
	ExemptLoopback bool
	// denied, if set, records refused calls in the audit log.
	denied func(ctx context.Context, rec audit.Record)
	// OnFailure, if set, counts a failed login by reason (missing_token,
	// invalid_token) and a call refused for too many (throttled).
	OnFailure func(reason string)
}

// NewAuth returns an Auth for ix; nil or empty refuses every call.
func NewAuth(ix *operators.Index) *Auth {
	a := &Auth{fails: newFailures(time.Now)}
	a.ix.Store(ix)
	return a
}

// Login authenticates an operator's token for the console's login, from
// the client address remote ("host:port"), with the same throttle and
// audit as the admin API's calls: operators.ErrThrottled, or the error of a token
// that is not an operator's.
func (a *Auth) Login(ctx context.Context, tok, remote string) (operators.Operator, error) {
	src := sourceOf(remote)
	if left, locked := a.locked(src); locked {
		a.count("throttled")
		return operators.Operator{}, fmt.Errorf("%w: retry in %v", operators.ErrThrottled, left.Round(time.Second))
	}
	op, err := a.Authenticate(tok)
	if err != nil || tok == "" {
		a.loginFailed(ctx, "ConsoleLogin", src, "invalid_token", "invalid operator token")
		return operators.Operator{}, operators.ErrUnauthenticated
	}
	return op, nil
}

func (a *Auth) count(reason string) {
	if a.OnFailure != nil {
		a.OnFailure(reason)
	}
}

// locked reports whether src is refused for its failed logins now, and
// for how much longer. A source with no IP address is an in-process
// connection (the console's, over bufconn, shared by every session: its
// logins are throttled at Login, by the browser's address), never
// refused: one operator's revoked token must not lock out every other.
func (a *Auth) locked(src string) (time.Duration, bool) {
	ip, err := netip.ParseAddr(src)
	if err != nil || a.ExemptLoopback && ip.IsLoopback() {
		return 0, false
	}
	return a.fails.locked(src)
}

// loginFailed counts and audits (within the audit's budget) a failed
// login from src. The record names the address, never the token.
func (a *Auth) loginFailed(ctx context.Context, method, src, reason, why string) {
	a.count(reason)
	record, suppressed := a.fails.fail(src)
	if !record || a.denied == nil {
		return
	}
	msg := why + " (from " + src
	if suppressed > 0 {
		msg += fmt.Sprintf("; %d failed logins before this one not recorded", suppressed)
	}
	a.denied(context.WithoutCancel(ctx), audit.Record{Method: shortName(method), Outcome: codes.Unauthenticated.String(), Error: msg + ")"})
}

// SetIndex replaces the operators' credentials, for calls from now on (a
// reloaded operators file); a call being served keeps the ones it was
// checked with.
func (a *Auth) SetIndex(ix *operators.Index) { a.ix.Store(ix) }

type operatorKey struct{}

// OperatorFrom is the operator a call authenticated as.
func OperatorFrom(ctx context.Context) (operators.Operator, bool) {
	op, ok := ctx.Value(operatorKey{}).(operators.Operator)
	return op, ok
}

func (a *Auth) check(ctx context.Context, method string, req any) (context.Context, error) {
	need, open := required(method)
	if open {
		return ctx, nil
	}
	ix := a.ix.Load()
	if ix == nil || ix.Len() == 0 {
		return nil, status.Error(codes.Unauthenticated, "admin API disabled: this GTR has no operators configured")
	}
	src := unknownSourceIP
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		src = sourceOf(p.Addr.String())
	}
	if left, locked := a.locked(src); locked {
		a.count("throttled")
		return nil, status.Errorf(codes.ResourceExhausted, "%v: retry in %v", operators.ErrThrottled, left.Round(time.Second))
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(TokenHeader)
	if len(vals) != 1 {
		a.loginFailed(ctx, method, src, "missing_token", "missing operator token")
		return nil, status.Error(codes.Unauthenticated, "missing operator token (authorization: Bearer <token>)")
	}
	tok, ok := strings.CutPrefix(vals[0], "Bearer ")
	op, err := ix.Authenticate(tok)
	if err != nil || !ok {
		a.loginFailed(ctx, method, src, "invalid_token", "invalid operator token")
		return nil, status.Error(codes.Unauthenticated, "invalid operator token")
	}
	if op.Role < need {
		err := status.Error(codes.PermissionDenied, deniedMessage(method, need, op))
		if a.denied != nil {
			a.denied(ctx, audit.Record{Actor: op.ID, Role: op.Role.String(), Method: shortName(method), Request: requestJSON(req),
				Outcome: codes.PermissionDenied.String(), Error: status.Convert(err).Message()})
		}
		return nil, err
	}
	return context.WithValue(ctx, operatorKey{}, op), nil
}

func deniedMessage(method string, need operators.Role, op operators.Operator) string {
	if need > operators.RoleAdmin {
		return fmt.Sprintf("%s is not in the admin API's policy: nobody may call it", method)
	}
	return fmt.Sprintf("%s needs role %s; operator %q has role %s", shortName(method), need, op.ID, op.Role)
}

// Unary is the unary server interceptor.
func (a *Auth) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := a.check(ctx, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// Stream is the stream server interceptor (health Watch, reflection).
func (a *Auth) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if _, err := a.check(ss.Context(), info.FullMethod, nil); err != nil {
		return err
	}
	return handler(srv, ss)
}

// ServerOptions install the interceptors of authentication alone, for a
// listener without the Admin service; Server.ServerOptions adds the audit.
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

// Authenticate is the operator a token belongs to, by the credentials in
// force: for the operator console's login, which then calls this API with
// the same token, so that every call is checked here again.
func (a *Auth) Authenticate(tok string) (operators.Operator, error) {
	ix := a.ix.Load()
	if ix == nil {
		return operators.Operator{}, operators.ErrUnauthenticated
	}
	return ix.Authenticate(tok)
}

// Allowed reports whether role may call the Admin method name ("Drain")
// by the policy table: for clients that show an operator only what it may
// do. It decides nothing; the interceptors do.
func Allowed(role operators.Role, name string) bool {
	need, ok := policy[name]
	return ok && role >= need
}
