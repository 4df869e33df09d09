package telemetry

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// DatabaseSample is a cell's last sample of its own database.
type DatabaseSample struct {
	// OldestPending is the age of the oldest PENDING transaction, 0 when
	// none is.
	OldestPending time.Duration
	// Replication is whether the next three are known: the cell's role
	// can read pg_stat_replication (pg_monitor) and has read it. When
	// false, their gauges are not exported, rather than read as "no
	// standby".
	Replication bool
	// Standbys and SyncStandbys count the primary's streaming standbys
	// and those a commit waits for; ReplayLag is the largest replay lag.
	Standbys, SyncStandbys int64
	ReplayLag              time.Duration
}

// NewDatabase registers the gauges of a cell's database on m; sample is
// read at each collection and must not block (it returns the last sample
// taken off the collection's goroutine).
//
//	cellpay_cell_pending_oldest_seconds    age of the oldest PENDING transaction (0: none)
//	cellpay_cell_db_standbys               standbys streaming from the cell's primary
//	cellpay_cell_db_sync_standbys          those a commit waits for (0: commits on one server)
//	cellpay_cell_db_replay_lag_seconds     the largest replay lag among them
//
// The last three are absent while the cell's role cannot read
// pg_stat_replication (no pg_monitor).
func NewDatabase(m metric.Meter, sample func() DatabaseSample) error {
	var errs [4]error
	oldest, err := m.Float64ObservableGauge("cellpay.cell.pending.oldest", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest transaction answered PENDING whose outcome is not yet known, sampled from the cell's database."))
	errs[0] = err
	standbys, err := m.Int64ObservableGauge("cellpay.cell.db.standbys",
		metric.WithDescription("Standbys streaming from the cell's primary (pg_stat_replication), sampled."))
	errs[1] = err
	syncStandbys, err := m.Int64ObservableGauge("cellpay.cell.db.sync_standbys",
		metric.WithDescription("Streaming standbys a commit waits for (sync_state sync or quorum), sampled; 0 means commits are on one server."))
	errs[2] = err
	lag, err := m.Float64ObservableGauge("cellpay.cell.db.replay_lag", metric.WithUnit("s"),
		metric.WithDescription("Largest replay lag of the cell's standbys (pg_stat_replication.replay_lag), sampled."))
	errs[3] = err
	if err := errors.Join(errs[:]...); err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := sample()
		o.ObserveFloat64(oldest, s.OldestPending.Seconds())
		if s.Replication {
			o.ObserveInt64(standbys, s.Standbys)
			o.ObserveInt64(syncStandbys, s.SyncStandbys)
			o.ObserveFloat64(lag, s.ReplayLag.Seconds())
		}
		return nil
	}, oldest, standbys, syncStandbys, lag)
	return err
}
