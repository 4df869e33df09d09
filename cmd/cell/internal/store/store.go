// Package store is a cell's Postgres: its transactions, its risk limits
// and its callback outbox.
// A transaction is keyed by (partner ID, transaction ID): transaction IDs
// are a namespace per partner, and every query that finds a transaction
// names both. The schema is embedded and migrated on Open, or by Migrate as
// the schema's owner before Connect as a role that can only read and write
// rows (the roles pgcluster.EnsureRoles makes locally). Every write that the orchestrator
// depends on is a single statement, durable (synchronous commit) when it
// returns, either in its own transaction or, with group commit
// (EnableGroupCommit: the insert, the reclaim and every persist of a
// state), in a batch shared with concurrent writes that commits whole; a
// final outcome's statement writes its outbox row too.
//
// The store never sees a full card number: rows carry the masked PAN and a
// keyed hash only.
package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Errors callers branch on.
var (
	ErrNotFound = errors.New("store: transaction not found")
	// ErrStateChanged means a conditional write found the record in another
	// state than expected: someone else moved it.
	ErrStateChanged = errors.New("store: record is not in the expected state")
)

// Store is a cell's database. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool

	// health is the health check's connection (health.go); healthCfg
	// connects it and the lock sessions.
	health    *health
	healthCfg *pgx.ConnConfig

	// instance names this process among the cell's instances: the owner
	// of the rows it inserts or reclaims (see instances.go).
	instance string

	// group, when set, gathers the durable writes of concurrent
	// transactions into shared commits (group.go).
	group *committer

	// outboxed, when set, is called after a final outcome and its outbox
	// row are committed (OnOutbox).
	outboxed atomic.Pointer[func()]
	// committed is when exec last succeeded, in Unix nanoseconds.
	committed atomic.Int64
}

// OnOutbox sets f to be called after every commit of a final outcome with
// its outbox row, so that this instance's notifier delivers it at once
// instead of at its next poll. f must not block: it runs on the
// transaction's goroutine. It may be set while the store is in use.
func (s *Store) OnOutbox(f func()) { s.outboxed.Store(&f) }

// outboxWritten calls OnOutbox's function, if set: an outbox row was
// committed.
func (s *Store) outboxWritten() {
	if f := s.outboxed.Load(); f != nil {
		(*f)()
	}
}

// DefaultStatementTimeout bounds every statement of a cell, unless the
// database URL sets statement_timeout itself: no query waits without end
// on a lock or a sick disk.
const DefaultStatementTimeout = "5s"

// Open connects to url, applies any pending migrations over it and returns
// the store: one role that both owns the schema and serves (tests, and
// setups without separate roles).
func Open(ctx context.Context, url string, maxConns int32) (*Store, error) {
	st, err := Connect(ctx, url, maxConns)
	if err != nil {
		return nil, err
	}
	if err := migrateUp(ctx, st.pool); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// Migrate applies any pending migrations to the database at url, as the
// role url names (the schema's owner), on a connection of its own. Its
// statements are bounded as the pool's are (DefaultStatementTimeout): a
// migration waiting for a lock that serving cells hold would otherwise
// queue every query behind it.
func Migrate(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	if _, ok := cfg.RuntimeParams["statement_timeout"]; !ok {
		cfg.RuntimeParams["statement_timeout"] = DefaultStatementTimeout
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return runMigrations(ctx, conn)
}

// Connect connects to url and returns the store without migrating: for a
// role that may only read and write rows, once Migrate has run as the
// owner.
func Connect(ctx context.Context, url string, maxConns int32) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["statement_timeout"]; !ok {
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = DefaultStatementTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: open: %w", err)
	}
	// pgxpool connects lazily: fail here, not on the first transaction.
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: open: %w", err)
	}
	return &Store{pool: pool, health: newHealth(cfg.ConnConfig.Copy()), healthCfg: cfg.ConnConfig.Copy()}, nil
}

func migrateUp(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	defer conn.Release()
	return runMigrations(ctx, conn.Conn())
}

func runMigrations(ctx context.Context, conn *pgx.Conn) error {
	m, err := newMigrator(ctx, conn)
	if err != nil {
		return err
	}
	if err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	return nil
}

