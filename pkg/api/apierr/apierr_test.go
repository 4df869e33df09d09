package apierr

import (
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestReasonAndRequestID(t *testing.T) {
	err := Error(codes.ResourceExhausted, RateLimited, "partner rate limit reached")
	if ReasonOf(err) != RateLimited || RequestIDOf(err) != "" {
		t.Fatalf("New: reason %q, request ID %q", ReasonOf(err), RequestIDOf(err))
	}
	// A request ID keeps the reason, the message and the other details.
	st, _ := status.Convert(err).WithDetails(&errdetails.RetryInfo{})
	named := WithRequestID(st, "0123456789abcdef")
	if ReasonOf(named.Err()) != RateLimited || RequestIDOf(named.Err()) != "0123456789abcdef" ||
		named.Message() != st.Message() || len(named.Details()) != 2 {
		t.Fatalf("WithRequestID: %v", named.Proto())
	}
	// An error with no reason gets its code's.
	plain := WithRequestID(status.New(codes.NotFound, "transaction not found"), "id")
	if ReasonOf(plain.Err()) != TransactionNotFound || Info(plain.Err()).GetDomain() != Domain {
		t.Fatalf("no reason: %v", plain.Proto())
	}
	if ok := WithRequestID(status.New(codes.OK, ""), "id"); len(ok.Details()) != 0 {
		t.Fatal("an OK status got an ErrorInfo")
	}
	if ReasonOf(nil) != "" || RequestIDOf(nil) != "" {
		t.Fatal("nil error has a reason")
	}
}

// TestEveryCodeHasAReason: ForCode names a reason of the set for every
// code.
func TestEveryCodeHasAReason(t *testing.T) {
	known := map[Reason]bool{}
	for _, r := range All() {
		if known[r] {
			t.Fatalf("%s listed twice", r)
		}
		known[r] = true
	}
	for c := codes.Code(1); c <= codes.Unauthenticated; c++ {
		if !known[ForCode(c)] {
			t.Errorf("ForCode(%v) = %q, not in All", c, ForCode(c))
		}
	}
}

func TestNewRequestID(t *testing.T) {
	a, b := NewRequestID(), NewRequestID()
	if len(a) != 16 || a == b {
		t.Fatalf("request IDs %q, %q", a, b)
	}
}
