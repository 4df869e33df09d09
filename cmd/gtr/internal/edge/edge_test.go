package edge

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/cmd/gtr/internal/refusals"
	"github.com/cellpay/cellpay/pkg/api/apierr"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

func TestPlatformErrorsAreGeneric(t *testing.T) {
	var logs bytes.Buffer
	var served []string
	kept := refusals.New(nil)
	ic := UnaryInterceptor("/cellpay.v1.Payments/", slog.New(slog.NewJSONHandler(&logs, nil)), func(m string, d time.Duration) {
		if d < 0 {
			t.Errorf("%s took %v", m, d)
		}
		served = append(served, m)
	}, kept)
	req := &cellpayv1.SubmitTransactionRequest{PartnerId: "p-1", TransactionId: "t-1"}
	info := &grpc.UnaryServerInfo{FullMethod: "/cellpay.v1.Payments/SubmitTransaction"}
	defer func() {
		if len(served) != 7 || served[0] != "SubmitTransaction" {
			t.Errorf("served told of %v, want SubmitTransaction, once per call", served)
		}
	}()
	for _, c := range []struct {
		err     error
		generic bool
		reason  apierr.Reason
	}{
		{status.Error(codes.Unavailable, "no cell could take the transaction: cell cell-b: dial tcp 10.1.2.3:7081: connection refused"), true, apierr.Unavailable},
		{apierr.Error(codes.Unavailable, apierr.NoRoute, "no cell can take transactions for rule r"), true, apierr.NoRoute},
		{status.Error(codes.Internal, "pq: relation transactions does not exist"), true, apierr.Internal},
		{status.Error(codes.DeadlineExceeded, "not enough time left for another attempt; last: cell cell-a: timeout"), true, apierr.DeadlineExceeded},
		{status.Error(codes.InvalidArgument, "amount.minor_units: must be > 0"), false, apierr.InvalidRequest},
		{status.Error(codes.AlreadyExists, "transaction_id: already used with a different payload"), false, apierr.TransactionIDReused},
		{apierr.Error(codes.ResourceExhausted, apierr.RateLimited, "partner rate limit reached"), false, apierr.RateLimited},
	} {
		logs.Reset()
		_, err := ic(context.Background(), req, info, func(context.Context, any) (any, error) { return nil, c.err })
		in, out := status.Convert(c.err), status.Convert(err)
		if out.Code() != in.Code() {
			t.Errorf("%v: code changed to %v", in.Code(), out.Code())
		}
		id := apierr.RequestIDOf(err)
		if got := apierr.ReasonOf(err); got != c.reason || id == "" {
			t.Errorf("%v: reason %q, request ID %q; want %s and an ID", in.Code(), got, id, c.reason)
		}
		if !strings.Contains(logs.String(), id) {
			t.Errorf("%v: the log lacks the request ID %s: %s", in.Code(), id, logs.String())
		}
		// Kept under its reference as the platform saw it, the detail
		// included, with the call's partner and transaction.
		if r, ok := kept.Find(id); !ok || r.Message != in.Message() || r.Code != in.Code().String() || r.PartnerID != "p-1" ||
			r.TransactionID != "t-1" || r.Method != info.FullMethod || r.Reason != string(c.reason) {
			t.Errorf("%v: kept as %+v (%v)", in.Code(), r, ok)
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
		if ref != id {
			t.Errorf("%v: the message's reference %s is not the request ID %s", in.Code(), ref, id)
		}
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
