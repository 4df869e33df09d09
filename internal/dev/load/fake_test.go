package load

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/dev/testutil/grpctest"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
)

// setup registers the leak check first, so that it runs after every other
// cleanup (servers stopped, listeners closed), and returns a context bounding
// the test.
func setup(t *testing.T) context.Context {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// answerFunc decides a fake's answer to one request.
type answerFunc func(req *cellpayv1.SubmitTransactionRequest) (cellpayv1.TransactionStatus, error)

// approveUnlessDeclineCard approves every request but those with DeclinePAN.
func approveUnlessDeclineCard(req *cellpayv1.SubmitTransactionRequest) (cellpayv1.TransactionStatus, error) {
	if req.GetCard().GetPan() == DeclinePAN {
		return cellpayv1.TransactionStatus_DECLINED, nil
	}
	return cellpayv1.TransactionStatus_APPROVED, nil
}

// seqOf returns the sequence number at the end of a RunID-seq transaction ID.
func seqOf(t testing.TB, id string) int64 {
	i := strings.LastIndexByte(id, '-')
	n, err := strconv.ParseInt(id[i+1:], 10, 64)
	if err != nil {
		t.Errorf("transaction ID %q: no sequence number: %v", id, err)
	}
	return n
}

// seen records the transaction IDs a fake received.
type seen struct {
	mu  sync.Mutex
	ids map[string]int
}

func (s *seen) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]int{}
	}
	s.ids[id]++
}

func (s *seen) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.ids))
	for k, v := range s.ids {
		out[k] = v
	}
	return out
}

// fakePayments is the public Payments API answering from answer after delay.
type fakePayments struct {
	cellpayv1.UnimplementedPaymentsServer
	answer answerFunc
	delay  time.Duration
	seen   seen
}

func (f *fakePayments) SubmitTransaction(ctx context.Context, req *cellpayv1.SubmitTransactionRequest) (*cellpayv1.Transaction, error) {
	f.seen.add(req.GetTransactionId())
	if err := sleep(ctx, f.delay); err != nil {
		return nil, err
	}
	st, err := f.answer(req)
	if err != nil {
		return nil, err
	}
	return &cellpayv1.Transaction{TransactionId: req.GetTransactionId(), Status: st, CellId: "fake"}, nil
}

// cellScript is what a fake cell sends for one request: whether a PNR event
// comes first, then the terminal event (nil: the stream just ends).
type cellScript func(req *cellpayv1.SubmitTransactionRequest) (pnr bool, terminal *cellproto.ProcessEvent, err error)

// fakeCell is the internal Cell API playing a script.
type fakeCell struct {
	cellproto.UnimplementedCellServer
	script cellScript
	seen   seen
}

func (f *fakeCell) Process(stream grpc.BidiStreamingServer[cellproto.ProcessInput, cellproto.ProcessEvent]) error {
	in, err := stream.Recv()
	if err != nil {
		return err
	}
	req := in.GetStart()
	if req.GetAttempt() != 1 {
		return errorf("attempt %d, want 1", req.GetAttempt())
	}
	txn := req.GetRequest()
	f.seen.add(txn.GetTransactionId())
	pnr, terminal, err := f.script(txn)
	if err != nil {
		return err
	}
	if pnr {
		ev := &cellproto.ProcessEvent{Event: &cellproto.ProcessEvent_PointOfNoReturn{
			PointOfNoReturn: &cellproto.PointOfNoReturn{TransactionId: txn.GetTransactionId(), CellId: "fake"},
		}}
		if err := stream.Send(ev); err != nil {
			return err
		}
		// The load tool stands in for the GTR: it must confirm.
		in, err := stream.Recv()
		if err != nil {
			return err
		}
		if in.GetProceed() == nil {
			return errorf("expected Proceed after the point of no return")
		}
	}
	if terminal != nil {
		return stream.Send(terminal)
	}
	return nil
}

func resultEvent(req *cellpayv1.SubmitTransactionRequest, st cellpayv1.TransactionStatus) *cellproto.ProcessEvent {
	return &cellproto.ProcessEvent{Event: &cellproto.ProcessEvent_Result{
		Result: &cellpayv1.Transaction{TransactionId: req.GetTransactionId(), Status: st, CellId: "fake"},
	}}
}

func servePayments(t *testing.T, f *fakePayments) string {
	return grpctest.Serve(t, func(s *grpc.Server) { cellpayv1.RegisterPaymentsServer(s, f) })
}

func serveCell(t *testing.T, f *fakeCell) string {
	return grpctest.Serve(t, func(s *grpc.Server) { cellproto.RegisterCellServer(s, f) })
}

func errorf(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}
