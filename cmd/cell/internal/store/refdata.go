package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cellpay/cellpay/internal/refdata"
)

// Reference data errors callers branch on.
var (
	// ErrNoRefdata means no version has been stored yet.
	ErrNoRefdata = errors.New("store: no reference data stored")
	// ErrRefdataOrder means a write does not follow the stored version: a
	// snapshot that is not newer, an update whose base is not the stored
	// version, or a version outside 1..refdata.MaxVersion. Nothing was
	// written, and retrying cannot help.
	ErrRefdataOrder = errors.New("store: reference data version out of order")
)

// RefdataMeta describes how a version arrived.
type RefdataMeta struct {
	Kind        string // refdata.KindSnapshot or refdata.KindUpdate
	Hash        string
	PublishedAt time.Time
	AppliedAt   time.Time
}

// LoadRefdata reads the stored version whole (one repeatable-read
// transaction), or ErrNoRefdata.
func (s *Store) LoadRefdata(ctx context.Context) (refdata.File, RefdataMeta, error) {
	var f refdata.File
	var meta RefdataMeta
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var version int64
		err := tx.QueryRow(ctx, `SELECT version, base_currency, default_settlement_currency, published_at, applied_at
			FROM refdata_state`).Scan(&version, &f.BaseCurrency, &f.DefaultSettlementCurrency, &meta.PublishedAt, &meta.AppliedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNoRefdata
		}
		if err != nil {
			return err
		}
		f.Version = uint64(version)
		f.Currencies = map[string]refdata.Currency{}
		f.FXRates = map[string]string{}
		f.MCC = map[string]refdata.MCC{}
		f.Partners = map[string]string{}
		var code, a, b string
		var n int16
		if _, err := pgx.ForEachRow(mustQuery(ctx, tx, `SELECT code, minor_units, name FROM refdata_currencies`), []any{&code, &n, &a}, func() error {
			f.Currencies[code] = refdata.Currency{MinorUnits: int(n), Name: a}
			return nil
		}); err != nil {
			return err
		}
		if _, err := pgx.ForEachRow(mustQuery(ctx, tx, `SELECT currency, rate FROM refdata_fx_rates`), []any{&code, &a}, func() error {
			f.FXRates[code] = a
			return nil
		}); err != nil {
			return err
		}
		if _, err := pgx.ForEachRow(mustQuery(ctx, tx, `SELECT code, category, risk FROM refdata_mcc`), []any{&code, &a, &b}, func() error {
			f.MCC[code] = refdata.MCC{Category: a, Risk: b}
			return nil
		}); err != nil {
			return err
		}
		if _, err := pgx.ForEachRow(mustQuery(ctx, tx, `SELECT partner_id, settlement_currency FROM refdata_partners`), []any{&code, &a}, func() error {
			f.Partners[code] = a
			return nil
		}); err != nil {
			return err
		}
		_, err = pgx.ForEachRow(mustQuery(ctx, tx, `SELECT category FROM refdata_blocked_categories ORDER BY category`), []any{&a}, func() error {
			f.BlockedCategories = append(f.BlockedCategories, a)
			return nil
		})
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT kind, content_hash FROM refdata_history WHERE version = $1`, version).Scan(&meta.Kind, &meta.Hash)
	})
	if err != nil && !errors.Is(err, ErrNoRefdata) {
		err = fmt.Errorf("store: load refdata: %w", err)
	}
	meta.PublishedAt, meta.AppliedAt = meta.PublishedAt.UTC(), meta.AppliedAt.UTC()
	return f, meta, err
}

// mustQuery defers a query error to pgx.ForEachRow, which reports it.
func mustQuery(ctx context.Context, tx pgx.Tx, sql string) pgx.Rows {
	rows, _ := tx.Query(ctx, sql) // an error is returned again by rows.Err()
	return rows
}

// SaveRefdataSnapshot replaces the stored version with snapshot f, in one
// transaction. f must be newer than the stored version (ErrRefdataOrder).
func (s *Store) SaveRefdataSnapshot(ctx context.Context, f refdata.File, meta RefdataMeta) error {
	if err := storable(f.Version); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := lockRefdata(ctx, tx, func(stored uint64) bool { return stored < f.Version }); err != nil {
			return err
		}
		return writeRefdataFile(ctx, tx, f, meta)
	})
	if err != nil {
		return fmt.Errorf("store: save refdata snapshot %d: %w", f.Version, err)
	}
	return nil
}

// SaveRefdataSnapshotDiff stores snapshot next as SaveRefdataSnapshot does
// (one transaction, next newer than the stored version, else
// ErrRefdataOrder), writing only what changed when it can: if the stored
// version is base (> 0), d must be next.Diff(the snapshot of version base)
// and only d's entries are written; otherwise next is written whole.
func (s *Store) SaveRefdataSnapshotDiff(ctx context.Context, base uint64, d refdata.Diff, next *refdata.Snapshot, meta RefdataMeta) error {
	version := next.Seq()
	if err := storable(version); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		stored, err := lockRefdata(ctx, tx, func(stored uint64) bool { return stored < version })
		if err != nil {
			return err
		}
		if base == 0 || stored != base || diffSize(d) > maxDiffRows {
			return writeRefdataFile(ctx, tx, next.File(), meta)
		}
		b := &pgx.Batch{}
		queueUpserts(b, `INSERT INTO refdata_currencies (code, minor_units, name) VALUES ($1, $2, $3)
			ON CONFLICT (code) DO UPDATE SET minor_units = $2, name = $3`,
			d.Currencies, func(c refdata.Currency) []any { return []any{int16(c.MinorUnits), c.Name} })
		queueUpserts(b, `INSERT INTO refdata_fx_rates (currency, rate) VALUES ($1, $2)
			ON CONFLICT (currency) DO UPDATE SET rate = $2`,
			d.FXRates, func(r string) []any { return []any{r} })
		queueUpserts(b, `INSERT INTO refdata_mcc (code, category, risk) VALUES ($1, $2, $3)
			ON CONFLICT (code) DO UPDATE SET category = $2, risk = $3`,
			d.MCC, func(m refdata.MCC) []any { return []any{m.Category, m.Risk} })
		queueUpserts(b, `INSERT INTO refdata_partners (partner_id, settlement_currency) VALUES ($1, $2)
			ON CONFLICT (partner_id) DO UPDATE SET settlement_currency = $2`,
			d.Partners, func(c string) []any { return []any{c} })
		for _, del := range []struct {
			sql  string
			keys []string
		}{
			{`DELETE FROM refdata_currencies WHERE code = ANY($1)`, d.RemovedCurrencies},
			{`DELETE FROM refdata_fx_rates WHERE currency = ANY($1)`, d.RemovedFXRates},
			{`DELETE FROM refdata_mcc WHERE code = ANY($1)`, d.RemovedMCC},
			{`DELETE FROM refdata_partners WHERE partner_id = ANY($1)`, d.RemovedPartners},
		} {
			if len(del.keys) > 0 {
				b.Queue(del.sql, del.keys)
			}
		}
		if d.Blocked {
			b.Queue(`DELETE FROM refdata_blocked_categories`)
			for _, c := range next.BlockedCategories() {
				b.Queue(`INSERT INTO refdata_blocked_categories (category) VALUES ($1)`, c)
			}
		}
		b.Queue(`UPDATE refdata_state SET version = $1, base_currency = $2, default_settlement_currency = $3,
				published_at = $4, applied_at = $5`,
			int64(version), next.BaseCurrency(), next.DefaultSettlementCurrency(), meta.PublishedAt, meta.AppliedAt)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		return recordHistory(ctx, tx, version, meta)
	})
	if err != nil {
		return fmt.Errorf("store: save refdata snapshot %d: %w", version, err)
	}
	return nil
}

// maxDiffRows is the largest diff written row by row; a larger one is
// cheaper to write whole, with COPY.
const maxDiffRows = 1000

func diffSize(d refdata.Diff) int {
	return len(d.Currencies) + len(d.RemovedCurrencies) + len(d.FXRates) + len(d.RemovedFXRates) +
		len(d.MCC) + len(d.RemovedMCC) + len(d.Partners) + len(d.RemovedPartners)
}

// queueUpserts queues sql for every entry of m, with the key as $1 and
// args(value) after it, in key order.
func queueUpserts[V any](b *pgx.Batch, sql string, m map[string]V, args func(V) []any) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.Queue(sql, append([]any{k}, args(m[k])...)...)
	}
}

// writeRefdataFile replaces the stored content with f, header and history
// included, in tx (locked by lockRefdata).
func writeRefdataFile(ctx context.Context, tx pgx.Tx, f refdata.File, meta RefdataMeta) error {
	for _, table := range []string{"refdata_currencies", "refdata_fx_rates", "refdata_mcc", "refdata_partners", "refdata_blocked_categories"} {
		if _, err := tx.Exec(ctx, `DELETE FROM `+table); err != nil {
			return err
		}
	}
	var rows [][]any
	for code, c := range f.Currencies {
		rows = append(rows, []any{code, int16(c.MinorUnits), c.Name})
	}
	if err := copyRows(ctx, tx, "refdata_currencies", []string{"code", "minor_units", "name"}, rows); err != nil {
		return err
	}
	rows = rows[:0]
	for cur, r := range f.FXRates {
		rows = append(rows, []any{cur, r})
	}
	if err := copyRows(ctx, tx, "refdata_fx_rates", []string{"currency", "rate"}, rows); err != nil {
		return err
	}
	rows = rows[:0]
	for code, m := range f.MCC {
		rows = append(rows, []any{code, m.Category, m.Risk})
	}
	if err := copyRows(ctx, tx, "refdata_mcc", []string{"code", "category", "risk"}, rows); err != nil {
		return err
	}
	rows = rows[:0]
	for p, cur := range f.Partners {
		rows = append(rows, []any{p, cur})
	}
	if err := copyRows(ctx, tx, "refdata_partners", []string{"partner_id", "settlement_currency"}, rows); err != nil {
		return err
	}
	rows = rows[:0]
	for _, c := range f.BlockedCategories {
		rows = append(rows, []any{c})
	}
	if err := copyRows(ctx, tx, "refdata_blocked_categories", []string{"category"}, rows); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO refdata_state (version, base_currency, default_settlement_currency, published_at, applied_at)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (singleton) DO UPDATE SET version = $1, base_currency = $2, default_settlement_currency = $3,
			published_at = $4, applied_at = $5`,
		int64(f.Version), f.BaseCurrency, f.DefaultSettlementCurrency, meta.PublishedAt, meta.AppliedAt)
	if err != nil {
		return err
	}
	return recordHistory(ctx, tx, f.Version, meta)
}

