package store

import (
	"context"
	"fmt"
	"time"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// visible are the states partners see: PENDING and final.
var visible = []string{string(cellside.StateSending), string(cellside.StateApproved), string(cellside.StateDeclined), string(cellside.StateFailed)}

// ListFilter selects a partner's transactions for List.
type ListFilter struct {
	PartnerID string
	// Start (inclusive) and End (exclusive) bound created_at.
	Start, End time.Time
	// States and Types keep only those; empty for every state partners
	// see and every type.
	States []cellside.State
	Types  []cellpayv1.PaymentType
	// After, when AfterID is set, lists only what comes after
	// (AfterCreated, AfterID) in the order (created_at, transaction_id).
	AfterCreated time.Time
	AfterID      string
	Limit        int
}

// List returns the partner's transactions partners see that f selects,
// oldest first, at most f.Limit; it reads the (partner_id, created_at)
// index.
func (s *Store) List(ctx context.Context, f ListFilter) ([]*cellside.Record, error) {
	states := visible
	if len(f.States) > 0 {
		states = make([]string, len(f.States))
		for i, st := range f.States {
			states[i] = string(st)
		}
	}
	types := make([]int16, len(f.Types))
	for i, t := range f.Types {
		types[i] = int16(t)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+readColumns+` FROM transactions
		WHERE partner_id = $1 AND created_at >= $2 AND created_at < $3 AND state = ANY($4)
			AND (cardinality($5::smallint[]) = 0 OR payment_type = ANY($5))
			AND ($6 = '' OR (created_at, transaction_id) > ($7, $6))
		ORDER BY created_at, transaction_id LIMIT $8`,
		f.PartnerID, f.Start, f.End, states, types, f.AfterID, f.AfterCreated, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("store: list: %w", err)
	}
	defer rows.Close()
	var out []*cellside.Record
	for rows.Next() {
		r, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list: %w", err)
	}
	return out, nil
}

// StatementLine is one sum of a statement.
type StatementLine struct {
	Type     cellpayv1.PaymentType
	State    cellside.State
	Currency string
	Count    int64
	Amount   int64
}

// Statement sums the partner's transactions partners see created in
// [start, end), by payment type, state and currency.
func (s *Store) Statement(ctx context.Context, partnerID string, start, end time.Time) ([]StatementLine, error) {
	rows, err := s.pool.Query(ctx, `SELECT payment_type, state, currency, count(*), sum(amount)::bigint FROM transactions
		WHERE partner_id = $1 AND created_at >= $2 AND created_at < $3 AND state = ANY($4)
		GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`, partnerID, start, end, visible)
	if err != nil {
		return nil, fmt.Errorf("store: statement: %w", err)
	}
	defer rows.Close()
	var out []StatementLine
	for rows.Next() {
		var (
			l     StatementLine
			pt    int16
			state string
		)
		if err := rows.Scan(&pt, &state, &l.Currency, &l.Count, &l.Amount); err != nil {
			return nil, fmt.Errorf("store: statement: %w", err)
		}
		l.Type, l.State = cellpayv1.PaymentType(pt), cellside.State(state)
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: statement: %w", err)
	}
	return out, nil
}
