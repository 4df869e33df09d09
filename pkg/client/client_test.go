package client

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeGTR answers from a script, over real gRPC on loopback, and records
// every request it saw.
type fakeGTR struct {
	cellpayv1.UnimplementedPaymentsServer
	mu      sync.Mutex
	submits []*cellpayv1.SubmitTransactionRequest
	gets    int
	getReqs []*cellpayv1.GetTransactionRequest
	submit  func(n int) (*cellpayv1.Transaction, error)
	get     func(n int) (*cellpayv1.Transaction, error)
}

func (f *fakeGTR) SubmitTransaction(_ context.Context, r *cellpayv1.SubmitTransactionRequest) (*cellpayv1.Transaction, error) {
	f.mu.Lock()
	f.submits = append(f.submits, r)
	n := len(f.submits)
	f.mu.Unlock()
	return f.submit(n)
}

func (f *fakeGTR) GetTransaction(_ context.Context, r *cellpayv1.GetTransactionRequest) (*cellpayv1.Transaction, error) {
	f.mu.Lock()
	f.gets++
	f.getReqs = append(f.getReqs, r)
	n := f.gets
	f.mu.Unlock()
	return f.get(n)
}

func start(t *testing.T, f *fakeGTR) *Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	cellpayv1.RegisterPaymentsServer(s, f)
	go s.Serve(lis)
	c, err := Dial(lis.Addr().String(), Config{PartnerID: "p-001", Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, PollInterval: time.Millisecond},
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Stop() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func req() *cellpayv1.SubmitTransactionRequest {
	return &cellpayv1.SubmitTransactionRequest{TransactionId: "t-1", PartnerId: "p-001", Amount: &cellpayv1.Money{MinorUnits: 1, Currency: "GBP"}}
}

func approved() *cellpayv1.Transaction {
	return &cellpayv1.Transaction{TransactionId: "t-1", Status: cellpayv1.TransactionStatus_APPROVED}
}

func TestRetriesTheSameRequest(t *testing.T) {
	f := &fakeGTR{submit: func(n int) (*cellpayv1.Transaction, error) {
		switch n {
		case 1:
			return nil, status.Error(codes.Unavailable, "no cell")
		case 2:
			return nil, status.Error(codes.Aborted, "in progress")
		}
		return approved(), nil
	}}
	c := start(t, f)
	got, err := c.Submit(ctxT(t), req())
	if err != nil || got.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
		t.Fatalf("got %v, %v", got, err)
	}
	if len(f.submits) != 3 {
		t.Fatalf("%d calls, want 3", len(f.submits))
	}
	for _, r := range f.submits {
		if !proto.Equal(r, req()) {
			t.Fatal("a retry changed the request: the same ID must carry the same payload")
		}
	}
}

func TestNeverRetriesAnswersAboutTheRequest(t *testing.T) {
	for _, code := range []codes.Code{codes.InvalidArgument, codes.AlreadyExists, codes.Unauthenticated, codes.PermissionDenied} {
		f := &fakeGTR{submit: func(int) (*cellpayv1.Transaction, error) { return nil, status.Error(code, "no") }}
		c := start(t, f)
		if _, err := c.Submit(ctxT(t), req()); status.Code(err) != code {
			t.Fatalf("err = %v, want %v", err, code)
		}
		if len(f.submits) != 1 {
			t.Fatalf("%v retried %d times", code, len(f.submits)-1)
		}
	}
}

func TestGivesUp(t *testing.T) {
	f := &fakeGTR{submit: func(int) (*cellpayv1.Transaction, error) { return nil, status.Error(codes.Unavailable, "down") }}
	c := start(t, f)
	if _, err := c.Submit(ctxT(t), req()); status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v", err)
	}
	if len(f.submits) != 5 {
		t.Fatalf("%d calls, want MaxAttempts (5)", len(f.submits))
	}
	// And the caller's context bounds it all.
	c.cfg.MaxAttempts, c.cfg.Backoff, c.cfg.MaxBackoff = 1000, 20*time.Millisecond, 20*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.Submit(ctx, req()); err == nil {
		t.Fatal("no error after the context ended")
	}
	if time.Since(start) > 2*time.Second {
		t.Fatal("Submit outlived its context")
	}
}

