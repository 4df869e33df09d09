package admission

import (
	"context"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/cmd/gtr/internal/auth"
)

// PushbackKey is the trailer that tells a gRPC client how long to wait
// before a retry (gRFC A6).
const PushbackKey = "grpc-retry-pushback-ms"

// Shed returns the error a partner gets for a request refused before it
// reached any cell: RESOURCE_EXHAUSTED, saying that a retry under the same
// transaction ID is safe, with the retry hint in the trailer.
func Shed(ctx context.Context, what string, retryAfter time.Duration) error {
	ms := max(1, retryAfter.Milliseconds())
	_ = grpc.SetTrailer(ctx, metadata.Pairs(PushbackKey, strconv.FormatInt(ms, 10)))
	return status.Errorf(codes.ResourceExhausted,
		"%s; the request was not sent to any cell: retry it unchanged, under the same transaction_id, after %d ms", what, ms)
}

// UnaryInterceptor admits each authenticated Payments call against its
// partner's limits. It must run after auth's interceptor; calls that are
// not Payments calls pass.
func (a *Partners) UnaryInterceptor(onShed func(reason string)) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !strings.HasPrefix(info.FullMethod, auth.PaymentsPrefix) {
			return handler(ctx, req)
		}
		p, ok := auth.PartnerFrom(ctx)
		if !ok {
			return nil, status.Error(codes.Internal, "admission: call not authenticated")
		}
		v := a.Acquire(p)
		if !v.OK {
			if onShed != nil {
				onShed("partner_" + v.Reason)
			}
			what := "partner rate limit reached"
			if v.Reason == "in_flight" {
				what = "too many of this partner's requests in flight"
			}
			return nil, Shed(ctx, what, v.RetryAfter)
		}
		defer a.Release(p.ID)
		return handler(ctx, req)
	}
}
