package store

import (
	"context"
	"fmt"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// recoverSQL writes a recovered record ($1..$26 as columns, $27 its
// original) unless its key is recorded already, in one statement: the
// record, final; for an approved follow-up, its original's sums, as a
// settled follow-up moves them; and its callback event ($28..$30). The
// partner learns what was recorded. %[1]d, %[2]d, %[3]d are the payment
// types CAPTURE, VOID, REFUND.
var recoverSQL = fmt.Sprintf(`WITH ins AS (
		INSERT INTO transactions (`+columns+`, owner, unfiled, original_transaction_id)
		SELECT $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23,$24,$25,$26,'',false,$27
		WHERE cellpay_claim_key($7, $1)
		RETURNING payment_type, amount, original_transaction_id, state
	), l AS (
		UPDATE transactions o SET
			captured = o.captured + CASE WHEN ins.payment_type = %[1]d THEN ins.amount ELSE 0 END,
			refunded = o.refunded + CASE WHEN ins.payment_type = %[3]d THEN ins.amount ELSE 0 END,
			voided = o.voided OR ins.payment_type = %[2]d
		FROM ins WHERE ins.state = 'approved' AND ins.original_transaction_id <> ''
			AND o.partner_id = $7 AND o.transaction_id = ins.original_transaction_id
	), ob AS (
		INSERT INTO outbox (event_id, partner_id, transaction_id, event_type, body, next_attempt_at, created_at, updated_at)
		SELECT $28, $7, $1, $29, $30, $24, $24, $24 FROM ins
		ON CONFLICT (event_id, created_at) DO NOTHING
	)
	SELECT count(*) FROM ins`,
	cellpayv1.PaymentType_CAPTURE, cellpayv1.PaymentType_VOID, cellpayv1.PaymentType_REFUND)

// Recover writes r, a recovered record (cellside.RecoveredKeyID, final:
// built from the issuer's record of an effect this cell had lost), unless
// its key is recorded already (then inserted is false and nothing
// changes): with an approved follow-up's sums on its original (recover an
// original before its follow-ups, as the issuer's record orders them; a
// follow-up whose original is gone too moves no sums) and its callback
// event, in one database transaction.
func (s *Store) Recover(ctx context.Context, r *cellside.Record) (inserted bool, err error) {
	if !r.Recovered() || !r.State.Terminal() {
		return false, fmt.Errorf("store: recover %s: not a final recovered record", r.Key())
	}
	ev, err := newEvent(r)
	if err != nil {
		return false, fmt.Errorf("store: recover: %w", err)
	}
	n, err := s.exec(ctx, true, recoverSQL, append(args(r), r.Original, ev.id, ev.typ, ev.body)...)
	if err != nil {
		return false, fmt.Errorf("store: recover %s: %w", r.Key(), err)
	}
	if n == 1 {
		s.outboxWritten()
	}
	return n == 1, nil
}

// catchUpSQL brings a record ($1, $2) still in state $3 to a final
// outcome ($4 state, $5 decline reason, $6 authorization code, $7 when)
// with its callback event ($8..$10), in one statement: a payment's only
// (a follow-up is recorded sending, with its hold, never received, and
// one abandoned had its hold released), so no sums move.
const catchUpSQL = `WITH u AS (
		UPDATE transactions SET state = $4, decline_reason = $5, auth_code = $6, updated_at = $7, owner = ''
		WHERE partner_id = $1 AND transaction_id = $2 AND state = $3 AND original_transaction_id = ''
		RETURNING 1
	), ob AS (
		INSERT INTO outbox (event_id, partner_id, transaction_id, event_type, body, next_attempt_at, created_at, updated_at)
		SELECT $8, $1, $2, $9, $10, $7, $7, $7 FROM u
		ON CONFLICT (event_id, created_at) DO NOTHING
	)
	SELECT count(*) FROM u`

// CatchUp writes r's final outcome over its record, a payment's, if that
// is still in state from, received or abandoned (a record the cell's
// database holds short of what the issuer applied for it,
// issuercheck.CaughtUp), with its callback event, in one statement. It
// reports whether the record was in from.
func (s *Store) CatchUp(ctx context.Context, r *cellside.Record, from cellside.State) (bool, error) {
	if !r.State.Terminal() || from != cellside.StateReceived && from != cellside.StateAbandoned {
		return false, fmt.Errorf("store: catch up %s: %s -> %s is not from behind to final", r.Key(), from, r.State)
	}
	ev, err := newEvent(r)
	if err != nil {
		return false, fmt.Errorf("store: catch up: %w", err)
	}
	n, err := s.exec(ctx, true, catchUpSQL, r.PartnerID, r.TransactionID, string(from), string(r.State), r.DeclineReason,
		r.AuthCode, r.UpdatedAt, ev.id, ev.typ, ev.body)
	if err != nil {
		return false, fmt.Errorf("store: catch up %s: %w", r.Key(), err)
	}
	if n == 1 {
		s.outboxWritten()
	}
	return n == 1, nil
}
