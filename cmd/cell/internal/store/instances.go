package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// Several instances of a cell share its database (docs/design/cell-instances.md).
// Each holds a lease in the instances table, renewed by itself
// (RenewLease) and compared with the database's clock only; a row an
// attempt works on names its instance (transactions.owner).

// ActiveFor bounds how long a row's owner counts as still working on it
// after the row was last written: longer than any attempt can last once
// recorded (the GTR's Proceed, 5 s, then the issuer, 5 s, then the final
// write's tries, 3 × 5 s), so that an ownership left behind (a release that
// failed) does not hold a row for the owner's whole life.
const ActiveFor = 60 * time.Second

var activeFor = ActiveFor.Milliseconds()

// liveSQL is true when the instance named by the expression owner holds a
// live lease.
func liveSQL(owner string) string {
	return `EXISTS (SELECT 1 FROM instances i WHERE i.id = ` + owner + ` AND i.lease_until > now())`
}

// activeSQL is true when an attempt is working on row t: it has an owner,
// written within ActiveFor, and the owner is this instance (param 3) or a
// sibling with a live lease. Param 4 is ActiveFor in milliseconds.
var activeSQL = `(t.owner <> '' AND t.updated_at > now() - $4::bigint * interval '1 millisecond'
	AND (t.owner = $3 OR ` + liveSQL("t.owner") + `))`

// SetInstance names this process among the cell's instances; it is called
// once, before the store is used. The rows it inserts or reclaims are
// owned by id. A store with no instance owns nothing (a lone process in a
// test: its rows are never seen as worked on).
func (s *Store) SetInstance(id string) { s.instance = id }

// Instance is the name SetInstance gave.
func (s *Store) Instance() string { return s.instance }

// RenewLease makes this instance's lease run until ttl from now (the
// database's now), and records the reference data version it serves (nil:
// none).
func (s *Store) RenewLease(ctx context.Context, ttl time.Duration, refdataVersion *uint64) error {
	var v *int64
	if refdataVersion != nil {
		n := int64(*refdataVersion)
		v = &n
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO instances (id, lease_until, refdata_version)
		VALUES ($1, now() + $2::bigint * interval '1 millisecond', $3)
		ON CONFLICT (id) DO UPDATE SET lease_until = EXCLUDED.lease_until, refdata_version = EXCLUDED.refdata_version`,
		s.instance, ttl.Milliseconds(), v)
	if err != nil {
		return fmt.Errorf("store: lease: %w", err)
	}
	return nil
}

// DropLease ends this instance's lease at once: a stopping instance, whose
// attempts have finished, leaves its rows to its siblings without waiting
// for the lease to run out.
func (s *Store) DropLease(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM instances WHERE id = $1`, s.instance); err != nil {
		return fmt.Errorf("store: drop lease: %w", err)
	}
	return nil
}

// Active reports whether an attempt is working on k's record now, in this
// instance or in a live sibling: the row has an owner, the owner's lease is
// live (or it is this instance), and the row was written within ActiveFor.
// false for a record that does not exist.
func (s *Store) Active(ctx context.Context, k idempotency.Key) (bool, error) {
	var active bool
	err := s.pool.QueryRow(ctx, `SELECT `+activeSQL+` FROM transactions t
		WHERE partner_id = $1 AND transaction_id = $2`, k.PartnerID, k.TransactionID, s.instance, activeFor).Scan(&active)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: active: %w", err)
	}
	return active, nil
}

// GetActive reads k's record and whether an attempt works on it (Active),
// in one statement: one snapshot of the row, so that a record read in
// sending is never paired with an Active read after its attempt ended.
// ErrNotFound as Get.
func (s *Store) GetActive(ctx context.Context, k idempotency.Key) (*cellside.Record, bool, error) {
	var active bool
	r, err := scanWith(s.pool.QueryRow(ctx, `SELECT `+readColumns+`, `+activeSQL+` FROM transactions t
		WHERE partner_id = $1 AND transaction_id = $2`, k.PartnerID, k.TransactionID, s.instance, activeFor), &active)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, false, fmt.Errorf("store: get: %w", err)
	}
	return r, active, err
}

// Release ends this instance's ownership of k's record when the attempt
// leaves it in state sending (a PENDING answer): the reconciler may resolve
// it from now on, and a duplicate answers PENDING without waiting.
func (s *Store) Release(ctx context.Context, k idempotency.Key) error {
	_, err := s.pool.Exec(ctx, `UPDATE transactions SET owner = ''
		WHERE partner_id = $1 AND transaction_id = $2 AND owner = $3 AND state = 'sending'`,
		k.PartnerID, k.TransactionID, s.instance)
	if err != nil {
		return fmt.Errorf("store: release: %w", err)
	}
	return nil
}

