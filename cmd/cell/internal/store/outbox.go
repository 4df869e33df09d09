package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/webhook"
)

// Outbox statuses.
const (
	CallbackPending   = "pending"   // due at NextAttemptAt (attempts 0: never tried)
	CallbackDelivered = "delivered" // an endpoint answered 2xx
	CallbackDead      = "dead"      // the last attempt failed: a dead letter
)

// ErrLeaseLost: the claim on an outbox row ran out and another notifier
// instance holds it now; the attempt's result is not recorded.
var ErrLeaseLost = errors.New("store: callback lease lost")

type event struct {
	id, typ string
	body    []byte
}

// newEvent renders r's final outcome as its callback body.
func newEvent(r *cellside.Record) (event, error) {
	data, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(r.Transaction())
	if err != nil {
		return event{}, err
	}
	body, err := json.Marshal(webhook.Event{Type: webhook.EventTypeFinal, Timestamp: r.UpdatedAt.UTC(), Data: data})
	if err != nil {
		return event{}, err
	}
	return event{id: webhook.EventID(r.PartnerID, r.TransactionID), typ: webhook.EventTypeFinal, body: body}, nil
}

// Callback is one outbox row.
type Callback struct {
	ID             int64
	EventID        string
	PartnerID      string
	TransactionID  string
	EventType      string
	Body           []byte
	Status         string
	Attempts       int
	NextAttemptAt  time.Time
	LastError      string
	LastHTTPStatus int
	LastEndpoint   string
	DeliveredTo    string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	DeliveredAt    time.Time // zero until delivered
}

const callbackColumns = `id, event_id, partner_id, transaction_id, event_type, body, status, attempts, next_attempt_at,
	last_error, last_http_status, last_endpoint, delivered_to, created_at, updated_at, delivered_at`

func scanCallback(row pgx.Row) (Callback, error) {
	var c Callback
	var delivered *time.Time
	err := row.Scan(&c.ID, &c.EventID, &c.PartnerID, &c.TransactionID, &c.EventType, &c.Body, &c.Status, &c.Attempts,
		&c.NextAttemptAt, &c.LastError, &c.LastHTTPStatus, &c.LastEndpoint, &c.DeliveredTo, &c.CreatedAt, &c.UpdatedAt, &delivered)
	if delivered != nil {
		c.DeliveredAt = delivered.UTC()
	}
	c.NextAttemptAt, c.CreatedAt, c.UpdatedAt = c.NextAttemptAt.UTC(), c.CreatedAt.UTC(), c.UpdatedAt.UTC()
	return c, err
}