// newMigrator returns a migrator over conn with the embedded migrations.
func newMigrator(ctx context.Context, conn *pgx.Conn) (*migrate.Migrator, error) {
	m, err := migrate.NewMigrator(ctx, conn, "schema_version")
	if err != nil {
		return nil, fmt.Errorf("store: migrate: %w", err)
	}
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return nil, fmt.Errorf("store: migrate: %w", err)
	}
	if err := m.LoadMigrations(sub); err != nil {
		return nil, fmt.Errorf("store: migrate: %w", err)
	}
	return m, nil
}

// Close closes the pool and the health check's connection.
func (s *Store) Close() {
	if s.group != nil {
		s.group.close()
	}
	s.pool.Close()
	s.health.close()
}

// Ping checks that the database answers, on the health check's own
// connection (made again, in the background, after a failure), never
// waiting for the pool.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.health.ping(ctx); err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	return nil
}

const columns = `transaction_id, fingerprint, state, decline_reason, auth_code, payment_type, partner_id, market,
	amount, currency, settlement_amount, settlement_currency, risk_amount, merchant_id, mcc, merchant_country,
	masked_pan, pan_hash, refdata_version, route_rule, attempt, cell_id, created_at, updated_at,
	pan_hash_key_id, fingerprint_key_id`

// readColumns are columns and, after them, what only reads need: a
// follow-up's original and an authorization's ledger (written by
// HoldFollowUp and the follow-ups' outcomes, never by Insert).
const readColumns = columns + `, original_transaction_id, captured, refunded, held_capture, held_refund, voided`

func args(r *cellside.Record) []any {
	return []any{r.TransactionID, r.Fingerprint[:], string(r.State), r.DeclineReason, r.AuthCode, int16(r.PaymentType),
		r.PartnerID, r.Market, r.Amount, r.Currency, r.SettlementAmount, r.SettlementCurrency, r.RiskAmount,
		r.MerchantID, r.MCC, r.MerchantCountry, r.MaskedPAN, r.PANHash, r.RefdataVersion, r.RouteRule,
		r.Attempt, r.CellID, r.CreatedAt, r.UpdatedAt, r.PANHashKeyID, r.FingerprintKeyID}
}

func scan(row pgx.Row) (*cellside.Record, error) { return scanWith(row) }

