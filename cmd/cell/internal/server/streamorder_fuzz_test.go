package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// guardIssuer fails the test if the issuer is called for a key before any
// stream that started that key has sent Proceed: an unconfirmed attempt
// must never reach the issuer.
type guardIssuer struct {
	countingIssuer
	t        *testing.T
	mu       sync.Mutex
	proceeds map[idempotency.Key]bool
}

func (g *guardIssuer) proceeded(k idempotency.Key) {
	g.mu.Lock()
	g.proceeds[k] = true
	g.mu.Unlock()
}

func (g *guardIssuer) Authorize(ctx context.Context, in *issuerproto.AuthorizeRequest, opts ...grpc.CallOption) (*issuerproto.AuthorizeResponse, error) {
	k := idempotency.Key{PartnerID: in.GetPartnerId(), TransactionID: in.GetTransactionId()}
	g.mu.Lock()
	ok := g.proceeds[k]
	g.mu.Unlock()
	if !ok {
		g.t.Errorf("the issuer was called for %v before any Proceed for it", k)
	}
	return g.countingIssuer.Authorize(ctx, in, opts...)
}

// startWithIssuer is start (server_test.go) with the issuer given: the
// same server, store and refdata, over real gRPC on loopback.
func startWithIssuer(t *testing.T, iss Issuer) cellproto.CellClient {
	t.Helper()
	ref, err := refdata.Load("../../../../config/refdata.json")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{
		CellID: "cell-t", Store: &memStore{recs: map[idempotency.Key]cellside.Record{}}, Issuer: iss,
		RefData: func() cellside.RefData { return ref },
		Policy:  cellside.Policy{LimitCurrency: "EUR", VelocityWindow: time.Minute},
		Keys:    testKeys,
		// Short waits: every input must finish well within the fuzzing
		// engine's patience (a worker still busy when -fuzztime ends fails
		// the run), and the order, not the clock, is what is fuzzed.
		WaitTimeout: 300 * time.Millisecond, StartTimeout: 300 * time.Millisecond,
		ProceedTimeout: 500 * time.Millisecond, IssuerTimeout: time.Second,
		Log: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	cellproto.RegisterCellServer(gs, srv)
	go gs.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop() })
	return cellproto.NewCellClient(conn)
}

// Stream operations a fuzz input is read as, one byte each.
const (
	opStart     = iota // Start for one of three transaction IDs (next bits)
	opProceed          // Proceed, whatever has been seen
	opBadStart         // Start with no request, or a request of bad fields
	opCloseSend        // end this stream's sending side; the next op opens a new one
	opCancel           // cancel this stream (the GTR gave up)
	opCount
)

// FuzzProcessStreamOrder drives a real cell server over real gRPC with
// arbitrary sequences of start, proceed, close-send and cancel on one or
// more Process streams. Whatever the order, the server must not crash,
// must end every stream once its client has closed or cancelled it (a
// bounded wait: no hang), must never call the issuer for an attempt no
// stream confirmed with Proceed, and must call it at most once per
// transaction.
func FuzzProcessStreamOrder(f *testing.F) {
	f.Add([]byte{opStart, opProceed, opCloseSend})                       // the handshake
	f.Add([]byte{opStart, opCloseSend})                                  // the GTR gives up
	f.Add([]byte{opStart, opCancel})                                     // the GTR cancels
	f.Add([]byte{opProceed, opStart, opCloseSend})                       // Proceed first
	f.Add([]byte{opStart, opStart | 1<<3, opProceed, opCloseSend})       // two starts
	f.Add([]byte{opProceed, opProceed, opCloseSend})                     // no start at all
	f.Add([]byte{opBadStart, opProceed, opCloseSend})                    // an invalid request
	f.Add([]byte{opStart, opCloseSend, opStart, opProceed, opCloseSend}) // a retry on a new stream
	f.Add([]byte{opCloseSend})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 24 {
			ops = ops[:24]
		}
		g := &guardIssuer{t: t, proceeds: map[idempotency.Key]bool{}}
		c := startWithIssuer(t, g)
		ctx, cancelAll := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancelAll()

		type stream struct {
			s      grpc.BidiStreamingClient[cellproto.ProcessInput, cellproto.ProcessEvent]
			cancel context.CancelFunc
			done   chan error // the Recv loop's end
			keys   []idempotency.Key
		}
		var all []*stream
		var cur *stream
		open := func() *stream {
			sctx, cancel := context.WithCancel(ctx)
			s, err := c.Process(sctx)
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			st := &stream{s: s, cancel: cancel, done: make(chan error, 1)}
			go func() {
				for {
					if _, err := s.Recv(); err != nil {
						st.done <- err
						return
					}
				}
			}()
			all = append(all, st)
			return st
		}
		for _, b := range ops {
			if cur == nil {
				cur = open()
			}
			switch b % opCount {
			case opStart:
				id := []string{"fz-a", "fz-b", "fz-c"}[int(b>>3)%3]
				r := request(id)
				cur.keys = append(cur.keys, idempotency.Key{PartnerID: r.GetPartnerId(), TransactionID: id})
				_ = cur.s.Send(&cellproto.ProcessInput{Input: &cellproto.ProcessInput_Start{Start: &cellproto.ProcessRequest{Request: r, Attempt: int32(b>>5) + 1}}})
			case opProceed:
				for _, k := range cur.keys {
					g.proceeded(k)
				}
				_ = cur.s.Send(&cellproto.ProcessInput{Input: &cellproto.ProcessInput_Proceed{Proceed: &cellproto.Proceed{}}})
			case opBadStart:
				in := &cellproto.ProcessRequest{Attempt: -1}
				if b&8 != 0 {
					in.Request = &cellpayv1.SubmitTransactionRequest{TransactionId: "fz-bad", PartnerId: "p-001", Card: &cellpayv1.Card{Pan: "1"}}
				}
				_ = cur.s.Send(&cellproto.ProcessInput{Input: &cellproto.ProcessInput_Start{Start: in}})
			case opCloseSend:
				_ = cur.s.CloseSend()
				cur = nil
			case opCancel:
				cur.cancel()
				cur = nil
			}
		}
		if cur != nil {
			_ = cur.s.CloseSend()
		}
		// Every stream ends by itself once its client is done with it.
		for i, st := range all {
			select {
			case err := <-st.done:
				if err != nil && !errors.Is(err, io.EOF) && ctx.Err() != nil {
					t.Fatalf("stream %d: %v", i, err)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("stream %d did not end within 15s of its client closing it (ops %v)", i, ops)
			}
			st.cancel()
		}
		for _, id := range []string{"fz-a", "fz-b", "fz-c"} {
			if n := g.callsFor(idempotency.Key{PartnerID: "p-001", TransactionID: id}); n > 1 {
				t.Fatalf("the issuer was called %d times for %s (ops %v)", n, id, ops)
			}
		}
	})
}
