package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// NewRetention registers the gauge of a cell's room for rows on m; end is
// read at each collection and must not block (the retention keeper's last
// round: when the partitions that exist end, and false before a round, or on
// an instance that does not lead).
//
//	cellpay_cell_db_partitions_end_timestamp_seconds    when the partitions of transactions and callbacks that exist run out (Unix time)
func NewRetention(m metric.Meter, end func() (time.Time, bool)) error {
	g, err := m.Float64ObservableGauge("cellpay.cell.db.partitions.end.timestamp", metric.WithUnit("s"),
		metric.WithDescription("When the partitions of transactions and callbacks that exist run out, as the leading instance last listed them: past it a transaction cannot be recorded."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if t, ok := end(); ok {
			o.ObserveFloat64(g, float64(t.Unix()))
		}
		return nil
	}, g)
	return err
}