func TestSubmitAndWaitResolvesPending(t *testing.T) {
	f := &fakeGTR{
		submit: func(int) (*cellpayv1.Transaction, error) {
			return &cellpayv1.Transaction{TransactionId: "t-1", Status: cellpayv1.TransactionStatus_PENDING}, nil
		},
		get: func(n int) (*cellpayv1.Transaction, error) {
			switch {
			case n == 1:
				return nil, status.Error(codes.Unavailable, "a cell did not answer")
			case n < 4:
				return &cellpayv1.Transaction{TransactionId: "t-1", Status: cellpayv1.TransactionStatus_PENDING}, nil
			}
			return approved(), nil
		},
	}
	c := start(t, f)
	got, err := c.SubmitAndWait(ctxT(t), req())
	if err != nil || got.GetStatus() != cellpayv1.TransactionStatus_APPROVED || f.gets != 4 {
		t.Fatalf("got %v, %v after %d reads", got, err, f.gets)
	}
	f2 := &fakeGTR{get: func(int) (*cellpayv1.Transaction, error) { return nil, status.Error(codes.NotFound, "no") }}
	if _, err := start(t, f2).WaitFinal(ctxT(t), "t-x"); status.Code(err) != codes.NotFound {
		t.Fatalf("WaitFinal on an unknown ID: %v", err)
	}
}

// TestReadsAreForThePartner: transaction IDs are a namespace per partner.
// Get and WaitFinal read Config.PartnerID's transaction; SubmitAndWait reads
// back the partner and ID it submitted.
func TestReadsAreForThePartner(t *testing.T) {
	f := &fakeGTR{
		submit: func(int) (*cellpayv1.Transaction, error) {
			return &cellpayv1.Transaction{TransactionId: "t-1", Status: cellpayv1.TransactionStatus_PENDING}, nil
		},
		get: func(int) (*cellpayv1.Transaction, error) { return approved(), nil },
	}
	c := start(t, f)
	if _, err := c.Get(ctxT(t), "t-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitFinal(ctxT(t), "t-2"); err != nil {
		t.Fatal(err)
	}
	theirs := req()
	theirs.PartnerId = "p-002"
	if _, err := c.SubmitAndWait(ctxT(t), theirs); err != nil {
		t.Fatal(err)
	}
	want := []*cellpayv1.GetTransactionRequest{
		{PartnerId: "p-001", TransactionId: "t-1"},
		{PartnerId: "p-001", TransactionId: "t-2"},
		{PartnerId: "p-002", TransactionId: "t-1"},
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.getReqs) != len(want) {
		t.Fatalf("%d reads, want %d", len(f.getReqs), len(want))
	}
	for i := range want {
		if !proto.Equal(f.getReqs[i], want[i]) {
			t.Errorf("read %d asked for %v, want %v", i, f.getReqs[i], want[i])
		}
	}
}

// TestWaitsForTheRetryHint: a refusal carrying a RetryInfo delay (as the
// GTR's shedding does) is resent no sooner than the delay, however short
// the back-off; one without a hint is resent after the back-off.
func TestWaitsForTheRetryHint(t *testing.T) {
	const hint = 300 * time.Millisecond
	var mu sync.Mutex
	var at []time.Time
	f := &fakeGTR{submit: func(n int) (*cellpayv1.Transaction, error) {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		if n == 1 {
			st, err := status.New(codes.ResourceExhausted, "partner rate limit reached; the request was not sent to any cell").
				WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(hint)})
			if err != nil {
				return nil, err
			}
			return nil, st.Err()
		}
		return approved(), nil
	}}
	c := start(t, f) // back-off 1 to 5 ms
	if got, err := c.Submit(ctxT(t), req()); err != nil || got.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
		t.Fatalf("got %v, %v", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(at) != 2 {
		t.Fatalf("%d calls, want 2", len(at))
	}
	if gap := at[1].Sub(at[0]); gap < hint {
		t.Fatalf("resent %v after the refusal, before its hint of %v", gap, hint)
	}
}

func TestRetryAfter(t *testing.T) {
	withHint, _ := status.New(codes.ResourceExhausted, "shed").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(25 * time.Millisecond)})
	negative, _ := status.New(codes.ResourceExhausted, "shed").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(-time.Second)})
	for name, c := range map[string]struct {
		err  error
		want time.Duration
		ok   bool
	}{
		"hint":     {withHint.Err(), 25 * time.Millisecond, true},
		"negative": {negative.Err(), 0, false},
		"no hint":  {status.Error(codes.ResourceExhausted, "shed"), 0, false},
		"nil":      {nil, 0, false},
		"not gRPC": {errors.New("plain"), 0, false},
	} {
		if got, ok := RetryAfter(c.err); got != c.want || ok != c.ok {
			t.Errorf("%s: RetryAfter = %v, %v; want %v, %v", name, got, ok, c.want, c.ok)
		}
	}
}
