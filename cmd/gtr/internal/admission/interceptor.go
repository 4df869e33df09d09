package admission

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cellpay/cellpay/cmd/gtr/internal/auth"
	"github.com/cellpay/cellpay/cmd/gtr/internal/refusals"
	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/pkg/api/apierr"
)

// PushbackKey is the trailer that tells a gRPC client how long to wait
// before a retry (gRFC A6).
const PushbackKey = "grpc-retry-pushback-ms"

// Shed returns the error a partner gets for a request refused before it
// reached any cell: RESOURCE_EXHAUSTED with reason (apierr.Overloaded,
// RateLimited or TooManyInFlight), saying that a retry under the same
// transaction ID is safe, with the retry hint in the trailer and as a
// google.rpc.RetryInfo detail.
func Shed(ctx context.Context, reason apierr.Reason, what string, retryAfter time.Duration) error {
	st := shedStatus(reason, what, retryAfter)
	_ = grpc.SetTrailer(ctx, metadata.Pairs(PushbackKey, strconv.FormatInt(retryMillis(retryAfter), 10)))
	return st.Err()
}

func retryMillis(d time.Duration) int64 { return max(1, d.Milliseconds()) }

// shedStatus is Shed's status: its message, and the retry hint as a
// RetryInfo detail, which is all a tap handle's answer can carry (it has
// no trailers).
func shedStatus(reason apierr.Reason, what string, retryAfter time.Duration) *status.Status {
	ms := retryMillis(retryAfter)
	st := apierr.New(codes.ResourceExhausted, reason, fmt.Sprintf(
		"%s; the request was not sent to any cell: retry it unchanged, under the same transaction_id, after %d ms", what, ms))
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(ms) * time.Millisecond)}); err == nil {
		st = d
	}
	return st
}

// refusal is what a partner is told for a refused verdict, and why.
func refusal(v Verdict) (apierr.Reason, string) {
	if v.Reason == "in_flight" {
		return apierr.TooManyInFlight, "too many of this partner's requests in flight"
	}
	return apierr.RateLimited, "partner rate limit reached"
}

type tapKey struct{}

// Tap returns the partners' listener's tap handle (grpc.InTapHandle): it
// refuses a Payments call of a partner over its rate or at its in-flight
// cap from the call's headers alone, before gRPC makes a stream, decodes
// the request or runs the stats handler and the interceptors: 0.61 of
// the CPU of a refusal in UnaryInterceptor, client and server together
// (BenchmarkRefusal, docs/benchmarks/log/overload.md). Its
// answer carries the retry hint as a RetryInfo detail and in the message,
// not in the grpc-retry-pushback-ms trailer: an early answer has none.
// who authenticates the call from its headers (auth's FromHeader): a
// call with no key, a wrong one or of a suspended partner is refused here
// with who's error (UNAUTHENTICATED or PERMISSION_DENIED), never decoded,
// so that a flood of bad keys costs no more than a known partner's
// excess; what needs the request is checked by the interceptors. onShed
// is told of every refusal. The rate token a passed call took is used by
// UnaryInterceptor, which still counts the call in flight.
//
// Before the partner's own limits, the tap refuses a call the GTR-wide
// limit would refuse now (router: CellLimit.WouldRefuse, with the
// partner's fair share when router.FairShare), so that under overload the
// excess costs no more than a refusal of a partner over its rate. A call
// it passes is admitted, or refused, by the GTR-wide limit itself.
func (a *Partners) Tap(who func(metadata.MD) (*partners.Partner, error), router RouterLimit, onShed func(reason string)) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if a.disabled || !strings.HasPrefix(info.FullMethodName, auth.PaymentsPrefix) {
			return ctx, nil
		}
		p, err := who(info.Header)
		if err != nil {
			return nil, a.tapRefusal(info.FullMethodName, "", status.Convert(err))
		}
		if router.wouldRefuse(a, p.ID) {
			if onShed != nil {
				onShed("gtr_busy")
			}
			return nil, a.tapRefusal(info.FullMethodName, p.ID, shedStatus(apierr.Overloaded, RouterBusy, router.Limit.RetryAfter()))
		}
		r, v := a.peek(p)
		if !v.OK {
			if onShed != nil {
				onShed("partner_" + v.Reason)
			}
			reason, what := refusal(v)
			return nil, a.tapRefusal(info.FullMethodName, p.ID, shedStatus(reason, what, v.RetryAfter))
		}
		return context.WithValue(ctx, tapKey{}, r), nil
	}
}

