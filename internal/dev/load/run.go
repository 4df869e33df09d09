package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/client"
)

// Stop reasons reported in Report.StopReason.
const (
	StopCount       = "count"
	StopDuration    = "duration"
	StopInterrupted = "interrupted"
)

// progressInterval is how often Run calls its progress callback.
const progressInterval = 100 * time.Millisecond

// caller sends one request to the target and returns its answer.
type caller func(ctx context.Context, req *cellpayv1.SubmitTransactionRequest) (outcome, error)

// Run issues load as cfg describes until Count requests, Duration or the end
// of ctx, whichever comes first, then waits for requests in flight (each
// bounded by PerRequestTimeout, and not cut short by ctx) and, with
// FollowUps, for the lives under way (no follow-up is sent after Duration
// or the end of ctx), then returns the report. The end of ctx is not an
// error: the report says "interrupted".
//
// progress, if not nil, is called from a single goroutine about every
// 100ms and once at the end, with the number of resolved requests (finished
// or dropped) and Count.
//
// Errors wrap ErrInvalidConfig when cfg is refused.
func Run(ctx context.Context, cfg Config, progress func(done, total int64)) (Report, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	opts := cfg.DialOptions
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	r := &runner{
		cfg: cfg,
		gen: newGenerator(cfg),
		rec: newRecorder(cfg.Count, cfg.accessPointAddrs()),
		// In-flight requests outlive ctx so that an interrupted run still
		// reports their answers; PerRequestTimeout bounds them.
		reqCtx: context.WithoutCancel(ctx),
	}
	var fo *client.Client
	var conn *grpc.ClientConn // without Endpoints or AccessPoints
	if len(cfg.Endpoints) > 0 || len(cfg.AccessPoints) > 0 {
		var err error
		if fo, err = dialAccessPoints(cfg, opts, "load"); err != nil {
			return Report{}, err
		}
		defer fo.Close()
		r.call = clientCaller(fo)
	} else {
		var err error
		conn, err = grpc.NewClient(cfg.Addr, opts...)
		if err != nil {
			return Report{}, fmt.Errorf("load: dial %s: %w", cfg.Addr, err)
		}
		defer conn.Close()
		switch cfg.Target {
		case TargetGTR:
			r.call = gtrCaller(cellpayv1.NewPaymentsClient(conn))
		case TargetCell:
			r.call = cellCaller(cellproto.NewCellClient(conn))
		}
	}
	var fuAPI *client.Client
	if cfg.FollowUps > 0 {
		var err error
		if fuAPI, err = dialFollowUps(cfg, conn, opts); err != nil {
			return Report{}, err
		}
	}

	stopProgress := startProgress(r.rec, cfg.Count, progress)
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	if fuAPI != nil {
		r.fu = startFollowUps(ctx, followUpConfig{
			Share: cfg.FollowUps, Seed: cfg.Seed,
			Workers: cfg.Concurrency, Queue: int(min(cfg.Count, maxFollowUpQueue)),
			Timeout: cfg.PerRequestTimeout, Deadline: deadline, OnAnswer: cfg.OnFollowUp,
		}, fuAPI, start)
	}
	var reason string
	if cfg.Mode == ModeOpen {
		reason = r.openLoop(ctx, start, deadline)
	} else {
		reason = r.closedLoop(ctx, deadline)
	}
	elapsed := time.Since(start)
	stopProgress()

	rep := r.rec.report(elapsed)
	if r.fu != nil {
		// After the submits' figures: the follow-ups' own time is
		// theirs (FollowUpReport.ElapsedSeconds).
		fr, err := r.fu.finish()
		if err != nil {
			return Report{}, err
		}
		rep.FollowUps = &fr
	}
	rep.Target, rep.Mode, rep.Addr, rep.RunID = cfg.Target, cfg.Mode, cfg.Addr, cfg.RunID
	rep.Concurrency, rep.StopReason = cfg.Concurrency, reason
	if fo != nil {
		rep.Switches = fo.Events()
	}
	if cfg.Mode == ModeOpen {
		rep.Rate = cfg.Rate
	}
	return rep, nil
}

type runner struct {
	cfg    Config
	gen    *generator
	rec    *recorder
	call   caller
	reqCtx context.Context
	fu     *followUps // with FollowUps only
}

// openLoop schedules request seq at start + (seq-1)/Rate whatever the
// answers; it returns once every issued request has finished.
func (r *runner) openLoop(ctx context.Context, start, deadline time.Time) string {
	sem := make(chan struct{}, r.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	nsPerReq := float64(time.Second) / r.cfg.Rate
	for seq := int64(1); seq <= r.cfg.Count; seq++ {
		at := start.Add(time.Duration(float64(seq-1) * nsPerReq))
		if !at.Before(deadline) {
			return StopDuration
		}
		if wait := time.Until(at); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return StopInterrupted
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			return StopInterrupted
		}
		select {
		case sem <- struct{}{}:
		default:
			// Blocking here would delay the schedule and hide the
			// server's slowness; count the slot instead.
			r.rec.dropped.Add(1)
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			// Latency runs from the scheduled time, not the send time.
			r.do(seq, at)
		})
	}
	return StopCount
}

