package telemetry

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Callbacks holds a cell notifier's instruments. Its methods only add to
// in-memory instruments; they never block.
//
//	cellpay_cell_callback_attempts_total{result}            endpoint calls, by result (delivered, failed, gone, throttled)
//	cellpay_cell_callback_attempt_duration_seconds{result}  one endpoint call's latency
//	cellpay_cell_callback_delivery_lag_seconds              from the outcome's record to its delivery
//	cellpay_cell_callback_dead_letters_total                events that failed their last attempt
//	cellpay_cell_callback_backlog{status}                   outbox rows pending or dead (sampled)
//	cellpay_cell_callback_oldest_pending_seconds            age of the oldest pending row (sampled)
type Callbacks struct {
	attempts metric.Int64Counter
	duration metric.Float64Histogram
	lag      metric.Float64Histogram
	dead     metric.Int64Counter
	result   *attrCache
	status   *attrCache
}

// BacklogFunc samples the outbox: pending and dead rows, and the age of
// the oldest pending one.
type BacklogFunc func() (pending, dead int64, oldest time.Duration)

// NewCallbacks registers the notifier's instruments on m; backlog is read
// at each collection (it must not block: it returns the last sample).
func NewCallbacks(m metric.Meter, backlog BacklogFunc) (*Callbacks, error) {
	c := &Callbacks{result: newAttrCache("result", ""), status: newAttrCache("status", "")}
	var errs [6]error
	c.attempts, errs[0] = m.Int64Counter("cellpay.cell.callback.attempts",
		metric.WithDescription("Callback endpoint calls, by result: delivered, failed, gone (410), throttled (429/503)."))
	c.duration, errs[1] = m.Float64Histogram("cellpay.cell.callback.attempt.duration", metric.WithUnit("s"),
		metric.WithDescription("One callback endpoint call's latency, by result."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15))
	c.lag, errs[2] = m.Float64Histogram("cellpay.cell.callback.delivery.lag", metric.WithUnit("s"),
		metric.WithDescription("From a final outcome's record to its callback's delivery."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600))
	c.dead, errs[3] = m.Int64Counter("cellpay.cell.callback.dead_letters",
		metric.WithDescription("Callback events that failed their last attempt."))
	var backlogGauge metric.Int64ObservableGauge
	backlogGauge, errs[4] = m.Int64ObservableGauge("cellpay.cell.callback.backlog",
		metric.WithDescription("Outbox rows pending or dead, sampled by the notifier."))
	var oldest metric.Float64ObservableGauge
	oldest, errs[5] = m.Float64ObservableGauge("cellpay.cell.callback.oldest_pending", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest pending outbox row, sampled by the notifier."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		p, d, age := backlog()
		o.ObserveInt64(backlogGauge, p, c.status.of("pending", "").obs...)
		o.ObserveInt64(backlogGauge, d, c.status.of("dead", "").obs...)
		o.ObserveFloat64(oldest, age.Seconds())
		return nil
	}, backlogGauge, oldest)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Attempt records one endpoint call.
func (c *Callbacks) Attempt(result string, d time.Duration) {
	c.attempts.Add(context.Background(), 1, c.result.of(result, "").add...)
	c.duration.Record(context.Background(), d.Seconds(), c.result.of(result, "").rec...)
}

// Delivered records a delivery lag.
func (c *Callbacks) Delivered(lag time.Duration) {
	c.lag.Record(context.Background(), lag.Seconds())
}

// Dead counts a dead letter.
func (c *Callbacks) Dead() { c.dead.Add(context.Background(), 1) }