// AbandonUnsent marks abandoned the transactions still short of their
// point of no return that no live instance works on: this instance's own
// (a previous life under the same name: nothing of this one is in flight
// yet), those of siblings whose lease has run out, and those with no
// owner. A live sibling's are left alone. An instance calls it once at
// start, after RenewLease and before it serves: "restart, not resume"
// means no such transaction is ever continued. It returns how many were
// marked. Its own rows past their point of no return (sending) it
// releases: no attempt of its previous life works on them any more, and
// the reconciler may resolve them at once rather than after ActiveFor.
func (s *Store) AbandonUnsent(ctx context.Context, now time.Time) (int64, error) {
	if _, err := s.pool.Exec(ctx, `UPDATE transactions SET owner = '' WHERE owner = $1 AND state IN ('sending', 'deciding')`, s.instance); err != nil {
		return 0, fmt.Errorf("store: abandon: %w", err)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE transactions t SET state = 'abandoned', updated_at = $1, owner = ''
		WHERE state = 'received' AND (owner = $2 OR owner = '' OR NOT `+liveSQL("t.owner")+`)`, now, s.instance)
	if err != nil {
		return 0, fmt.Errorf("store: abandon: %w", err)
	}
	return tag.RowsAffected(), nil
}

// AbandonOrphans marks abandoned the transactions short of their point of
// no return, last written before before, whose owner is gone (its lease ran
// out, or there is none), or last written before stuck whoever owns them.
// It is safe against a live attempt all the same: the write that passes
// the point of no return is conditional on state received, so an attempt
// whose row was abandoned under it steps back, re-routable. The
// reconciler's instance calls it every round, so that the leftovers of an
// instance that never comes back do not wait for its restart.
func (s *Store) AbandonOrphans(ctx context.Context, now, before, stuck time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE transactions t SET state = 'abandoned', updated_at = $1, owner = ''
		WHERE state = 'received' AND updated_at < $2
		AND (owner = '' OR updated_at < $3 OR (owner <> $4 AND NOT `+liveSQL("t.owner")+`))`, now, before, stuck, s.instance)
	if err != nil {
		return 0, fmt.Errorf("store: abandon orphans: %w", err)
	}
	return tag.RowsAffected(), nil
}

// ServedRefdata returns the reference data version every live instance
// serves, the minimum over them; ok is false when none serves one.
func (s *Store) ServedRefdata(ctx context.Context) (version uint64, ok bool, err error) {
	var v *int64
	err = s.pool.QueryRow(ctx, `SELECT min(refdata_version) FROM instances
		WHERE lease_until > now() AND refdata_version IS NOT NULL`).Scan(&v)
	if err != nil {
		return 0, false, fmt.Errorf("store: served refdata: %w", err)
	}
	if v == nil {
		return 0, false, nil
	}
	return uint64(*v), true, nil
}

// ReconcilerLock is the advisory lock key that makes one instance of a
// cell its reconciler.
const ReconcilerLock int64 = 0x63656c6c72656331 // "cellrec1"

// LockSession is a connection of its own for session advisory locks: a
// lock taken on it is held as long as the connection lives, and released
// by Postgres when it closes or the server finds the client gone (TCP
// keepalives, below). It is not safe for concurrent use.
type LockSession struct{ conn *pgx.Conn }

// lockKeepalive makes Postgres notice a lock holder that vanished without
// closing its connection (a partition, a frozen node) within about 5 +
// 3 × 2 = 11 s, and release its lock.
var lockKeepalive = map[string]string{
	"tcp_keepalives_idle": "5", "tcp_keepalives_interval": "2", "tcp_keepalives_count": "3",
}

// LockSession opens a lock session.
func (s *Store) LockSession(ctx context.Context) (*LockSession, error) {
	cfg := s.healthCfg.Copy()
	for k, v := range lockKeepalive {
		cfg.RuntimeParams[k] = v
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: lock session: %w", err)
	}
	return &LockSession{conn: conn}, nil
}

// TryLock takes the advisory lock key without waiting; false when another
// session holds it.
func (l *LockSession) TryLock(ctx context.Context, key int64) (bool, error) {
	var ok bool
	if err := l.conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil {
		return false, fmt.Errorf("store: lock: %w", err)
	}
	return ok, nil
}

// Check reports whether the session, and so the locks it holds, lives.
func (l *LockSession) Check(ctx context.Context) error {
	if _, err := l.conn.Exec(ctx, `SELECT 1`); err != nil {
		return fmt.Errorf("store: lock session lost: %w", err)
	}
	return nil
}

// Close closes the session, which releases its locks.
func (l *LockSession) Close(ctx context.Context) { _ = l.conn.Close(ctx) }
