package checker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// failingReads answers GetTransaction with code for its first n calls,
// then with the transaction.
type failingReads struct {
	cellpayv1.PaymentsClient
	code  codes.Code
	n     int64
	calls atomic.Int64
}

func (f *failingReads) GetTransaction(_ context.Context, req *cellpayv1.GetTransactionRequest, _ ...grpc.CallOption) (*cellpayv1.Transaction, error) {
	if f.calls.Add(1) <= f.n {
		return nil, status.Error(f.code, "refused")
	}
	return &cellpayv1.Transaction{TransactionId: req.GetTransactionId()}, nil
}

// TestGetRetries: a read the GTR shed (RESOURCE_EXHAUSTED: a partner's
// limit, a loaded run's reads of one partner) is read again, beyond the
// tries other transient errors get; an UNAVAILABLE is tried lookupTries
// times, then reported.
func TestGetRetries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k := idempotency.Key{PartnerID: "p-1", TransactionID: "t-1"}
	shed := &failingReads{code: codes.ResourceExhausted, n: 3 * lookupTries}
	if l := get(ctx, shed, k, time.Second); l.err != nil || l.txn.GetTransactionId() != "t-1" || shed.calls.Load() != 3*lookupTries+1 {
		t.Fatalf("shed %d times: %v after %d calls, want the transaction", shed.n, l.err, shed.calls.Load())
	}
	down := &failingReads{code: codes.Unavailable, n: 100}
	if l := get(ctx, down, k, time.Second); l.code != codes.Unavailable || down.calls.Load() != lookupTries {
		t.Fatalf("unavailable: %v after %d calls, want UNAVAILABLE after %d", l.err, down.calls.Load(), lookupTries)
	}
}
