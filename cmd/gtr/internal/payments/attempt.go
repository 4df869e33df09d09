package payments

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/cmd/gtr/internal/admission"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

// outcome of one attempt: a transaction or a final error for the caller, or
// a reason to try the next cell.
type outcome struct {
	txn         *cellpayv1.Transaction
	final       error
	reroute     error
	cellHealthy bool   // with reroute: the cell is fine, the transaction is not its
	owner       string // with reroute: the cell that owns the transaction, to try next
	slow        bool   // with reroute: the attempt's own timer ended it before the PNR
	released    bool   // the attempt's slot of the cell's limit was given back at the PNR
}

// failed reports whether the attempt counts against the cell's health: it
// failed the attempt itself (unreachable, broken, a fault of its own). A
// timeout is slowness, for the cell's adaptive limit; a frozen or dead cell
// is found by the active health checks, which it no longer answers.
func (o outcome) failed() bool { return o.reroute != nil && !o.cellHealthy && !o.slow }

// sample is what an attempt that ended before its point of no return tells
// the cell's adaptive limit (one past it gave its sample at the PNR): its
// latency; a cell that failed or timed out is a dropped sample; an answer
// about the request says nothing of the cell's load.
func (o outcome) sample(total time.Duration) (time.Duration, admission.Outcome) {
	switch {
	case o.reroute != nil && (!o.cellHealthy || o.slow):
		return total, admission.Dropped
	case o.reroute != nil, o.final != nil:
		return total, admission.Ignored
	case o.txn.GetStatus() == cellpayv1.TransactionStatus_PENDING:
		return total, admission.Ignored
	}
	return total, admission.Served
}

// callInfo is what every attempt of one call tells its cell about the
// call: its ID (a later attempt may take over an earlier one's directory
// claim) and whether the cell is the transaction's natural home.
type callInfo struct {
	id   string
	home bool
}

