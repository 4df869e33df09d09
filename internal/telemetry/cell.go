package telemetry

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// Cell holds a cell's domain instruments. Its methods only add to
// in-memory instruments: they never block or allocate after warm-up.
type Cell struct {
	txns       metric.Int64Counter
	pnr        metric.Int64Counter
	issuer     metric.Float64Histogram
	reconciled metric.Int64Counter
	directory  metric.Int64Counter
	filed      metric.Int64Counter
	state      *attrCache // state
	result     *attrCache // result
	call       *attrCache // method, code
}

// NewCell registers a cell's instruments on m.
//
//	cellpay_cell_transactions_total{state}                 attempts the cell answered, by the state answered (approved, declined, failed, pending) or reroutable / rejected
//	cellpay_cell_pnr_total{result}                         points of no return the GTR confirmed or refused
//	cellpay_cell_issuer_duration_seconds{method,code}      issuer calls (authorize, inquire)
//	cellpay_cell_reconciled_total{state}                   transactions the reconciler resolved, by the state recorded
//	cellpay_cell_directory_total{result}                   directory claims: claimed, taken_over, held, unclaimed (decided at home without one), unavailable
//	cellpay_cell_directory_filed_total{result}             entries of transactions decided without a claim, written once the directory was back: filed, or conflict (another cell's)
func NewCell(m metric.Meter) (*Cell, error) {
	c := &Cell{state: newAttrCache("state", ""), result: newAttrCache("result", ""), call: newAttrCache("method", "code")}
	var errs [6]error
	c.txns, errs[0] = m.Int64Counter("cellpay.cell.transactions",
		metric.WithDescription("Attempts the cell answered, by the state answered, or reroutable or rejected."))
	c.pnr, errs[1] = m.Int64Counter("cellpay.cell.pnr",
		metric.WithDescription("Points of no return the GTR confirmed or refused."))
	c.issuer, errs[2] = m.Float64Histogram("cellpay.cell.issuer.duration", metric.WithUnit("s"),
		metric.WithDescription("Issuer call latency, by method and gRPC code."),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
	c.reconciled, errs[3] = m.Int64Counter("cellpay.cell.reconciled",
		metric.WithDescription("Transactions past their point of no return the reconciler resolved, by the state recorded."))
	c.directory, errs[4] = m.Int64Counter("cellpay.cell.directory",
		metric.WithDescription("Transaction directory claims, by result: claimed, taken_over, held (another cell's), unclaimed (decided at the natural home without a claim), unavailable."))
	c.filed, errs[5] = m.Int64Counter("cellpay.cell.directory.filed",
		metric.WithDescription("Directory entries of transactions decided at their natural home without a claim (in a directory outage), written once the directory was back, by result: filed, or conflict (the entry was another cell's: the ID was decided in two cells)."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	return c, nil
}

// Directory counts a transaction directory claim's result.
func (c *Cell) Directory(result string) {
	c.directory.Add(context.Background(), 1, c.result.of(result, "").add...)
}

// Filed counts a directory entry written after an outage ("filed"), or
// found another cell's ("conflict").
func (c *Cell) Filed(result string) {
	c.filed.Add(context.Background(), 1, c.result.of(result, "").add...)
}

// Finished counts an attempt's answer: a record's state ("sending" is
// counted as pending), or "reroutable" or "rejected".
func (c *Cell) Finished(state string) {
	if state == "sending" {
		state = "pending"
	}
	c.txns.Add(context.Background(), 1, c.state.of(state, "").add...)
}

// PNR counts a point of no return the GTR confirmed, or refused.
func (c *Cell) PNR(confirmed bool) {
	r := "refused"
	if confirmed {
		r = "confirmed"
	}
	c.pnr.Add(context.Background(), 1, c.result.of(r, "").add...)
}

// Reconciled counts a transaction the reconciler recorded in state.
func (c *Cell) Reconciled(state string) {
	c.reconciled.Add(context.Background(), 1, c.state.of(state, "").add...)
}

// Issuer returns next timing its Authorize and Inquire calls.
func (c *Cell) Issuer(next issuerproto.IssuerClient) issuerproto.IssuerClient {
	return timedIssuer{next, c}
}

type timedIssuer struct {
	issuerproto.IssuerClient
	c *Cell
}

func (t timedIssuer) Authorize(ctx context.Context, in *issuerproto.AuthorizeRequest, opts ...grpc.CallOption) (*issuerproto.AuthorizeResponse, error) {
	start := time.Now()
	resp, err := t.IssuerClient.Authorize(ctx, in, opts...)
	t.c.observe("authorize", start, err)
	return resp, err
}

func (t timedIssuer) Inquire(ctx context.Context, in *issuerproto.InquireRequest, opts ...grpc.CallOption) (*issuerproto.AuthorizeResponse, error) {
	start := time.Now()
	resp, err := t.IssuerClient.Inquire(ctx, in, opts...)
	t.c.observe("inquire", start, err)
	return resp, err
}

func (c *Cell) observe(method string, start time.Time, err error) {
	c.issuer.Record(context.Background(), time.Since(start).Seconds(), c.call.of(method, status.Code(err).String()).rec...)
}
