package refsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/metric"

	"github.com/cellpay/cellpay/internal/refdata"
)

// reportLoop publishes the cell's status (cellStatus) every StatusInterval and whenever the
// served version changes or a version is refused. Core NATS: a report lost
// while NATS is away is simply replaced by the next one.
func (s *Syncer) reportLoop(ctx context.Context, nc *nats.Conn) {
	t := time.NewTicker(s.cfg.StatusInterval)
	defer t.Stop()
	subject := refdata.StatusSubjectPrefix + s.cfg.CellID
	for {
		if nc.IsConnected() {
			if b, err := json.Marshal(s.cellStatus(ctx)); err == nil {
				_ = nc.Publish(subject, b)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
	}
}

// RegisterMetrics registers the reference data instruments on m, the
// cell's meter; they are read at each collection (a scrape), never on the
// consumer's path. The cell's ID is a label of the process (see
// telemetry.Config.Labels).
//
//	cellpay_refdata_version             the version served (0: a bootstrap file)
//	cellpay_refdata_serving             1 when a version is served
//	cellpay_refdata_staleness_seconds   age of the served version (-1: none)
//	cellpay_refdata_applied_total       versions applied from NATS since start
//	cellpay_refdata_refused_total       versions refused since start
//	cellpay_refdata_last_apply_seconds  how long the last apply took
//	cellpay_refdata_nats_connected      1 while connected to NATS
func (s *Syncer) RegisterMetrics(m metric.Meter) (metric.Registration, error) {
	var errs []error
	note := func(err error) { errs = append(errs, err) }
	version, err := m.Int64ObservableGauge("cellpay.refdata.version",
		metric.WithDescription("The reference data version the cell serves (0: a bootstrap file)."))
	note(err)
	serving, err := m.Int64ObservableGauge("cellpay.refdata.serving",
		metric.WithDescription("1 when the cell serves a version."))
	note(err)
	staleness, err := m.Float64ObservableGauge("cellpay.refdata.staleness", metric.WithUnit("s"),
		metric.WithDescription("Age of the served version: since it was published (or the bootstrap file loaded); -1 when none is served."))
	note(err)
	applied, err := m.Int64ObservableCounter("cellpay.refdata.applied",
		metric.WithDescription("Versions applied from NATS since start."))
	note(err)
	refused, err := m.Int64ObservableCounter("cellpay.refdata.refused",
		metric.WithDescription("Versions refused (malformed or inconsistent) since start."))
	note(err)
	lastApply, err := m.Float64ObservableGauge("cellpay.refdata.last_apply", metric.WithUnit("s"),
		metric.WithDescription("How long the last apply took (validate, Postgres, memory)."))
	note(err)
	connected, err := m.Int64ObservableGauge("cellpay.refdata.nats_connected",
		metric.WithDescription("1 while the cell is connected to NATS."))
	note(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("refsync: metrics: %w", err)
	}
	one := func(b bool) int64 {
		if b {
			return 1
		}
		return 0
	}
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := s.Status()
		o.ObserveInt64(version, int64(st.Version))
		o.ObserveInt64(serving, one(s.Serving()))
		o.ObserveFloat64(staleness, s.Staleness().Seconds())
		o.ObserveInt64(applied, int64(s.applied.Load()))
		o.ObserveInt64(refused, int64(st.Refused))
		o.ObserveFloat64(lastApply, time.Duration(s.lastApply.Load()).Seconds())
		o.ObserveInt64(connected, one(s.connected.Load()))
		return nil
	}, version, serving, staleness, applied, refused, lastApply, connected)
}
