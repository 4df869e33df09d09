package telemetry

import (
	"context"
	"errors"
	"iter"
	"time"

	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// CellGauge is one cell as the GTR's gauges read it at a scrape.
type CellGauge struct {
	ID          string
	HealthShare int // 0 to 100: the share of its traffic the cell takes
	InFlight    int64
	Limit       int // the cell's adaptive concurrency limit (0: none)
	// Weight is the configured weight in force (a ramp's position, before
	// health scales it), TargetWeight where any ramp ends, and
	// RampStalled how long the routing table has lagged the ramp
	// (state.CellConfig.RampStalled; 0 when it keeps up).
	Weight, TargetWeight int
	RampStalled          time.Duration
	// Ejections counts this replica's ejections of the cell since it
	// started, by cause (its reason label).
	Ejections []Count
}

// Count is one labelled count of a gauge's cell.
type Count struct {
	Label string
	N     uint64
}

// GTR holds the router's domain instruments. Its methods only add to
// in-memory instruments: they never block or allocate after warm-up.
type GTR struct {
	txns     metric.Int64Counter
	reroutes metric.Int64Counter
	attempts metric.Int64Histogram
	denied   metric.Int64Counter
	shed     metric.Int64Counter
	logins   metric.Int64Counter
	locates  metric.Int64Counter
	lcAttrs  *attrCache // op, how
	across   metric.Int64Counter
	acAttrs  *attrCache // home_site, site
	duration metric.Float64Histogram
	mtAttrs  *attrCache // method
	lgAttrs  *attrCache // reason
	txnAttrs *attrCache // status, code
	shAttrs  *attrCache // reason
	rrAttrs  *attrCache // cell, reason
	dnAttrs  *attrCache // code, reason
}

// NewGTR registers the GTR's instruments on m; cells, ranged at each
// scrape, lists the cells of the routing table.
//
//	cellpay_gtr_transactions_total{status,code}   transactions processed: the status answered (none on error) and the gRPC code
//	cellpay_gtr_reroutes_total{cell,reason}       attempts given up before the PNR, by reason class
//	cellpay_gtr_attempts                          histogram of the cells tried per transaction
//	cellpay_gtr_cell_health_share{cell}           share (0-100) of its traffic a cell takes, from health
//	cellpay_gtr_cell_in_flight{cell}              attempts in progress on a cell
//	cellpay_gtr_auth_denied_total{code,reason}    partners' calls refused by authentication (no key material)
//	cellpay_gtr_shed_total{reason}                requests refused by admission control, before any cell
//	cellpay_gtr_cell_concurrency_limit{cell}      a cell's adaptive concurrency limit
//	cellpay_gtr_cell_weight{cell}                 configured weight in force (a ramp's position; before health)
//	cellpay_gtr_cell_weight_target{cell}          configured weight where any ramp ends
//	cellpay_gtr_cell_ramp_stalled_seconds{cell}   how long the routing table has lagged a ramp's step (0: it keeps up)
//	cellpay_gtr_cell_ejections_total{cell,reason} times health ejected a cell, by cause (consecutive_failures, failure_rate, success_rate, checks_unanswered, check_down)
//	cellpay_gtr_request_duration_seconds{method}  histogram of the partners' calls' time at the GTR, refusals included (the latency SLO's)
//	cellpay_gtr_locates_total{op,how}             how reads and follow-ups found the cell holding their transaction: first (the first cell asked), owner (named by the directory), fanout (every cell asked)
//	cellpay_gtr_routed_across_total{home_site,site} transactions routed outside their partner's home site (too little healthy capacity there, or none), by the site of the first cell
//	cellpay_gtr_admin_login_failures_total{reason} failed operator logins on the admin API and console (missing_token, invalid_token), and calls refused for them (throttled)
func NewGTR(m metric.Meter, cells iter.Seq[CellGauge]) (*GTR, error) {
	g := &GTR{txnAttrs: newAttrCache("status", "code"), rrAttrs: newAttrCache("cell", "reason"), dnAttrs: newAttrCache("code", "reason"), shAttrs: newAttrCache("reason", ""),
		lgAttrs: newAttrCache("reason", ""), lcAttrs: newAttrCache("op", "how"), acAttrs: newAttrCache("home_site", "site"), mtAttrs: newAttrCache("method", "")}
	errs := make([]error, 8)
	g.txns, errs[0] = m.Int64Counter("cellpay.gtr.transactions",
		metric.WithDescription("Transactions the GTR processed, by the status answered (none on an error) and gRPC code."))
	g.reroutes, errs[1] = m.Int64Counter("cellpay.gtr.reroutes",
		metric.WithDescription("Attempts given up before their point of no return and re-routed, by cell and reason class."))
	g.attempts, errs[2] = m.Int64Histogram("cellpay.gtr.attempts",
		metric.WithDescription("Cells tried per transaction."), metric.WithExplicitBucketBoundaries(0, 1, 2, 3, 4, 5))
	share, err := m.Int64ObservableGauge("cellpay.gtr.cell.health_share",
		metric.WithDescription("Share (0 to 100) of its traffic a cell takes, as health decides."))
	errs[3] = err
	inflight, err := m.Int64ObservableGauge("cellpay.gtr.cell.in_flight",
		metric.WithDescription("Attempts in progress on a cell."))
	errs[4] = err
	g.denied, errs[5] = m.Int64Counter("cellpay.gtr.auth.denied",
		metric.WithDescription("Partners' calls refused by authentication or authorization, by gRPC code and reason."))
	g.shed, errs[6] = m.Int64Counter("cellpay.gtr.shed",
		metric.WithDescription("Requests refused by admission control before reaching any cell, by reason (partner_rate, partner_in_flight, cell_busy)."))
	limit, err := m.Int64ObservableGauge("cellpay.gtr.cell.concurrency_limit",
		metric.WithDescription("A cell's adaptive concurrency limit at the GTR."))
	errs[7] = err
	weight, err := m.Int64ObservableGauge("cellpay.gtr.cell.weight",
		metric.WithDescription("A cell's configured weight in force: a drain or restore ramp's position, before health scales it."))
	errs = append(errs, err)
	target, err := m.Int64ObservableGauge("cellpay.gtr.cell.weight_target",
		metric.WithDescription("A cell's configured weight once any ramp has ended."))
	errs = append(errs, err)
	stalled, err := m.Float64ObservableGauge("cellpay.gtr.cell.ramp_stalled", metric.WithUnit("s"),
		metric.WithDescription("How long the routing table in force has missed a step of the cell's ramp; 0 while it keeps up."))
	errs = append(errs, err)
	ejections, err := m.Int64ObservableCounter("cellpay.gtr.cell.ejections",
		metric.WithDescription("Times health ejected a cell on this replica, by cause."))
	errs = append(errs, err)
	g.logins, err = m.Int64Counter("cellpay.gtr.admin.login_failures",
		metric.WithDescription("Failed operator logins on the admin API and the console (missing_token, invalid_token), and calls refused for too many of them (throttled)."))
	errs = append(errs, err)
	g.locates, err = m.Int64Counter("cellpay.gtr.locates",
		metric.WithDescription("Reads (op read) and captures, voids and refunds (op follow_up) by how they found the cell holding their transaction: the first cell asked (first), the owner the directory named (owner), or by asking every cell (fanout)."))
	errs = append(errs, err)
	g.across, err = m.Int64Counter("cellpay.gtr.routed_across",
		metric.WithDescription("Transactions routed outside their partner's home site, by home site and the site of the first cell ranked: the home site had too little healthy capacity in the pool (its spill_below), or no cell there."))
	errs = append(errs, err)
	g.duration, err = m.Float64Histogram("cellpay.gtr.request.duration", metric.WithUnit("s"),
		metric.WithDescription("Partners' calls by method: the time from the GTR's first interceptor to its answer, refusals included."),
		metric.WithExplicitBucketBoundaries(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cellAttrs := newAttrCache("cell", "")
	ejAttrs := newAttrCache("cell", "reason")
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for c := range cells {
			a := cellAttrs.of(c.ID, "").obs
			o.ObserveInt64(share, int64(c.HealthShare), a...)
			o.ObserveInt64(inflight, c.InFlight, a...)
			o.ObserveInt64(limit, int64(c.Limit), a...)
			o.ObserveInt64(weight, int64(c.Weight), a...)
			o.ObserveInt64(target, int64(c.TargetWeight), a...)
			o.ObserveFloat64(stalled, c.RampStalled.Seconds(), a...)
			for _, e := range c.Ejections {
				o.ObserveInt64(ejections, int64(e.N), ejAttrs.of(c.ID, e.Label).obs...)
			}
		}
		return nil
	}, share, inflight, limit, weight, target, stalled, ejections)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// Rerouted counts an attempt on cellID given up before its point of no
// return.
func (g *GTR) Rerouted(cellID string, err error, cellHealthy bool) {
	g.reroutes.Add(context.Background(), 1, g.rrAttrs.of(cellID, RerouteReason(err, cellHealthy)).add...)
}

// Denied counts a partner's call refused by authentication: code is the
// gRPC code answered, reason a word such as bad_key or other_partner.
func (g *GTR) Denied(code codes.Code, reason string) {
	g.denied.Add(context.Background(), 1, g.dnAttrs.of(code.String(), reason).add...)
}

// LoginFailed counts a failed operator login, or a call refused for too
// many (reason throttled).
func (g *GTR) LoginFailed(reason string) {
	g.logins.Add(context.Background(), 1, g.lgAttrs.of(reason, "").add...)
}

// Served records a partner's call of method (SubmitTransaction, ...) that
// took d.
func (g *GTR) Served(method string, d time.Duration) {
	g.duration.Record(context.Background(), d.Seconds(), g.mtAttrs.of(method, "").rec...)
}

// Located counts how a read or a follow-up (op) found its cell.
func (g *GTR) Located(op, how string) {
	g.locates.Add(context.Background(), 1, g.lcAttrs.of(op, how).add...)
}

// Across counts a transaction routed outside its partner's home site.
func (g *GTR) Across(homeSite, site string) {
	g.across.Add(context.Background(), 1, g.acAttrs.of(homeSite, site).add...)
}

// Shed counts a request refused by admission control.
func (g *GTR) Shed(reason string) {
	g.shed.Add(context.Background(), 1, g.shAttrs.of(reason, "").add...)
}

// Done counts a transaction whose processing ended with txn or err after
// attempts cells were tried.
func (g *GTR) Done(txn *cellpayv1.Transaction, err error, attempts int) {
	st := "none"
	if err == nil && txn != nil {
		st = txn.GetStatus().String()
	}
	ctx := context.Background()
	g.txns.Add(ctx, 1, g.txnAttrs.of(st, status.Code(err).String()).add...)
	g.attempts.Record(ctx, int64(attempts))
}

// RerouteReason classes why an attempt was given up:
//
//	not_for_cell  the cell is healthy but will not take the transaction
//	unavailable   the cell could not be reached
//	timeout       the attempt ran out of time (its own timeout or the caller's)
//	cell_fault    the cell failed the attempt itself (database, a PNR after the timeout)
func RerouteReason(err error, cellHealthy bool) string {
	if cellHealthy {
		return "not_for_cell"
	}
	switch status.Code(err) {
	case codes.Unavailable:
		return "unavailable"
	case codes.DeadlineExceeded, codes.Canceled:
		return "timeout"
	}
	return "cell_fault"
}
