package payments

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/internal/pnr/gtrside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

// callInfo is what every attempt of one call tells its cell about the
// call: its ID (a later attempt may take over an earlier one's directory
// claim) and whether the cell is the transaction's natural home.
type callInfo struct {
	id   string
	home bool
	// balancer is the cell's pool's, in the table the cell was routed by.
	balancer routing.Balancer
}

// attempt runs the transaction on one cell: the Process stream, with the
// point-of-no-return handshake. It re-routes (answers Reroute) only while
// it has not sent Proceed. What to do is gtrside's decision; this
// is its driver, performing the machine's actions on the stream, the
// attempt timer and the caller's context.
//
// atPNR gives back the attempt's slot in the cell's adaptive limit at the
// PNR, where the cell's own work ends (what follows is the issuer's), with
// the latency up to it. The GTR-wide slot is the call's, held to its end.
func (s *Server) attempt(ctx context.Context, cell *routing.Cell, req *cellpayv1.SubmitTransactionRequest, n int32, rule string, lastResort bool, call callInfo, atPNR func(time.Duration)) gtrside.Answer {
	client, err := s.cfg.Cells.Client(cell, call.balancer)
	if err != nil {
		return gtrside.Answer{Reroute: err}
	}
	if s.cfg.InFlight != nil {
		s.cfg.InFlight(cell.ID, 1)
		defer s.cfg.InFlight(cell.ID, -1)
	}
	// Past afterPNRBound the stream is cut anyway: an attempt timer beyond
	// it would never fire first.
	timeout := min(s.cfg.AttemptTimeout, afterPNRBound)
	m := gtrside.New(gtrside.Config{CellID: cell.ID, AttemptTimeout: timeout})
	d := driver{ctx: ctx, owned: true}
	defer d.close()
	// Each case performs the action and steps the machine with what
	// happened, in place: an event that goes no further than Step stays
	// off the heap.
	a := m.Start(time.Now())
	for {
		switch act := a.(type) {
		case gtrside.Open:
			a = d.open(m, client, act.CancelAt, &cellproto.ProcessInput{Input: &cellproto.ProcessInput_Start{Start: &cellproto.ProcessRequest{
				Request: req, Attempt: n, RouteRule: rule, LastResort: lastResort, CallId: call.id, Home: call.home,
				AttemptBudgetMs: uint32(timeout.Milliseconds()),
			}}})
		case gtrside.Read:
			a = d.read(m)
		case gtrside.Disarm:
			switch {
			case !d.timer.Stop():
				a = m.Step(gtrside.DisarmFailed{Timer: true})
			case !d.stopWatch():
				a = m.Step(gtrside.DisarmFailed{})
			default:
				a = m.Step(gtrside.Disarmed{})
			}
		case gtrside.SendProceed:
			if err := d.stream.Send(proceed); err != nil {
				a = m.Step(gtrside.ProceedFailed{Err: err})
			} else {
				a = m.Step(gtrside.ProceedSent{Now: time.Now()})
			}
		case gtrside.ReleaseSlot:
			atPNR(act.Latency)
			a = m.Step(gtrside.Released{})
		case gtrside.Answer:
			d.finish(act)
			return act
		}
	}
}

var proceed = &cellproto.ProcessInput{Input: &cellproto.ProcessInput_Proceed{Proceed: &cellproto.Proceed{}}}

// driver holds the I/O of one attempt: the stream, its context and the
// standing orders that cancel it (the attempt timer, the caller's watch).
type driver struct {
	ctx context.Context // the caller's
	// sctx is the stream's own context. Before the point of no return it
	// ends when the attempt timer fires or the caller goes away, so that a
	// slow cell stops short of it. After Proceed it must not end that way:
	// the cancellation could overtake the Proceed on its way to the cell,
	// which would then step back from a point of no return the GTR has
	// already promised. From Proceed on, the stream lives until the cell's
	// answer (bounded by afterPNRBound); a caller whose deadline comes
	// first is answered PENDING, and the rest is read in the background.
	sctx      context.Context
	scancel   context.CancelFunc
	timer     *time.Timer
	stopWatch func() bool
	stream    grpc.BidiStreamingClient[cellproto.ProcessInput, cellproto.ProcessEvent]
	events    <-chan received
	// callerDone is the caller's Done until CallerGone is told. ended: the
	// stream's end (endErr) was read but not yet told, CallerGone first.
	callerDone <-chan struct{}
	ended      bool
	endErr     error
	owned      bool // close cancels the stream
}

