package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReplicationStatus is the replication of the cell's primary, as its
// pg_stat_replication shows it to a role with pg_monitor (the app role is
// granted it, by pgcluster.EnsureRoles locally and by the operator's role
// setup in Kubernetes, so that a cell can export it). Without pg_monitor, the walsenders of other roles
// show no state, every count reads 0 and Visible is false.
type ReplicationStatus struct {
	// Visible is whether the role may read other roles' walsenders
	// (pg_read_all_stats, which pg_monitor holds): when false, the counts
	// say nothing.
	Visible bool
	// Standbys are the standbys streaming from this server.
	Standbys int64
	// Synchronous are those a commit waits for (sync_state sync or quorum).
	Synchronous int64
	// ReplayLag is the largest replay lag among them: how long ago the
	// last WAL they have applied was flushed here. Postgres clears a lag
	// once a standby has caught up and the primary is idle, which reads 0.
	ReplayLag time.Duration
}

// querier runs one query: a *pgx.Conn, a *pgxpool.Pool or a pgx.Tx.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Replication reads the standbys of the server the store writes to (the
// primary). It reads one row of a small view (one row per standby): bound
// it by ctx's deadline.
func (s *Store) Replication(ctx context.Context) (ReplicationStatus, error) {
	return readReplication(ctx, s.pool)
}

func readReplication(ctx context.Context, q querier) (ReplicationStatus, error) {
	var s ReplicationStatus
	var lag float64
	err := q.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'streaming'),
		count(*) FILTER (WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')),
		COALESCE(max(extract(epoch FROM replay_lag)), 0)::float8,
		pg_has_role('pg_read_all_stats', 'USAGE')
		FROM pg_stat_replication`).Scan(&s.Standbys, &s.Synchronous, &lag, &s.Visible)
	if err != nil {
		return s, fmt.Errorf("store: replication status: %w", err)
	}
	s.ReplayLag = time.Duration(lag * float64(time.Second))
	return s, nil
}
