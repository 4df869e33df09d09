// Package auth authenticates partners on the GTR's partners' listener.
//
// Every cellpay.v1.Payments call carries `authorization: Bearer <api key>`.
// The key is looked up in the partner registry's compiled index (never
// blocking, never allocating a lock), and the call may act only for the
// partner the key belongs to: a SubmitTransaction whose partner_id is
// another partner's, or a partner that is suspended, is PERMISSION_DENIED;
// no key or a wrong one is UNAUTHENTICATED. A capture, void or refund
// acts on the partner's own authorization in a market it may use. A read
// (GetTransaction, ListTransactions, GetStatement) without a partner_id
// is read for the authenticated partner. A Payments method this package
// does not know is refused. gRPC health and reflection answer without a
// key.
//
// Nothing here logs, counts or returns a key; the key ID (the public half)
// is all that is ever named.
package auth

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/pkg/api/apierr"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// PaymentsPrefix is the method prefix of the calls that need a key.
const PaymentsPrefix = "/cellpay.v1.Payments/"

// Partners authenticates calls against the registry Index returns.
type Partners struct {
	// Index returns the registry in force; it must not block, and never
	// returns nil.
	Index func() *partners.Index
	// OnDenied, if set, is told of every refused call with the gRPC code
	// and a reason word (no key material); it must not block.
	OnDenied func(code codes.Code, reason string)
}

type ctxKey struct{}

// PartnerFrom returns the authenticated partner of a call.
func PartnerFrom(ctx context.Context) (*partners.Partner, bool) {
	p, ok := ctx.Value(ctxKey{}).(*partners.Partner)
	return p, ok
}

// WithPartner returns ctx carrying p as the authenticated partner, as the
// interceptor does; for tests of handlers.
func WithPartner(ctx context.Context, p *partners.Partner) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// Errors, as the partner sees them. Messages name the field, never a key.
var (
	errNoKey       = apierr.Error(codes.Unauthenticated, apierr.APIKeyMissing, "authorization: missing API key (want \"authorization: Bearer <api key>\")")
	errBadKey      = apierr.Error(codes.Unauthenticated, apierr.APIKeyInvalid, "authorization: invalid API key")
	errSuspended   = apierr.Error(codes.PermissionDenied, apierr.PartnerSuspended, "partner_id: the partner is suspended")
	errNotYours    = apierr.Error(codes.PermissionDenied, apierr.PartnerMismatch, "partner_id: not the partner of this API key")
	errMarket      = apierr.Error(codes.PermissionDenied, apierr.MarketNotEnabled, "market: not enabled for this partner")
	errPaymentType = apierr.Error(codes.PermissionDenied, apierr.PaymentTypeNotEnabled, "payment_type: not enabled for this partner")
)

// ServerOptions returns the interceptors to install on the partners'
// gRPC server.
func (a *Partners) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(a.unary),
		grpc.ChainStreamInterceptor(a.stream),
	}
}

func (a *Partners) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !strings.HasPrefix(info.FullMethod, PaymentsPrefix) {
		return handler(ctx, req)
	}
	p, err := a.authenticate(ctx)
	if err == nil {
		err = authorize(p, req)
	}
	if err != nil {
		if a.OnDenied != nil {
			a.OnDenied(status.Code(err), reason(err))
		}
		return nil, err
	}
	return handler(WithPartner(ctx, p), req)
}

// stream refuses every streaming Payments method: there are none, and one
// added later must not slip past authentication.
func (a *Partners) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if strings.HasPrefix(info.FullMethod, PaymentsPrefix) {
		return status.Error(codes.Unimplemented, "streaming Payments methods are not served")
	}
	return handler(srv, ss)
}

func (a *Partners) authenticate(ctx context.Context) (*partners.Partner, error) {
	return a.byKey(metadata.ValueFromIncomingContext(ctx, "authorization")) // copies this key's values, not every header
}

// FromHeader authenticates a call from its headers alone, for a gRPC tap
// handle (admission's), which runs before gRPC makes a stream or decodes
// the request: it returns the partner whose API key the headers carry, or
// the error the interceptor would give for no key, a wrong one or a
// suspended partner (told to OnDenied like the interceptor's), so that a
// flood of calls with bad keys is refused as cheaply as a known
// partner's excess. The interceptor still authenticates and authorizes
// every call the tap passes; what needs the request (the partner_id, the
// market, the payment type) is checked there.
func (a *Partners) FromHeader(md metadata.MD) (*partners.Partner, error) {
	p, err := a.byKey(md.Get("authorization"))
	if err != nil && a.OnDenied != nil {
		a.OnDenied(status.Code(err), reason(err))
	}
	return p, err
}

// byKey authenticates the values of a call's authorization header.
func (a *Partners) byKey(vals []string) (*partners.Partner, error) {
	if len(vals) == 0 {
		return nil, errNoKey
	}
	if len(vals) > 1 {
		return nil, errBadKey
	}
	scheme, key, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return nil, errBadKey
	}
	p, err := a.Index().Authenticate(strings.TrimSpace(key))
	switch {
	case errors.Is(err, partners.ErrSuspended):
		return nil, errSuspended
	case err != nil:
		return nil, errBadKey
	}
	return p, nil
}

// authorize checks that req acts for p, and only where p may act.
func authorize(p *partners.Partner, req any) error {
	switch r := req.(type) {
	case *cellpayv1.SubmitTransactionRequest:
		return actFor(p, r.GetPartnerId(), r.GetMarket(), r.GetPaymentType())
	case *cellpayv1.GetTransactionRequest:
		return readFor(p, &r.PartnerId)
	case *cellpayv1.ListTransactionsRequest:
		return readFor(p, &r.PartnerId)
	case *cellpayv1.GetStatementRequest:
		return readFor(p, &r.PartnerId)
	case followUp:
		// A capture, void or refund acts on the partner's own
		// authorization, in a market it may use for authorizations.
		return actFor(p, r.GetPartnerId(), r.GetMarket(), cellpayv1.PaymentType_CARD_AUTHORIZATION)
	}
	// A Payments method this function does not know acts for no one:
	// refused rather than let through unchecked.
	return errNotYours
}

// actFor checks a call that makes a transaction: for p itself, in a market
// and of a payment type p may use.
func actFor(p *partners.Partner, partnerID, market string, pt cellpayv1.PaymentType) error {
	if partnerID != p.ID {
		return errNotYours
	}
	field, ok := p.Allows(market, pt.String())
	switch {
	case ok:
		return nil
	case field == "market":
		return errMarket
	}
	return errPaymentType
}

// readFor checks a read's partner_id: empty reads for the caller (it is
// set to p), another partner's is refused.
func readFor(p *partners.Partner, partnerID *string) error {
	switch *partnerID {
	case "":
		*partnerID = p.ID
	case p.ID:
	default:
		return errNotYours
	}
	return nil
}

// followUp is what the capture, void and refund requests have in common.
type followUp interface {
	GetPartnerId() string
	GetMarket() string
	GetOriginalTransactionId() string
}

func reason(err error) string {
	switch err {
	case errNoKey:
		return "no_key"
	case errBadKey:
		return "bad_key"
	case errSuspended:
		return "suspended"
	case errNotYours:
		return "other_partner"
	case errMarket:
		return "market"
	case errPaymentType:
		return "payment_type"
	}
	return "other"
}