// scanWith scans a row of readColumns, then into extra.
func scanWith(row pgx.Row, extra ...any) (*cellside.Record, error) {
	var r cellside.Record
	var fp []byte
	var state string
	var pt int16
	err := row.Scan(append([]any{&r.TransactionID, &fp, &state, &r.DeclineReason, &r.AuthCode, &pt, &r.PartnerID, &r.Market,
		&r.Amount, &r.Currency, &r.SettlementAmount, &r.SettlementCurrency, &r.RiskAmount, &r.MerchantID, &r.MCC,
		&r.MerchantCountry, &r.MaskedPAN, &r.PANHash, &r.RefdataVersion, &r.RouteRule, &r.Attempt, &r.CellID,
		&r.CreatedAt, &r.UpdatedAt, &r.PANHashKeyID, &r.FingerprintKeyID, &r.Original, &r.Ledger.Captured,
		&r.Ledger.Refunded, &r.Ledger.HeldCapture, &r.Ledger.HeldRefund, &r.Ledger.Voided}, extra...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	copy(r.Fingerprint[:], fp)
	r.State = cellside.State(state)
	r.PaymentType = cellpayv1.PaymentType(pt)
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	r.Ledger.Authorized = r.Amount
	return &r, nil
}

// Insert records a new transaction, owned by this store's instance. When its key (partner and transaction
// ID) is already recorded, in any partition, it returns the existing
// record instead, and inserted is false: the insert runs only where
// cellpay_claim_key finds the key free once it holds the key's lock
// (migration 011). Another partner's record with the same transaction ID
// is no conflict.
func (s *Store) Insert(ctx context.Context, r *cellside.Record) (inserted bool, existing *cellside.Record, err error) {
	n, err := s.exec(ctx, false, `INSERT INTO transactions (`+columns+`, owner, unfiled)
		SELECT $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23,$24,$25,$26,$27,$28
		WHERE cellpay_claim_key($7, $1)`, append(args(r), s.instance, r.Unfiled)...)
	if err != nil {
		return false, nil, fmt.Errorf("store: insert: %w", err)
	}
	if n == 1 {
		return true, nil, nil
	}
	existing, err = s.Get(ctx, r.Key())
	if err != nil {
		return false, nil, fmt.Errorf("store: insert: %w", err)
	}
	return false, existing, nil
}

// Reclaim replaces the abandoned record of r's key with r for a new
// attempt, owned by this store's instance. When the record is no longer abandoned it returns it as it is,
// and ok is false.
func (s *Store) Reclaim(ctx context.Context, r *cellside.Record) (ok bool, existing *cellside.Record, err error) {
	a := append(args(r), s.instance, r.Unfiled)
	// original_transaction_id is cleared: an abandoned follow-up (its
	// claim lost to another cell) taken over by a payment is a payment.
	n, err := s.exec(ctx, false, `UPDATE transactions SET (`+columns+`, owner, unfiled, original_transaction_id) =
		($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23,$24,$25,$26,$27,$28,'')
		WHERE partner_id = $7 AND transaction_id = $1 AND state = 'abandoned'`, a...)
	if err != nil {
		return false, nil, fmt.Errorf("store: reclaim: %w", err)
	}
	if n == 1 {
		return true, nil, nil
	}
	existing, err = s.Get(ctx, r.Key())
	if err != nil {
		return false, nil, fmt.Errorf("store: reclaim: %w", err)
	}
	return false, existing, nil
}

// Get reads the record of k, or ErrNotFound: also when only another partner
// holds k's transaction ID.
func (s *Store) Get(ctx context.Context, k idempotency.Key) (*cellside.Record, error) {
	r, err := scan(s.pool.QueryRow(ctx, `SELECT `+readColumns+` FROM transactions
		WHERE partner_id = $1 AND transaction_id = $2`, k.PartnerID, k.TransactionID))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("store: get: %w", err)
	}
	return r, err
}

// MaxGetMany bounds the keys of one GetMany.
const MaxGetMany = 1000

// GetMany reads the records of keys (at most MaxGetMany) in one query,
// by key; a key the cell holds no record of is absent from the map.
func (s *Store) GetMany(ctx context.Context, keys []idempotency.Key) (map[idempotency.Key]*cellside.Record, error) {
	if len(keys) > MaxGetMany {
		return nil, fmt.Errorf("store: get many: %d keys, at most %d", len(keys), MaxGetMany)
	}
	partners, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		partners[i], ids[i] = k.PartnerID, k.TransactionID
	}
	rows, err := s.pool.Query(ctx, `SELECT `+readColumns+` FROM transactions
		JOIN unnest($1::text[], $2::text[]) AS k(partner, id) ON partner_id = k.partner AND transaction_id = k.id`, partners, ids)
	if err != nil {
		return nil, fmt.Errorf("store: get many: %w", err)
	}
	defer rows.Close()
	out := make(map[idempotency.Key]*cellside.Record, len(keys))
	for rows.Next() {
		r, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("store: get many: %w", err)
		}
		out[r.Key()] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: get many: %w", err)
	}
	return out, nil
}

