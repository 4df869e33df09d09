package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// HoldFollowUp records a follow-up (a capture, void or refund) and holds
// its amount on its original's ledger, in one database transaction under
// the original's row lock, so that concurrent follow-ups of one
// authorization, in this instance or a sibling, are decided one at a time
// on sums that include each other. build makes the follow-up's record
// (state sending, owned by this instance) from the original as read under
// the lock (cellside.FollowUpRecord); cellside.HoldFollowUp decides.
//
// It returns the record held; or existing, when the follow-up's key (k)
// is already recorded (a replay or a concurrent copy: nothing is held);
// or cellside.ErrOriginalNotFound; or the *cellside.Refused rule.
func (s *Store) HoldFollowUp(ctx context.Context, k, original idempotency.Key, build func(original *cellside.Record) *cellside.Record) (held, existing *cellside.Record, err error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("store: hold follow-up: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	orig, err := scan(tx.QueryRow(ctx, `SELECT `+readColumns+` FROM transactions
		WHERE partner_id = $1 AND transaction_id = $2 FOR UPDATE`, original.PartnerID, original.TransactionID))
	switch {
	case errors.Is(err, ErrNotFound):
		// A replay of a follow-up whose original's partition was dropped
		// (retention) gets the follow-up's answer, not "unknown original".
		if existing, err := s.getIn(ctx, tx, k); err == nil {
			return nil, existing, nil
		} else if !errors.Is(err, ErrNotFound) {
			return nil, nil, fmt.Errorf("store: hold follow-up: %w", err)
		}
		return nil, nil, cellside.ErrOriginalNotFound
	case err != nil:
		return nil, nil, fmt.Errorf("store: hold follow-up: %w", err)
	}
	if existing, err := s.getIn(ctx, tx, k); err == nil {
		return nil, existing, nil
	} else if !errors.Is(err, ErrNotFound) {
		return nil, nil, fmt.Errorf("store: hold follow-up: %w", err)
	}
	f := build(orig)
	if err := cellside.HoldFollowUp(orig, f); err != nil {
		return nil, nil, err
	}
	tag, err := tx.Exec(ctx, `INSERT INTO transactions (`+columns+`, owner, unfiled, original_transaction_id)
		SELECT $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23,$24,$25,$26,$27,$28,$29
		WHERE cellpay_claim_key($7, $1)`, append(args(f), s.instance, f.Unfiled, f.Original)...)
	if err != nil {
		return nil, nil, fmt.Errorf("store: hold follow-up: %w", err)
	}
	if tag.RowsAffected() == 0 {
		// The same ID, naming another original, committed meanwhile.
		_ = tx.Rollback(ctx)
		existing, err := s.Get(ctx, k)
		if err != nil {
			return nil, nil, fmt.Errorf("store: hold follow-up: %w", err)
		}
		return nil, existing, nil
	}
	if _, err := tx.Exec(ctx, `UPDATE transactions SET held_capture = $3, held_refund = $4
		WHERE partner_id = $1 AND transaction_id = $2`,
		orig.PartnerID, orig.TransactionID, orig.Ledger.HeldCapture, orig.Ledger.HeldRefund); err != nil {
		return nil, nil, fmt.Errorf("store: hold follow-up: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, fmt.Errorf("store: hold follow-up: %w", err)
	}
	return f, nil, nil
}

// getIn is Get inside tx.
func (s *Store) getIn(ctx context.Context, tx pgx.Tx, k idempotency.Key) (*cellside.Record, error) {
	return scan(tx.QueryRow(ctx, `SELECT `+readColumns+` FROM transactions
		WHERE partner_id = $1 AND transaction_id = $2`, k.PartnerID, k.TransactionID))
}

// settleSQL ends a held follow-up ($1, $2) in one statement: its state
// ($3: final or abandoned, from sending), its hold moved into its
// original's sums (approved) or released (anything else), and, for a
// final state ($11), its callback event. %[1]d, %[2]d, %[3]d are the
// payment types CAPTURE, VOID, REFUND.
var settleSQL = fmt.Sprintf(`WITH u AS (
		UPDATE transactions SET state = $3, decline_reason = $4, auth_code = $5, updated_at = $6, owner = ''
		WHERE partner_id = $1 AND transaction_id = $2 AND state = 'sending' AND original_transaction_id <> ''
		RETURNING payment_type, amount, original_transaction_id
	), l AS (
		UPDATE transactions o SET
			held_capture = o.held_capture - CASE WHEN u.payment_type IN (%[1]d, %[2]d) THEN u.amount ELSE 0 END,
			held_refund = o.held_refund - CASE WHEN u.payment_type = %[3]d THEN u.amount ELSE 0 END,
			captured = o.captured + CASE WHEN u.payment_type = %[1]d AND $3 = 'approved' THEN u.amount ELSE 0 END,
			refunded = o.refunded + CASE WHEN u.payment_type = %[3]d AND $3 = 'approved' THEN u.amount ELSE 0 END,
			voided = o.voided OR (u.payment_type = %[2]d AND $3 = 'approved')
		FROM u WHERE o.partner_id = $1 AND o.transaction_id = u.original_transaction_id
	), ob AS (
		INSERT INTO outbox (event_id, partner_id, transaction_id, event_type, body, next_attempt_at, created_at, updated_at)
		SELECT $7, $1, $2, $8, $9, $6, $6, $6 FROM u WHERE $10
		ON CONFLICT (event_id, created_at) DO NOTHING
	)
	SELECT count(*) FROM u`,
	cellpayv1.PaymentType_CAPTURE, cellpayv1.PaymentType_VOID, cellpayv1.PaymentType_REFUND)

// settleFollowUp is Persist of a follow-up leaving state sending: the
// record and its original's ledger change together, with the callback
// event of a final state, or not at all.
func (s *Store) settleFollowUp(ctx context.Context, r *cellside.Record) error {
	var ev event
	final := r.State.Terminal()
	if final {
		var err error
		if ev, err = newEvent(r); err != nil {
			return fmt.Errorf("store: persist: %w", err)
		}
	}
	n, err := s.exec(ctx, true, settleSQL, r.PartnerID, r.TransactionID, string(r.State), r.DeclineReason, r.AuthCode,
		r.UpdatedAt, ev.id, ev.typ, ev.body, final)
	if err != nil {
		return fmt.Errorf("store: persist: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("store: persist sending -> %s: %w", r.State, ErrStateChanged)
	}
	if final {
		s.outboxWritten()
	}
	return nil
}