// attempt runs the transaction on one cell: the Process stream, with the
// point-of-no-return handshake. It re-routes (returns outcome.reroute) only
// while it has not sent Proceed.
//
// atPNR gives back the slots the attempt holds in the adaptive limits (the
// cell's, the GTR's) at the PNR, where the cell's own work ends (what
// follows is the issuer's), with the latency up to it.
func (s *Server) attempt(ctx context.Context, cell *routing.Cell, req *cellpayv1.SubmitTransactionRequest, n int32, rule string, lastResort bool, call callInfo, atPNR func(time.Duration)) (out outcome) {
	client, err := s.cfg.Cells.Client(cell.ID, cell.Addr)
	if err != nil {
		return outcome{reroute: err}
	}
	if s.cfg.InFlight != nil {
		s.cfg.InFlight(cell.ID, 1)
		defer s.cfg.InFlight(cell.ID, -1)
	}
	// The stream's own context. Before the point of no return it ends when
	// the attempt timer fires or the caller goes away, so that a slow cell
	// stops short of it. After Proceed it must not end that way: the
	// cancellation could overtake the Proceed on its way to the cell, which
	// would then step back from a point of no return the GTR has already
	// promised. From Proceed on, the stream lives until the cell's answer
	// (bounded by afterPNRBound); a caller whose deadline comes first is
	// answered PENDING, and the rest is read in the background.
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), afterPNRBound)
	owned := true // this call cancels the stream when it returns
	defer func() {
		if owned {
			scancel()
		}
	}()
	timer := time.AfterFunc(s.cfg.AttemptTimeout, scancel)
	defer timer.Stop()
	stopWatch := context.AfterFunc(ctx, scancel)
	defer stopWatch()
	stream, err := client.Process(sctx)
	if err != nil {
		return outcome{reroute: err}
	}
	start := &cellproto.ProcessInput{Input: &cellproto.ProcessInput_Start{Start: &cellproto.ProcessRequest{
		Request: req, Attempt: n, RouteRule: rule, LastResort: lastResort, CallId: call.id, Home: call.home,
	}}}
	if err := stream.Send(start); err != nil && !errors.Is(err, io.EOF) {
		return outcome{reroute: err}
	} // on io.EOF the stream's status comes from Recv
	events := receive(sctx, stream)
	began := time.Now()
	var toPNR time.Duration
	pnr := false
	var callerGone <-chan struct{} // armed at the PNR
	for {
		var r received
		select {
		case r = <-events:
		case <-callerGone:
			owned = false
			go drain(events, sctx, scancel)
			return s.pending(cell, req)
		}
		if r.err != nil {
			if errors.Is(r.err, io.EOF) {
				r.err = errors.New("cell closed the stream without an outcome")
			}
			o := s.broken(cell, req, pnr, r.err)
			// The attempt's own timer ended it, not the caller and not the
			// cell: the cell is slow, which its limit answers; whether it
			// is dead, health decides.
			o.slow = o.reroute != nil && ctx.Err() == nil && sctx.Err() != nil
			return o
		}
		switch e := r.ev.GetEvent().(type) {
		case *cellproto.ProcessEvent_PointOfNoReturn:
			if pnr {
				continue
			}
			// The handshake: confirm only if this attempt is still ours. A
			// timer that fired, or a caller that left, has given the
			// attempt up, and the cell, hearing nothing, will not call the
			// issuer.
			if !timer.Stop() || !stopWatch() {
				return outcome{reroute: fmt.Errorf("cell %s: point of no return after the attempt was given up", cell.ID)}
			}
			if err := stream.Send(&cellproto.ProcessInput{Input: &cellproto.ProcessInput_Proceed{Proceed: &cellproto.Proceed{}}}); err != nil {
				// Not delivered: the cell cannot have gone past its PNR.
				return outcome{reroute: fmt.Errorf("cell %s: confirming the point of no return: %w", cell.ID, err)}
			}
			// From here the transaction belongs to this cell.
			pnr = true
			toPNR = time.Since(began)
			atPNR(toPNR)
			defer func() { out.released = true }()
			callerGone = ctx.Done()
		case *cellproto.ProcessEvent_Result:
			return outcome{txn: e.Result}
		case *cellproto.ProcessEvent_Reroutable:
			if pnr {
				// A cell must never say this after a confirmed PNR; if one
				// does, trust the PNR and do not re-route.
				return s.pending(cell, req)
			}
			return outcome{reroute: fmt.Errorf("cell %s: %s", cell.ID, e.Reroutable.GetReason()), cellHealthy: e.Reroutable.GetCellHealthy(),
				owner: e.Reroutable.GetOwnerCell()}
		}
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
	// A stream carries at most a PNR event, a terminal event and its end:
	// with room for those, a send never waits, and an error caused by the
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

// broken handles a stream that ended without a terminal event.
func (s *Server) broken(cell *routing.Cell, req *cellpayv1.SubmitTransactionRequest, pnr bool, err error) outcome {
	if pnr {
		return s.pending(cell, req)
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.AlreadyExists, codes.Aborted:
		// The cell's answer about the request itself: the same anywhere.
		return outcome{final: err}
	}
	return outcome{reroute: fmt.Errorf("cell %s: %w", cell.ID, err)}
}

// pending answers for a transaction past its PNR whose outcome this GTR
// did not receive: the owning cell has it, and GetTransaction reads it.
func (s *Server) pending(cell *routing.Cell, req *cellpayv1.SubmitTransactionRequest) outcome {
	now := timestamppb.New(s.cfg.Now())
	return outcome{txn: &cellpayv1.Transaction{
		TransactionId: req.GetTransactionId(),
		Status:        cellpayv1.TransactionStatus_PENDING,
		CellId:        cell.ID,
		Amount:        req.GetAmount(),
		PaymentType:   req.GetPaymentType(),
		PartnerId:     req.GetPartnerId(),
		Market:        req.GetMarket(),
		CreatedAt:     now,
		UpdatedAt:     now,
	}}
}