func (d *driver) open(m *gtrside.Machine, client cellproto.CellClient, cancelAt time.Time, start *cellproto.ProcessInput) gtrside.Action {
	d.sctx, d.scancel = context.WithTimeout(context.WithoutCancel(d.ctx), afterPNRBound)
	d.timer = time.AfterFunc(time.Until(cancelAt), d.scancel)
	d.stopWatch = context.AfterFunc(d.ctx, d.scancel)
	d.callerDone = d.ctx.Done()
	stream, err := client.Process(d.sctx)
	if err != nil {
		return m.Step(gtrside.OpenFailed{Err: err})
	}
	d.stream = stream
	if err := stream.Send(start); err != nil && !errors.Is(err, io.EOF) {
		return m.Step(gtrside.OpenFailed{Err: err})
	} // on io.EOF the stream's status comes from Recv
	d.events = receive(d.sctx, stream)
	return m.Step(gtrside.Opened{Now: time.Now()})
}

// read waits for what the machine's Read asks for, and steps m with it.
func (d *driver) read(m *gtrside.Machine) gtrside.Action {
	for {
		if d.ended {
			d.ended = false
			return m.Step(gtrside.StreamEnded{Now: time.Now(), Err: d.endErr})
		}
		var r received
		select {
		case r = <-d.events:
		case <-d.callerDone:
			d.callerDone = nil
			return m.Step(gtrside.CallerGone{})
		}
		if r.err != nil {
			if d.callerDone != nil && d.ctx.Err() != nil {
				// The caller left (and so, likely, the stream ended): say so
				// first, so that the machine does not take it for slowness.
				d.callerDone, d.ended, d.endErr = nil, true, r.err
				return m.Step(gtrside.CallerGone{})
			}
			return m.Step(gtrside.StreamEnded{Now: time.Now(), Err: r.err})
		}
		switch e := r.ev.GetEvent().(type) {
		case *cellproto.ProcessEvent_PointOfNoReturn:
			return m.Step(gtrside.PNR{Now: time.Now()})
		case *cellproto.ProcessEvent_Proceeding:
			return m.Step(gtrside.Proceeding{})
		case *cellproto.ProcessEvent_Result:
			return m.Step(gtrside.Result{Now: time.Now(), Txn: e.Result})
		case *cellproto.ProcessEvent_Reroutable:
			return m.Step(gtrside.Reroutable{Now: time.Now(), Reason: e.Reroutable.GetReason(), CellHealthy: e.Reroutable.GetCellHealthy(),
				Owner: e.Reroutable.GetOwnerCell()})
		}
		// A kind of message this GTR does not know: read on.
	}
}

// finish leaves a stream past Proceed that is still open (Detach) to be
// read to its end in the background.
func (d *driver) finish(a gtrside.Answer) {
	if a.Detach && d.events != nil && !d.ended {
		d.owned = false
		go drain(d.events, d.sctx, d.scancel)
	}
}

// close stops the standing orders and, unless the stream was detached,
// ends it.
func (d *driver) close() {
	if d.timer == nil {
		return // never opened
	}
	d.timer.Stop()
	d.stopWatch()
	if d.owned {
		d.scancel()
	}
}

// afterPNRBound bounds a Process stream from its start: far beyond a cell's
// issuer timeout, so that only a cell that never answers is cut off.
const afterPNRBound = 2 * time.Minute

// received is one Recv of a Process stream.
type received struct {
	ev  *cellproto.ProcessEvent
	err error
}

// receive reads stream until its first error, on a goroutine of its own,
// so that the caller can stop waiting without ending the stream.
func receive(ctx context.Context, stream grpc.BidiStreamingClient[cellproto.ProcessInput, cellproto.ProcessEvent]) <-chan received {
	// A stream carries at most a PNR event, a Proceeding, a terminal event
	// and its end: with room for those, a send never waits, and an error caused by the
	// stream's own cancellation is still delivered to a reader waiting for
	// it. Only a cell sending more than that, to nobody, waits on ctx.
	out := make(chan received, 4)
	go func() {
		for {
			ev, err := stream.Recv()
			r := received{ev, err}
			select {
			case out <- r:
			default:
				select {
				case out <- r:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return out
}

// drain reads a stream past its point of no return to its terminal event,
// then ends it: the cell finishes the transaction and records it whoever
// is still listening.
func drain(events <-chan received, ctx context.Context, cancel context.CancelFunc) {
	defer cancel()
	for {
		select {
		case r := <-events:
			if r.err != nil || r.ev.GetResult() != nil || r.ev.GetReroutable() != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// pending answers for a transaction past its PNR on cellID whose outcome
// this GTR did not receive: the owning cell has it, and GetTransaction
// reads it.
func (s *Server) pending(cellID string, req *cellpayv1.SubmitTransactionRequest) *cellpayv1.Transaction {
	now := timestamppb.New(s.cfg.Now())
	return &cellpayv1.Transaction{
		TransactionId: req.GetTransactionId(),
		Status:        cellpayv1.TransactionStatus_PENDING,
		CellId:        cellID,
		Amount:        req.GetAmount(),
		PaymentType:   req.GetPaymentType(),
		PartnerId:     req.GetPartnerId(),
		Market:        req.GetMarket(),
		CreatedAt:     now,
		UpdatedAt:     now,
	}
}