// SaveRefdataUpdate applies update u, version version, to the stored
// version base, in one transaction; ErrRefdataOrder if base is not what is
// stored.
func (s *Store) SaveRefdataUpdate(ctx context.Context, base, version uint64, u refdata.Update, meta RefdataMeta) error {
	if err := storable(version); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := lockRefdata(ctx, tx, func(stored uint64) bool { return stored == base && base < version }); err != nil {
			return err
		}
		b := &pgx.Batch{}
		for cur, r := range u.FXRates {
			b.Queue(`INSERT INTO refdata_fx_rates (currency, rate) VALUES ($1, $2)
				ON CONFLICT (currency) DO UPDATE SET rate = $2`, cur, r)
		}
		for code, m := range u.MCC {
			b.Queue(`INSERT INTO refdata_mcc (code, category, risk) VALUES ($1, $2, $3)
				ON CONFLICT (code) DO UPDATE SET category = $2, risk = $3`, code, m.Category, m.Risk)
		}
		b.Queue(`UPDATE refdata_state SET version = $1, published_at = $2, applied_at = $3`,
			int64(version), meta.PublishedAt, meta.AppliedAt)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		return recordHistory(ctx, tx, version, meta)
	})
	if err != nil {
		return fmt.Errorf("store: save refdata update %d: %w", version, err)
	}
	return nil
}

