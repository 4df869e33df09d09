package gtr

import (
	"context"
	"sync"

	"google.golang.org/grpc"

	"github.com/cellpay/cellpay/cmd/gtr/internal/payments"
	"github.com/cellpay/cellpay/cmd/gtr/internal/state"
	"github.com/cellpay/cellpay/pkg/cellproto"
)

// countingCells wraps the cell clients so that every Process stream counts
// as in flight on its cell from the call until its terminal event, its
// error, or its context ending, whichever comes first. The admin API lists
// the counts; draining a cell shows them falling to zero.
type countingCells struct {
	inner payments.Cells
	st    *state.State
}

func (c countingCells) Client(id, addr string) (cellproto.CellClient, error) {
	cl, err := c.inner.Client(id, addr)
	if err != nil {
		return nil, err
	}
	return countingClient{CellClient: cl, id: id, st: c.st}, nil
}

type countingClient struct {
	cellproto.CellClient
	id string
	st *state.State
}

func (c countingClient) Process(ctx context.Context, in *cellproto.ProcessRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[cellproto.ProcessEvent], error) {
	c.st.InFlight(c.id, 1)
	var once sync.Once
	done := func() { once.Do(func() { c.st.InFlight(c.id, -1) }) }
	stream, err := c.CellClient.Process(ctx, in, opts...)
	if err != nil {
		done()
		return nil, err
	}
	stop := context.AfterFunc(ctx, done) // abandoned streams end with their context
	return &countingStream{ServerStreamingClient: stream, done: func() { stop(); done() }}, nil
}

type countingStream struct {
	grpc.ServerStreamingClient[cellproto.ProcessEvent]
	done func()
}

func (s *countingStream) Recv() (*cellproto.ProcessEvent, error) {
	ev, err := s.ServerStreamingClient.Recv()
	switch {
	case err != nil: // io.EOF included
		s.done()
	case ev.GetResult() != nil, ev.GetReroutable() != nil:
		s.done()
	}
	return ev, err
}
