package store

import (
	"context"
	"fmt"
	"time"
)

// Retention: transactions and outbox are partitioned by created_at, a
// calendar quarter each (migration 011). The cell's leading instance
// creates them ahead and drops them past retention
// (cmd/cell/internal/retention) through the schema owner's functions, as
// the role it serves as may only read and write rows.

// PartitionedTables are the tables kept in partitions by created_at.
var PartitionedTables = []string{"transactions", "outbox"}

// Partition is one partition of a partitioned table: a quarter, or what
// is left of one, or the first partition, from no lower bound.
type Partition struct {
	Table string // transactions or outbox
	Name  string
	// From is the lower bound (inclusive), zero for the first partition;
	// To the upper bound (exclusive).
	From, To time.Time
}

// Partitions lists the partitions of transactions and outbox.
func (s *Store) Partitions(ctx context.Context) ([]Partition, error) {
	rows, err := s.pool.Query(ctx, `SELECT p.relname, c.relname,
			(regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz,
			(regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz
		FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		JOIN pg_class p ON p.oid = i.inhparent
		WHERE p.relname = ANY($1) AND p.relnamespace = 'public'::regnamespace
		ORDER BY p.relname, 4`, PartitionedTables)
	if err != nil {
		return nil, fmt.Errorf("store: partitions: %w", err)
	}
	defer rows.Close()
	var out []Partition
	for rows.Next() {
		var p Partition
		var from, to *time.Time
		if err := rows.Scan(&p.Table, &p.Name, &from, &to); err != nil {
			return nil, fmt.Errorf("store: partitions: %w", err)
		}
		if to == nil {
			return nil, fmt.Errorf("store: partitions: %s has no upper bound", p.Name)
		}
		if from != nil {
			p.From = from.UTC()
		}
		p.To = to.UTC()
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: partitions: %w", err)
	}
	return out, nil
}

// CreatePartition creates table's partition for the months months from
// first (UTC, the first day of a month), named by first; false when it
// exists already.
func (s *Store) CreatePartition(ctx context.Context, table string, first time.Time, months int) (bool, error) {
	var created bool
	if err := s.pool.QueryRow(ctx, `SELECT cellpay_create_partition($1, $2::date, $3)`, table, first.UTC().Format(time.DateOnly), months).Scan(&created); err != nil {
		return false, fmt.Errorf("store: create partition %s from %s: %w", table, first.Format("2006-01"), err)
	}
	return created, nil
}

// DropPartition drops the partition name if it ends at or before
// retainedSince and holds nothing unresolved (no transaction short of a
// final state or holding a follow-up, no callback to deliver); the
// database checks both under the table's lock. It returns "" when dropped,
// else why the partition is kept.
func (s *Store) DropPartition(ctx context.Context, name string, retainedSince time.Time) (kept string, err error) {
	if err := s.pool.QueryRow(ctx, `SELECT cellpay_drop_partition($1, $2)`, name, retainedSince).Scan(&kept); err != nil {
		return "", fmt.Errorf("store: drop partition %s: %w", name, err)
	}
	return kept, nil
}
