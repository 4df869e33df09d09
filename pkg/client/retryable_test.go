package client

import (
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cellpay/cellpay/pkg/api/apierr"
)

// TestRetryable: a shed call is resent, a refusal of the request itself
// is not, however it is coded.
func TestRetryable(t *testing.T) {
	hinted, _ := status.New(codes.ResourceExhausted, "shed").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"rate limited", apierr.Error(codes.ResourceExhausted, apierr.RateLimited, "partner rate limit reached"), true},
		{"in flight", apierr.Error(codes.ResourceExhausted, apierr.TooManyInFlight, "too many"), true},
		{"overloaded", apierr.Error(codes.ResourceExhausted, apierr.Overloaded, "busy"), true},
		{"a hint, no reason (an older GTR)", hinted.Err(), true},
		{"too large", apierr.Error(codes.ResourceExhausted, apierr.RequestTooLarge, "body: over the limit"), false},
		{"gRPC's own size refusal", status.Error(codes.ResourceExhausted, "grpc: received message larger than max (102400 vs. 65536)"), false},
		{"unavailable", status.Error(codes.Unavailable, "no cell"), true},
		{"in progress", status.Error(codes.Aborted, "concurrent"), true},
		{"deadline", status.Error(codes.DeadlineExceeded, "late"), true},
		{"invalid", status.Error(codes.InvalidArgument, "market: required"), false},
		{"reused", status.Error(codes.AlreadyExists, "transaction_id"), false},
	} {
		if got := Retryable(c.err); got != c.want {
			t.Errorf("%s: Retryable = %v, want %v", c.name, got, c.want)
		}
	}
}