func collectCallbacks(rows pgx.Rows) ([]Callback, error) {
	defer rows.Close()
	var out []Callback
	for rows.Next() {
		c, err := scanCallback(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// ClaimCallbacks claims up to limit pending rows due at now for owner,
// oldest due first, under a lease until now+lease: rows another instance
// holds (a live lease, or a row it is claiming this very moment, skipped
// with SKIP LOCKED) are not returned.
func (s *Store) ClaimCallbacks(ctx context.Context, owner string, now time.Time, lease time.Duration, limit int) ([]Callback, error) {
	rows, err := s.pool.Query(ctx, `UPDATE outbox o SET lease_owner = $1, lease_until = $3
		FROM (SELECT id AS due_id FROM outbox
		      WHERE status = 'pending' AND next_attempt_at <= $2 AND (lease_until IS NULL OR lease_until <= $2)
		      ORDER BY next_attempt_at LIMIT $4 FOR UPDATE SKIP LOCKED) due
		WHERE o.id = due.due_id
		RETURNING `+callbackColumns, owner, now, now.Add(lease), limit)
	if err != nil {
		return nil, fmt.Errorf("store: claim callbacks: %w", err)
	}
	out, err := collectCallbacks(rows)
	if err != nil {
		return nil, fmt.Errorf("store: claim callbacks: %w", err)
	}
	return out, nil
}

// Attempt is the result of one delivery attempt of an outbox row, as the
// notifier decided it.
type Attempt struct {
	Status         string    // CallbackPending (retry), CallbackDelivered or CallbackDead
	Attempts       int       // attempts made so far, this one included
	NextAttemptAt  time.Time // when pending
	LastError      string
	LastHTTPStatus int
	LastEndpoint   string
	DeliveredTo    string
	Now            time.Time
}

// RecordAttempt writes a, and releases the lease, for row id if owner
// still holds its lease; otherwise ErrLeaseLost.
func (s *Store) RecordAttempt(ctx context.Context, id int64, owner string, a Attempt) error {
	var delivered *time.Time
	if a.Status == CallbackDelivered {
		delivered = &a.Now
	}
	// One per delivered callback, so a commit per transaction of its own
	// without group commit: it shares the transactions' batches with it.
	n, err := s.exec(ctx, false, `UPDATE outbox SET status = $3, attempts = $4, next_attempt_at = $5, last_error = $6,
		last_http_status = $7, last_endpoint = $8, delivered_to = $9, delivered_at = $10, updated_at = $11,
		lease_owner = NULL, lease_until = NULL
		WHERE id = $1 AND lease_owner = $2 AND status = 'pending'`,
		id, owner, a.Status, a.Attempts, a.NextAttemptAt, a.LastError, a.LastHTTPStatus, a.LastEndpoint, a.DeliveredTo, delivered, a.Now)
	if err != nil {
		return fmt.Errorf("store: record attempt: %w", err)
	}
	if n != 1 {
		return ErrLeaseLost
	}
	return nil
}

// DisableEndpoint marks a partner's callback endpoint as gone (410).
func (s *Store) DisableEndpoint(ctx context.Context, partnerID, endpoint, reason string, now time.Time) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO callback_endpoints_disabled (partner_id, endpoint, disabled_at, reason)
		VALUES ($1, $2, $3, $4) ON CONFLICT (partner_id, endpoint) DO NOTHING`, partnerID, endpoint, now, reason)
	if err != nil {
		return fmt.Errorf("store: disable endpoint: %w", err)
	}
	return nil
}

// DisabledEndpoints returns the disabled endpoints of every partner that
// has one (a handful: it is read once per claimed batch).
func (s *Store) DisabledEndpoints(ctx context.Context) (map[string][]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT partner_id, endpoint FROM callback_endpoints_disabled ORDER BY partner_id, endpoint LIMIT 10000`)
	if err != nil {
		return nil, fmt.Errorf("store: disabled endpoints: %w", err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var p, e string
		if err := rows.Scan(&p, &e); err != nil {
			return nil, fmt.Errorf("store: disabled endpoints: %w", err)
		}
		out[p] = append(out[p], e)
	}
	return out, rows.Err()
}

// CallbackFilter selects outbox rows for operators.
type CallbackFilter struct {
	PartnerID string   // "" for every partner
	Statuses  []string // empty for every status
	// Failed keeps only rows with at least one failed attempt (pending
	// ones being retried, and dead ones).
	Failed bool
	Since  time.Time // created at or after; zero for any time
	Limit  int       // at most 1000
	// TransactionID, with PartnerID, keeps that transaction's rows only.
	TransactionID string
}

// ListCallbacks returns the rows f selects, oldest first.
func (s *Store) ListCallbacks(ctx context.Context, f CallbackFilter) ([]Callback, error) {
	if f.Limit <= 0 || f.Limit > 1000 {
		f.Limit = 1000
	}
	if f.Statuses == nil {
		f.Statuses = []string{} // NULL would select nothing
	}
	rows, err := s.pool.Query(ctx, `SELECT `+callbackColumns+` FROM outbox
		WHERE ($1 = '' OR partner_id = $1) AND (cardinality($2::text[]) = 0 OR status = ANY($2))
		AND (NOT $3 OR (attempts > 0 AND status <> 'delivered')) AND created_at >= $4
		AND ($6 = '' OR transaction_id = $6)
		ORDER BY created_at, id LIMIT $5`, f.PartnerID, f.Statuses, f.Failed, f.Since, f.Limit, f.TransactionID)
	if err != nil {
		return nil, fmt.Errorf("store: list callbacks: %w", err)
	}
	out, err := collectCallbacks(rows)
	if err != nil {
		return nil, fmt.Errorf("store: list callbacks: %w", err)
	}
	return out, nil
}

// ReplayCallbacks makes a partner's rows due again at now, with a fresh
// retry schedule: the one event eventID whatever its status, or (eventID
// "") every dead or pending row created at or after since. It re-enables
// the partner's disabled endpoints (an operator replays once they are
// fixed) and returns how many rows it made due.
func (s *Store) ReplayCallbacks(ctx context.Context, partnerID, eventID string, since, now time.Time) (int64, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("store: replay callbacks: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it does nothing
	tag, err := tx.Exec(ctx, `UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = $4,
		lease_owner = NULL, lease_until = NULL, updated_at = $4
		WHERE partner_id = $1 AND CASE WHEN $2 <> '' THEN event_id = $2
		                          ELSE status IN ('dead', 'pending') AND created_at >= $3 END`,
		partnerID, eventID, since, now)
	if err != nil {
		return 0, fmt.Errorf("store: replay callbacks: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM callback_endpoints_disabled WHERE partner_id = $1`, partnerID); err != nil {
		return 0, fmt.Errorf("store: replay callbacks: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("store: replay callbacks: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Backlog is the outbox's state for metrics.
type Backlog struct {
	Pending, Dead int64
	// OldestPending is the creation time of the oldest pending row; zero
	// when none is.
	OldestPending time.Time
}

// CallbackBacklog counts pending and dead rows.
func (s *Store) CallbackBacklog(ctx context.Context) (Backlog, error) {
	var b Backlog
	var oldest *time.Time
	err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'dead'),
		min(created_at) FILTER (WHERE status = 'pending') FROM outbox WHERE status <> 'delivered'`).Scan(&b.Pending, &b.Dead, &oldest)
	if err != nil {
		return b, fmt.Errorf("store: callback backlog: %w", err)
	}
	if oldest != nil {
		b.OldestPending = oldest.UTC()
	}
	return b, nil
}
