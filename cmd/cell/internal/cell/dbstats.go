package cell

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/internal/telemetry"
)

// dbStats samples the cell's database for its gauges (the oldest PENDING
// transaction, the primary's standbys) off the scrape's goroutine: a
// scrape reads the last sample and never waits for Postgres.
type dbStats struct {
	st   *store.Store
	log  *slog.Logger
	last atomic.Pointer[telemetry.DatabaseSample]
	// hidden is set once the role was found unable to see the standbys.
	hidden atomic.Bool
}

// dbSampleEvery is how often the database is sampled; each sample's
// queries share dbSampleTimeout.
const (
	dbSampleEvery   = 5 * time.Second
	dbSampleTimeout = 2 * time.Second
)

// Sample is the last sample; zero before the first.
func (d *dbStats) Sample() telemetry.DatabaseSample {
	if s := d.last.Load(); s != nil {
		return *s
	}
	return telemetry.DatabaseSample{}
}

// run samples until ctx ends. A failed query keeps the last value of what
// it reads (a database that does not answer is the health check's and
// the other alerts' to report), logged once per failure in a row.
func (d *dbStats) run(ctx context.Context) {
	t := time.NewTicker(dbSampleEvery)
	defer t.Stop()
	failing := false
	for {
		err := d.sample(ctx)
		if err != nil && !failing && ctx.Err() == nil {
			d.log.Warn("database metrics: sample failed; keeping the last", "error", err)
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *dbStats) sample(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, dbSampleTimeout)
	defer cancel()
	s := d.Sample()
	oldest, err := d.st.OldestPending(ctx)
	if err == nil {
		s.OldestPending = 0
		if !oldest.IsZero() {
			s.OldestPending = max(0, time.Since(oldest))
		}
	}
	repl, rerr := d.st.Replication(ctx)
	if rerr == nil {
		s.Replication = repl.Visible
		s.Standbys, s.SyncStandbys, s.ReplayLag = repl.Standbys, repl.Synchronous, repl.ReplayLag
		if !repl.Visible && d.hidden.CompareAndSwap(false, true) {
			d.log.Warn("database metrics: the cell's role cannot read pg_stat_replication (grant it pg_monitor); standby gauges not exported")
		}
	}
	d.last.Store(&s)
	if err != nil {
		return err
	}
	return rerr
}