// Persist writes r's outcome (state, decline reason, auth code, update
// time) to the record of r's key if the stored state is still from;
// otherwise ErrStateChanged. Any state but sending ends the attempt's
// ownership of the row (owner ”). A final outcome (r.State.Terminal()) writes
// its callback event to the outbox in the same statement: the outcome and
// its event commit together or not at all.
func (s *Store) Persist(ctx context.Context, r *cellside.Record, from cellside.State) error {
	if r.Original != "" && from == cellside.StateSending {
		return s.settleFollowUp(ctx, r)
	}
	if r.State.Terminal() {
		return s.persistFinal(ctx, r, from)
	}
	n, err := s.exec(ctx, false, `UPDATE transactions
		SET state = $3, decline_reason = $4, auth_code = $5, updated_at = $6,
			owner = CASE WHEN $3 IN ('sending', 'deciding') THEN owner ELSE '' END
		WHERE partner_id = $1 AND transaction_id = $2 AND state = $7`,
		r.PartnerID, r.TransactionID, string(r.State), r.DeclineReason, r.AuthCode, r.UpdatedAt, string(from))
	if err != nil {
		return fmt.Errorf("store: persist: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("store: persist %s -> %s: %w", from, r.State, ErrStateChanged)
	}
	return nil
}

// AbandonOwn marks r's record abandoned (update time r.UpdatedAt) if its
// state is one of states and it is still the row r's attempt wrote: owned
// by this store's instance, for r.Attempt, created at r.CreatedAt (a
// reclaim by another attempt rewrites all three); otherwise
// ErrStateChanged. It is the step back of an attempt whose write to
// sending failed and may have committed nonetheless (cellside.Persist's
// OrFrom), where the state alone cannot tell its row from another
// attempt's. Safe to repeat.
func (s *Store) AbandonOwn(ctx context.Context, r *cellside.Record, states ...cellside.State) error {
	from := make([]string, len(states))
	for i, st := range states {
		from[i] = string(st)
	}
	n, err := s.exec(ctx, false, `UPDATE transactions SET state = 'abandoned', decline_reason = '', auth_code = '', updated_at = $3, owner = ''
		WHERE partner_id = $1 AND transaction_id = $2 AND state = ANY($4) AND owner = $5 AND attempt = $6 AND created_at = $7`,
		r.PartnerID, r.TransactionID, r.UpdatedAt, from, s.instance, r.Attempt, r.CreatedAt)
	if err != nil {
		return fmt.Errorf("store: abandon: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("store: abandon %v -> abandoned: %w", states, ErrStateChanged)
	}
	return nil
}

// persistFinal is Persist of a final outcome: one statement (so one round
// trip, and atomic without an explicit transaction) that updates the
// record and, only if it did, inserts the outbox row.
func (s *Store) persistFinal(ctx context.Context, r *cellside.Record, from cellside.State) error {
	ev, err := newEvent(r)
	if err != nil {
		return fmt.Errorf("store: persist: %w", err)
	}
	n, err := s.exec(ctx, true, `WITH u AS (
			UPDATE transactions SET state = $3, decline_reason = $4, auth_code = $5, updated_at = $6, owner = ''
			WHERE partner_id = $1 AND transaction_id = $2 AND state = $7 RETURNING 1
		), o AS (
			INSERT INTO outbox (event_id, partner_id, transaction_id, event_type, body, next_attempt_at, created_at, updated_at)
			SELECT $8, $1, $2, $9, $10, $6, $6, $6 FROM u
			ON CONFLICT (event_id, created_at) DO NOTHING
		)
		SELECT count(*) FROM u`,
		r.PartnerID, r.TransactionID, string(r.State), r.DeclineReason, r.AuthCode, r.UpdatedAt, string(from),
		ev.id, ev.typ, ev.body)
	if err != nil {
		return fmt.Errorf("store: persist: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("store: persist %s -> %s: %w", from, r.State, ErrStateChanged)
	}
	s.outboxWritten()
	return nil
}

// Velocity counts and sums (risk amount) a card's transactions created at
// or after since that could still be charged, leaving out the transaction
// exclude. A card is counted across partners: another partner's transaction
// with exclude's ID counts. The card is the rows whose (key ID, hash) pair
// is one of hashes: its hashes under every key of the cell, so that rows
// written under an earlier key still count after a rotation.
func (s *Store) Velocity(ctx context.Context, hashes []card.KeyedHash, since time.Time, exclude idempotency.Key) (count, amount int64, err error) {
	ids, sums := make([]string, len(hashes)), make([][]byte, len(hashes))
	for i, h := range hashes {
		ids[i], sums[i] = h.KeyID, h.Sum
	}
	// pan_hash = ANY keeps the velocity index in use; the pair match makes
	// a hash count only under the key it was computed with.
	err = s.pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(risk_amount), 0)::bigint FROM transactions
		WHERE pan_hash = ANY($2) AND (pan_hash_key_id, pan_hash) IN (SELECT * FROM unnest($1::text[], $2::bytea[]))
		AND created_at >= $3 AND (partner_id, transaction_id) <> ($4, $5)
		AND state IN ('received', 'sending', 'approved')`, ids, sums, since, exclude.PartnerID, exclude.TransactionID).Scan(&count, &amount)
	if err != nil {
		return 0, 0, fmt.Errorf("store: velocity: %w", err)
	}
	return count, amount, nil
}

// Policy reads the cell's risk limits.
func (s *Store) Policy(ctx context.Context) (cellside.Policy, error) {
	var p cellside.Policy
	var low, medium, high, windowMicros int64
	err := s.pool.QueryRow(ctx, `SELECT limit_currency, max_amount_low, max_amount_medium, max_amount_high,
		(extract(epoch FROM velocity_window) * 1000000)::bigint, velocity_max_count, velocity_max_amount FROM risk_limits`).
		Scan(&p.LimitCurrency, &low, &medium, &high, &windowMicros, &p.VelocityMaxCount, &p.VelocityMaxAmount)
	p.VelocityWindow = time.Duration(windowMicros) * time.Microsecond
	if err != nil {
		return p, fmt.Errorf("store: policy: %w", err)
	}
	p.MaxAmount = map[string]int64{refdata.RiskLow: low, refdata.RiskMedium: medium, refdata.RiskHigh: high}
	return p, nil
}

// Unresolved returns up to limit records the reconciler settles: past their
// point of no return with no known outcome (state sending), or decided
// before it with the directory's part unknown (state deciding), last
// updated before before, oldest first, leaving out those an attempt is
// still working on, in this instance or a live sibling (see Active).
func (s *Store) Unresolved(ctx context.Context, before time.Time, limit int) ([]*cellside.Record, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+readColumns+` FROM transactions t
		WHERE state IN ('sending', 'deciding') AND updated_at < $1 AND NOT `+activeSQL+` ORDER BY updated_at LIMIT $2`,
		before, limit, s.instance, activeFor)
	if err != nil {
		return nil, fmt.Errorf("store: unresolved: %w", err)
	}
	defer rows.Close()
	var out []*cellside.Record
	for rows.Next() {
		r, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("store: unresolved: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: unresolved: %w", err)
	}
	return out, nil
}

// Unfiled returns up to limit final records decided without a directory
// entry (Record.Unfiled), oldest first: the entries the directory lacks.
func (s *Store) Unfiled(ctx context.Context, limit int) ([]*cellside.Record, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+readColumns+` FROM transactions
		WHERE unfiled AND state IN ('approved', 'declined', 'failed') ORDER BY updated_at LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("store: unfiled: %w", err)
	}
	defer rows.Close()
	var out []*cellside.Record
	for rows.Next() {
		r, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("store: unfiled: %w", err)
		}
		r.Unfiled = true
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: unfiled: %w", err)
	}
	return out, nil
}

