package refsync

import (
	"fmt"
	"math/big"
	"strconv"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/cellpay/cellpay/internal/refdata"
)

// The in-memory copy. Every version is written in one memdb write
// transaction, so a reader sees one whole version; readers take a read
// transaction, which is a lock-free snapshot of immutable radix trees.

const (
	tableMeta    = "meta"
	tableRate    = "rate"
	tableMCC     = "mcc"
	tablePartner = "partner"
	tableBlocked = "blocked"
	metaID       = "served"
)

type metaRow struct {
	ID                string
	Seq               uint64
	Version           string
	Base              string
	DefaultSettlement string
	Source            string
	PublishedAt       time.Time
	AppliedAt         time.Time
}

// rateRow holds a currency's rate and exponent, parsed once.
type rateRow struct {
	Currency string
	Rate     *big.Rat
	Exp      int
}

type mccRow struct {
	Code string
	MCC  refdata.MCC
}

type partnerRow struct {
	ID       string
	Currency string
}

type blockedRow struct {
	Category string
}

func schema() *memdb.DBSchema {
	table := func(name, field string) *memdb.TableSchema {
		return &memdb.TableSchema{Name: name, Indexes: map[string]*memdb.IndexSchema{
			"id": {Name: "id", Unique: true, Indexer: &memdb.StringFieldIndex{Field: field}},
		}}
	}
	return &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		tableMeta:    table(tableMeta, "ID"),
		tableRate:    table(tableRate, "Currency"),
		tableMCC:     table(tableMCC, "Code"),
		tablePartner: table(tablePartner, "ID"),
		tableBlocked: table(tableBlocked, "Category"),
	}}
}

func newMemDB() *memdb.MemDB {
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		panic(err) // the schema is a constant
	}
	return db
}

// writeSnapshot replaces the whole content with snap.
func writeSnapshot(db *memdb.MemDB, snap *refdata.Snapshot, meta metaRow) error {
	txn := db.Txn(true)
	defer txn.Abort()
	for _, t := range []string{tableRate, tableMCC, tablePartner, tableBlocked} {
		if _, err := txn.DeleteAll(t, "id"); err != nil {
			return fmt.Errorf("refsync: memdb: %w", err)
		}
	}
	f := snap.File()
	meta = headerOf(snap, meta)
	for cur := range f.FXRates {
		if err := insertRate(txn, snap, cur); err != nil {
			return err
		}
	}
	for code, m := range f.MCC {
		if err := txn.Insert(tableMCC, &mccRow{Code: code, MCC: m}); err != nil {
			return fmt.Errorf("refsync: memdb: %w", err)
		}
	}
	for p, cur := range f.Partners {
		if err := txn.Insert(tablePartner, &partnerRow{ID: p, Currency: cur}); err != nil {
			return fmt.Errorf("refsync: memdb: %w", err)
		}
	}
	for _, c := range f.BlockedCategories {
		if err := txn.Insert(tableBlocked, &blockedRow{Category: c}); err != nil {
			return fmt.Errorf("refsync: memdb: %w", err)
		}
	}
	if err := insertMeta(txn, snap, meta); err != nil {
		return err
	}
	txn.Commit()
	return nil
}

// writeSnapshotDiff makes snap the content, given d = snap.Diff(prev) with
// prev the content now: it writes only the entries that changed, in one
// write transaction; unchanged objects are shared with the previous
// version.
func writeSnapshotDiff(db *memdb.MemDB, prev, snap *refdata.Snapshot, d refdata.Diff, meta metaRow) error {
	txn := db.Txn(true)
	defer txn.Abort()
	del := func(table string, keys []string) error {
		for _, k := range keys {
			if _, err := txn.DeleteAll(table, "id", k); err != nil {
				return fmt.Errorf("refsync: memdb: %w", err)
			}
		}
		return nil
	}
	// A rate row holds the exponent too, which follows the currencies.
	rates := map[string]bool{}
	for cur := range d.FXRates {
		rates[cur] = true
	}
	for cur := range d.Currencies {
		rates[cur] = true
	}
	for _, cur := range d.RemovedCurrencies {
		rates[cur] = true
	}
	for cur := range rates {
		if _, ok := snap.Rate(cur); ok {
			if err := insertRate(txn, snap, cur); err != nil {
				return err
			}
		}
	}
	if err := del(tableRate, d.RemovedFXRates); err != nil {
		return err
	}
	for code, m := range d.MCC {
		if err := txn.Insert(tableMCC, &mccRow{Code: code, MCC: m}); err != nil {
			return fmt.Errorf("refsync: memdb: %w", err)
		}
	}
	if err := del(tableMCC, d.RemovedMCC); err != nil {
		return err
	}
	for p, cur := range d.Partners {
		if err := txn.Insert(tablePartner, &partnerRow{ID: p, Currency: cur}); err != nil {
			return fmt.Errorf("refsync: memdb: %w", err)
		}
	}
	if err := del(tablePartner, d.RemovedPartners); err != nil {
		return err
	}
	if d.Blocked {
		if _, err := txn.DeleteAll(tableBlocked, "id"); err != nil {
			return fmt.Errorf("refsync: memdb: %w", err)
		}
		for _, c := range snap.BlockedCategories() {
			if err := txn.Insert(tableBlocked, &blockedRow{Category: c}); err != nil {
				return fmt.Errorf("refsync: memdb: %w", err)
			}
		}
	}
	if err := insertMeta(txn, snap, headerOf(snap, meta)); err != nil {
		return err
	}
	txn.Commit()
	return nil
}

