package telemetry

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// NATSSample is what a component reports of its NATS side at a collection:
// Drift calls its argument for every stream or bucket the component opened
// and whether the one it found differs from its own configuration
// (jsconf.Drift.Each); Dropped, if set, counts the best-effort directory
// updates dropped from a full queue; Forged, if set, the directory entry
// revisions read and ignored (not signed by their owner, or a change the
// rules do not allow).
type NATSSample struct {
	Drift   func(func(name string, differs bool))
	Dropped func() int64
	Forged  func() int64
}

// NewNATS registers the gauges of a component's NATS side on m; both funcs
// are read at each collection and must not block.
//
//	cellpay_nats_config_differs{stream}        1: the stream or bucket found differs from this component's configuration, kept as it is
//	cellpay_cell_directory_dropped_total       best-effort directory updates dropped (cells only)
//	cellpay_cell_directory_forged_total        directory entry revisions read and ignored as forged (cells only)
func NewNATS(m metric.Meter, s NATSSample) error {
	differs, err := m.Int64ObservableGauge("cellpay.nats.config.differs",
		metric.WithDescription("1 when a stream or bucket this component uses exists with limits (replicas, age, size) other than its own configuration; kept as found, never rewritten."))
	insts := []metric.Observable{differs}
	var dropped, forged metric.Int64ObservableCounter
	if s.Forged != nil {
		var err2 error
		forged, err2 = m.Int64ObservableCounter("cellpay.cell.directory.forged",
			metric.WithDescription("Transaction directory entry revisions this cell read and ignored: not signed by the owner they name with a certificate of the platform's CA, a change the directory's rules do not allow, or a delete marker. Any is a compromised or misbehaving writer."))
		err = errors.Join(err, err2)
		insts = append(insts, forged)
	}
	if s.Dropped != nil {
		var err2 error
		dropped, err2 = m.Int64ObservableCounter("cellpay.cell.directory.dropped",
			metric.WithDescription("Best-effort transaction directory updates (final answers, abandons) dropped because their queue was full: entries that stay behind their records."))
		err = errors.Join(err, err2)
		insts = append(insts, dropped)
	}
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if s.Drift != nil {
			s.Drift(func(name string, d bool) {
				v := int64(0)
				if d {
					v = 1
				}
				o.ObserveInt64(differs, v, metric.WithAttributes(attribute.String("stream", name)))
			})
		}
		if s.Dropped != nil {
			o.ObserveInt64(dropped, s.Dropped())
		}
		if s.Forged != nil {
			o.ObserveInt64(forged, s.Forged())
		}
		return nil
	}, insts...)
	return err
}
