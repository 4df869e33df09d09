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
	if f := s.outboxed.Load(); n == 1 && f != nil {
		(*f)()
	}
	return n == 1, nil
}