// tapRefusal is st with a request ID of its own: a call refused by the tap
// never reaches the interceptor that names the others (package edge). It
// is counted (onShed, auth's OnDenied) and logged at a bounded rate
// (LogRefusals), not traced: a flood of them must cost no more than the
// refusal. partner is "" when the key named none.
func (a *Partners) tapRefusal(method, partner string, st *status.Status) error {
	id := apierr.NewRequestID()
	a.LogRefusal(id, method, partner, st)
	return apierr.WithRequestID(st, id).Err()
}

// LogRefusal logs a refusal made before the interceptors (the tap's, or
// the REST gateway's own) under its request ID id, within LogRefusals'
// rate; without LogRefusals it logs nothing.
func (a *Partners) LogRefusal(id, method, partner string, st *status.Status) {
	a.kept.Add(id, method, partner, "", st)
	a.refusals.write(a.now(), id, method, partner, st)
}

// KeepRefusals keeps every refusal made before the interceptors in r,
// under its request ID, whatever the log's rate (package refusals). Call
// it before serving.
func (a *Partners) KeepRefusals(r *refusals.Ring) { a.kept = r }

// LogRefusals logs the refusals made before the interceptors to log, at
// most perSecond a second (bursts of as many); the next line logged says
// how many were not. Call it before serving.
func (a *Partners) LogRefusals(log *slog.Logger, perSecond float64) {
	a.refusals = &refusalLog{log: log, lim: rate.NewLimiter(rate.Limit(perSecond), max(1, int(perSecond)))}
}

// refusalLog logs refusals at a bounded rate, counting the rest.
type refusalLog struct {
	log     *slog.Logger
	lim     *rate.Limiter
	skipped atomic.Int64
}

func (l *refusalLog) write(now time.Time, id, method, partner string, st *status.Status) {
	if l == nil {
		return
	}
	if !l.lim.AllowN(now, 1) {
		l.skipped.Add(1)
		return
	}
	l.log.Info("partner call refused before the interceptors", "request_id", id, "method", method, "partner", partner,
		"code", st.Code().String(), "reason", apierr.ReasonOf(st.Err()), "unlogged_before", l.skipped.Swap(0))
}

// RouterLimit is the GTR-wide limit as the tap sees it: Limit (nil for
// none), and whether a partner within its fair share of it is admitted at
// the limit (FairShare; the partners' in-flight counts are those of the
// Partners the tap belongs to).
type RouterLimit struct {
	Limit     *CellLimit
	FairShare bool
}

// wouldRefuse reports whether the GTR-wide limit would refuse a new call of
// partner id now (the call not yet counted in flight).
func (r RouterLimit) wouldRefuse(a *Partners, id string) bool {
	if r.Limit == nil {
		return false
	}
	mine, active := int64(0), int64(0)
	if r.FairShare {
		mine, active = a.Share(id)
	}
	return r.Limit.WouldRefuse(mine+1, active)
}

// UnaryInterceptor admits each authenticated Payments call against its
// partner's limits. It must run after auth's interceptor; calls that are
// not Payments calls pass. A call Tap passed has its rate token already.
func (a *Partners) UnaryInterceptor(onShed func(reason string)) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !strings.HasPrefix(info.FullMethod, auth.PaymentsPrefix) {
			return handler(ctx, req)
		}
		p, ok := auth.PartnerFrom(ctx)
		if !ok {
			return nil, status.Error(codes.Internal, "admission: call not authenticated")
		}
		token, _ := ctx.Value(tapKey{}).(*rate.Reservation)
		v := a.acquire(p, token)
		if !v.OK {
			if onShed != nil {
				onShed("partner_" + v.Reason)
			}
			reason, what := refusal(v)
			return nil, Shed(ctx, reason, what, v.RetryAfter)
		}
		defer a.Release(p.ID)
		return handler(ctx, req)
	}
}