// storable refuses, as ErrRefdataOrder (never to be retried), a version
// outside 1..refdata.MaxVersion: the column is a bigint with CHECK
// (version > 0), and a version at its maximum would leave no room for the
// next one. refdata.DecodeMessage refuses such versions first; this is the
// store's own guard.
func storable(v uint64) error {
	if err := refdata.CheckVersion("version", v); err != nil {
		return fmt.Errorf("store: %w: %w", ErrRefdataOrder, err)
	}
	return nil
}

// lockRefdata locks the state row (if any) and checks the stored version
// (0 when none) with ok; it returns the stored version.
func lockRefdata(ctx context.Context, tx pgx.Tx, ok func(stored uint64) bool) (uint64, error) {
	var stored int64
	err := tx.QueryRow(ctx, `SELECT version FROM refdata_state FOR UPDATE`).Scan(&stored)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, err
	}
	if !ok(uint64(stored)) {
		return 0, fmt.Errorf("%w (stored version %d)", ErrRefdataOrder, stored)
	}
	return uint64(stored), nil
}

func recordHistory(ctx context.Context, tx pgx.Tx, version uint64, meta RefdataMeta) error {
	_, err := tx.Exec(ctx, `INSERT INTO refdata_history (version, kind, content_hash, published_at, applied_at)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (version) DO NOTHING`,
		int64(version), meta.Kind, meta.Hash, meta.PublishedAt, meta.AppliedAt)
	return err
}

func copyRows(ctx context.Context, tx pgx.Tx, table string, cols []string, rows [][]any) error {
	if len(rows) == 0 {
		return nil
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromRows(rows))
	return err
}

// StoredRefdataVersion returns the version stored, 0 for none: a cell's
// instances share the stored version, and each follows it (package
// refsync).
func (s *Store) StoredRefdataVersion(ctx context.Context) (uint64, error) {
	var v int64
	err := s.pool.QueryRow(ctx, `SELECT version FROM refdata_state`).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("store: refdata version: %w", err)
	}
	return uint64(v), nil
}