// MarkUnfiled sets k's Unfiled mark: its final state's directory entry
// was not written.
func (s *Store) MarkUnfiled(ctx context.Context, k idempotency.Key) error {
	_, err := s.pool.Exec(ctx, `UPDATE transactions SET unfiled = true
		WHERE partner_id = $1 AND transaction_id = $2 AND NOT unfiled`, k.PartnerID, k.TransactionID)
	if err != nil {
		return fmt.Errorf("store: unfiled: %w", err)
	}
	return nil
}

// MarkFiled clears k's Unfiled mark: its entry is in the directory (or was
// found another cell's, counted and logged by the caller).
func (s *Store) MarkFiled(ctx context.Context, k idempotency.Key) error {
	_, err := s.pool.Exec(ctx, `UPDATE transactions SET unfiled = false
		WHERE partner_id = $1 AND transaction_id = $2 AND unfiled`, k.PartnerID, k.TransactionID)
	if err != nil {
		return fmt.Errorf("store: filed: %w", err)
	}
	return nil
}

// OldestPending returns the creation time of the oldest transaction in
// state sending (answered PENDING, its outcome unknown), zero when there
// is none. It reads the transactions_unresolved partial index, so its cost
// grows with the PENDING rows, not the table; bound it by ctx.
func (s *Store) OldestPending(ctx context.Context) (time.Time, error) {
	var oldest *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT min(created_at) FROM transactions WHERE state = 'sending'`).Scan(&oldest); err != nil {
		return time.Time{}, fmt.Errorf("store: oldest pending: %w", err)
	}
	if oldest == nil {
		return time.Time{}, nil
	}
	return oldest.UTC(), nil
}
