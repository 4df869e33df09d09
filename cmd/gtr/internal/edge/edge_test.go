package edge

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestPlatformErrorsAreGeneric(t *testing.T) {
	var logs bytes.Buffer
	ic := UnaryInterceptor("/cellpay.v1.Payments/", slog.New(slog.NewJSONHandler(&logs, nil)))
	info := &grpc.UnaryServerInfo{FullMethod: "/cellpay.v1.Payments/SubmitTransaction"}
	for _, c := range []struct {
		err     error
		generic bool
	}{
		{status.Error(codes.Unavailable, "no cell could take the transaction: cell cell-b: dial tcp 10.1.2.3:7081: connection refused"), true},
		{status.Error(codes.Internal, "pq: relation transactions does not exist"), true},
		{status.Error(codes.DeadlineExceeded, "not enough time left for another attempt; last: cell cell-a: timeout"), true},
		{status.Error(codes.InvalidArgument, "amount.minor_units: must be > 0"), false},
		{status.Error(codes.AlreadyExists, "transaction_id: already used with a different payload"), false},
		{status.Error(codes.ResourceExhausted, "partner rate limit reached"), false},
	} {
		logs.Reset()
		_, err := ic(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, c.err })
		in, out := status.Convert(c.err), status.Convert(err)
		if out.Code() != in.Code() {
			t.Errorf("%v: code changed to %v", in.Code(), out.Code())
		}
		if !c.generic {
			if out.Message() != in.Message() {
				t.Errorf("%v: an answer about the request was rewritten: %q", in.Code(), out.Message())
			}
			continue
		}
		for _, leak := range []string{"cell-", "10.1.2.3", "pq:", "dial tcp"} {
			if strings.Contains(out.Message(), leak) {
				t.Errorf("%v: the partner sees %q: %q", in.Code(), leak, out.Message())
			}
		}
		i := strings.Index(out.Message(), "(reference ")
		if i < 0 {
			t.Fatalf("%v: no reference in %q", in.Code(), out.Message())
		}
		ref := strings.TrimSuffix(out.Message()[i+len("(reference "):], ")")
		if !strings.Contains(logs.String(), ref) || !strings.Contains(logs.String(), in.Message()) {
			t.Errorf("%v: the log lacks the reference %s with the details: %s", in.Code(), ref, logs.String())
		}
	}
	// Other services pass untouched.
	other := &grpc.UnaryServerInfo{FullMethod: "/grpc.health.v1.Health/Check"}
	orig := status.Error(codes.Unavailable, "detail")
	if _, err := ic(context.Background(), nil, other, func(context.Context, any) (any, error) { return nil, orig }); err != orig {
		t.Errorf("a non-Payments error was rewritten: %v", err)
	}
}
