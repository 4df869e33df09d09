package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// IssuerCheckKinds are the kinds of finding the issuer check counts, as
// its kind label says them.
var IssuerCheckKinds = []string{"missing", "recovered", "differs", "unresolved"}

// NewIssuerCheck registers the gauges of a cell's last check of the
// issuer's record of its effects on m; last is read at each collection
// and must not block: the last check's counts by kind (IssuerCheckKinds),
// when it ran, and false before the first check or on an instance that
// does not lead.
//
//	cellpay_cell_issuer_discrepancies{kind}          the last check's effects the cell does not hold as the issuer applied them: missing (no record, or one behind the issuer's outcome, and not recovered), recovered (missing or behind, recorded by the check from the issuer's record), differs (another outcome), unresolved (no outcome yet; the reconciler's)
//	cellpay_cell_issuer_check_timestamp_seconds      when the last check ran (Unix time)
func NewIssuerCheck(m metric.Meter, last func() (counts map[string]int, at time.Time, ok bool)) error {
	found, err := m.Int64ObservableGauge("cellpay.cell.issuer.discrepancies",
		metric.WithDescription("The last check of the issuer's record of this cell's effects: effects the cell holds no record of (missing), held no record of and recorded from the issuer's record (recovered), holds another outcome of (differs), or holds no outcome of yet (unresolved)."))
	if err != nil {
		return err
	}
	at, err := m.Float64ObservableGauge("cellpay.cell.issuer.check.timestamp", metric.WithUnit("s"),
		metric.WithDescription("When the last check of the issuer's record of this cell's effects ran."))
	if err != nil {
		return err
	}
	kinds := make([]metric.ObserveOption, len(IssuerCheckKinds))
	for i, k := range IssuerCheckKinds {
		kinds[i] = metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", k)))
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		counts, t, ok := last()
		if !ok {
			return nil
		}
		for i, k := range IssuerCheckKinds {
			o.ObserveInt64(found, int64(counts[k]), kinds[i])
		}
		o.ObserveFloat64(at, float64(t.Unix()))
		return nil
	}, found, at)
	return err
}