// writeUpdate writes the entries u changed, taken from snap (the validated
// result of the update), and the new header.
func writeUpdate(db *memdb.MemDB, snap *refdata.Snapshot, u refdata.Update, meta metaRow) error {
	txn := db.Txn(true)
	defer txn.Abort()
	for cur := range u.FXRates {
		if err := insertRate(txn, snap, cur); err != nil {
			return err
		}
	}
	for code, m := range u.MCC {
		if err := txn.Insert(tableMCC, &mccRow{Code: code, MCC: m}); err != nil {
			return fmt.Errorf("refsync: memdb: %w", err)
		}
	}
	if err := insertMeta(txn, snap, headerOf(snap, meta)); err != nil {
		return err
	}
	txn.Commit()
	return nil
}

func insertRate(txn *memdb.Txn, snap *refdata.Snapshot, cur string) error {
	r, _ := snap.Rate(cur)
	e, _ := snap.Exponent(cur)
	if err := txn.Insert(tableRate, &rateRow{Currency: cur, Rate: r, Exp: e}); err != nil {
		return fmt.Errorf("refsync: memdb: %w", err)
	}
	return nil
}

// headerOf fills meta's header fields from snap.
func headerOf(snap *refdata.Snapshot, meta metaRow) metaRow {
	meta.ID = metaID
	meta.Seq = snap.Seq()
	meta.Version = strconv.FormatUint(snap.Seq(), 10)
	meta.Base = snap.BaseCurrency()
	meta.DefaultSettlement = snap.DefaultSettlementCurrency()
	return meta
}

func insertMeta(txn *memdb.Txn, snap *refdata.Snapshot, meta metaRow) error {
	if err := txn.Insert(tableMeta, &meta); err != nil {
		return fmt.Errorf("refsync: memdb: %w", err)
	}
	return nil
}

// View is one version of the reference data as a transaction sees it: a
// read transaction on the in-memory copy, so every lookup of one attempt
// answers from the same version even while a newer one is applied. It
// implements orchestrator.RefData. Reads take no lock.
type View struct {
	txn  *memdb.Txn
	meta *metaRow
}

func newView(db *memdb.MemDB) View {
	txn := db.Txn(false)
	v := View{txn: txn, meta: &metaRow{}}
	if raw, err := txn.First(tableMeta, "id", metaID); err == nil && raw != nil {
		v.meta = raw.(*metaRow)
	}
	return v
}

// Version is the served version in decimal; "" when none is served.
func (v View) Version() string { return v.meta.Version }

// Seq is the served version; 0 when none is served or for a bootstrap file.
func (v View) Seq() uint64 { return v.meta.Seq }

// SettlementCurrency returns the partner's settlement currency, or the
// default one.
func (v View) SettlementCurrency(partner string) string {
	if raw, err := v.txn.First(tablePartner, "id", partner); err == nil && raw != nil {
		return raw.(*partnerRow).Currency
	}
	return v.meta.DefaultSettlement
}

// Convert converts as refdata.Snapshot.Convert does, with the same rule
// (refdata.ConvertRates: exact, one rounding, half to even).
func (v View) Convert(minor int64, from, to string) (int64, error) {
	if from == to {
		return minor, nil
	}
	rf, ok := v.rate(from)
	if !ok {
		return 0, fmt.Errorf("%w %s", refdata.ErrNoRate, from)
	}
	rt, ok := v.rate(to)
	if !ok {
		return 0, fmt.Errorf("%w %s", refdata.ErrNoRate, to)
	}
	return refdata.ConvertRates(minor, from, rf.Rate, rf.Exp, to, rt.Rate, rt.Exp)
}

func (v View) rate(cur string) (*rateRow, bool) {
	raw, err := v.txn.First(tableRate, "id", cur)
	if err != nil || raw == nil {
		return nil, false
	}
	return raw.(*rateRow), true
}

// MCC classifies a merchant category code.
func (v View) MCC(code string) (refdata.MCC, bool) {
	raw, err := v.txn.First(tableMCC, "id", code)
	if err != nil || raw == nil {
		return refdata.MCC{}, false
	}
	return raw.(*mccRow).MCC, true
}

// Blocked reports whether a category is blocked.
func (v View) Blocked(category string) bool {
	raw, err := v.txn.First(tableBlocked, "id", category)
	return err == nil && raw != nil
}