// closedLoop runs Concurrency workers back to back; it returns once every
// issued request has finished. A worker refused with a retry hint (a shed
// request: client.RetryAfter) waits it, at most maxHintWait, before its
// next request, as a partner's client does: a refusal answered in
// microseconds must not turn the loop into a spin that measures the
// refusals instead of the service.
func (r *runner) closedLoop(ctx context.Context, deadline time.Time) string {
	issueCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range r.cfg.Concurrency {
		wg.Go(func() {
			for issueCtx.Err() == nil {
				seq := next.Add(1)
				if seq > r.cfg.Count {
					return
				}
				if hint, ok := client.RetryAfter(r.do(seq, time.Now())); ok {
					_ = sleep(issueCtx, min(hint, maxHintWait))
				}
			}
		})
	}
	wg.Wait()
	switch {
	case r.rec.sent.Load() == r.cfg.Count:
		return StopCount
	case ctx.Err() != nil:
		return StopInterrupted
	default:
		return StopDuration
	}
}

// sleep waits d or until ctx ends, whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// maxHintWait bounds a closed-loop worker's wait on a retry hint.
const maxHintWait = time.Second

// do sends request seq and records its answer with the latency since at,
// then offers it to the follow-ups; it returns the request's error.
func (r *runner) do(seq int64, at time.Time) error {
	req := r.gen.request(seq)
	r.rec.sent.Add(1)
	ctx, cancel := context.WithTimeout(r.reqCtx, r.cfg.PerRequestTimeout)
	defer cancel()
	o, err := r.call(ctx, req)
	lat := time.Since(at)
	r.rec.record(o, err, lat)
	res := Result{PartnerID: req.GetPartnerId(), Request: req, Transaction: o.txn, Err: err, Sent: at, Latency: lat,
		Endpoint: o.endpoint, FailedOver: o.failedOver}
	if r.cfg.OnResult != nil {
		r.cfg.OnResult(res)
	}
	if r.fu != nil {
		r.fu.offer(seq, res)
	}
	return err
}

func gtrCaller(c cellpayv1.PaymentsClient) caller {
	return func(ctx context.Context, req *cellpayv1.SubmitTransactionRequest) (outcome, error) {
		txn, err := c.SubmitTransaction(ctx, req)
		if err != nil {
			return outcome{}, err
		}
		return outcome{txn: txn, status: txn.GetStatus()}, nil
	}
}

// dialAccessPoints returns pkg/client over the access points of cfg
// (defaults set, validated, with Endpoints or AccessPoints), with
// cfg.Client's failover rules and retries: Endpoints, a primary and a
// backup, through client.DialEndpoints; AccessPoints, with their sites
// and cfg.Client.HomeSite, through client.DialAccessPoints. The client's
// refusal of the list or of the home site wraps ErrInvalidConfig; who
// names the caller in other errors ("load", "load: follow-ups").
func dialAccessPoints(cfg Config, opts []grpc.DialOption, who string) (*client.Client, error) {
	var c *client.Client
	var err error
	var aps any = cfg.Endpoints
	if len(cfg.AccessPoints) > 0 {
		aps = cfg.AccessPoints
		c, err = client.DialAccessPoints(cfg.AccessPoints, cfg.Client, opts...)
	} else {
		c, err = client.DialEndpoints(cfg.Endpoints, cfg.Client, opts...)
	}
	switch {
	case errors.Is(err, client.ErrInvalidAccessPoints):
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	case err != nil:
		return nil, fmt.Errorf("%s: dial %v: %w", who, aps, err)
	}
	return c, nil
}

// clientCaller sends through the partners' client, failing over between
// its access points.
func clientCaller(c *client.Client) caller {
	return func(ctx context.Context, req *cellpayv1.SubmitTransactionRequest) (outcome, error) {
		txn, info, err := c.SubmitWithInfo(ctx, req)
		o := outcome{endpoint: info.Endpoint, failedOver: info.FailedOver}
		if err != nil {
			return o, err
		}
		o.txn, o.status = txn, txn.GetStatus()
		return o, nil
	}
}

// cellCaller calls Cell.Process as the GTR's first attempt would: it opens
// the stream, confirms the point of no return when the cell asks, and reads
// up to the terminal event.
func cellCaller(c cellproto.CellClient) caller {
	return func(ctx context.Context, req *cellpayv1.SubmitTransactionRequest) (outcome, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // ends the stream once the terminal event is read
		stream, err := c.Process(ctx)
		if err != nil {
			return outcome{}, err
		}
		err = stream.Send(&cellproto.ProcessInput{Input: &cellproto.ProcessInput_Start{Start: &cellproto.ProcessRequest{
			Request:    req,
			Attempt:    1,
			RouteRule:  "loadgen",
			LastResort: true,
		}}})
		if err != nil && err != io.EOF {
			return outcome{}, err
		}
		var o outcome
		for {
			ev, err := stream.Recv()
			if err == io.EOF {
				return o, errNoTerminal
			}
			if err != nil {
				return o, err
			}
			switch e := ev.GetEvent().(type) {
			case *cellproto.ProcessEvent_PointOfNoReturn:
				o.pnr = true
				if err := stream.Send(&cellproto.ProcessInput{Input: &cellproto.ProcessInput_Proceed{Proceed: &cellproto.Proceed{}}}); err != nil && err != io.EOF {
					return o, err
				}
			case *cellproto.ProcessEvent_Result:
				o.txn, o.status = e.Result, e.Result.GetStatus()
				return o, nil
			case *cellproto.ProcessEvent_Reroutable:
				o.reroutable = true
				return o, nil
			}
		}
	}
}

// startProgress calls progress from one goroutine until the returned stop
// function is called; stop makes a final call and waits for the goroutine.
func startProgress(rec *recorder, total int64, progress func(done, total int64)) (stop func()) {
	if progress == nil {
		return func() {}
	}
	quit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		for {
			select {
			case <-quit:
				progress(rec.done(), total)
				return
			case <-t.C:
				progress(rec.done(), total)
			}
		}
	}()
	return func() {
		close(quit)
		<-finished
	}
}
