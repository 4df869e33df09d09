// Package retention keeps a cell's transactions and outbox bounded: they
// are partitioned by created_at, a calendar quarter a partition (store
// migration 011); partitions are created before a row needs them, and one
// that ended more than the retention ago is dropped whole, never row by
// row.
//
// What to create and drop is decided by Decide, a pure function of the
// partitions, the time and the configuration; Keeper performs it on the
// cell's leading instance. The database decides last: it drops a
// partition only if it ended before the retention asked for, at least 8
// days ago (the idempotency window is 7), and it holds nothing unresolved
// (a transaction short of a final state or holding a follow-up, a callback
// still to deliver), checked under the table's lock. Such a partition is
// kept and tried again at the next round.
//
// A transaction, its follow-ups and its reads live as long as its
// partition: past the retention a partner's retry of its ID is a new
// transaction (the directory forgot it long before, after the idempotency
// window), a capture or refund naming it is refused as naming an unknown
// original, and it is not in listings or statements. Retention is set at
// least as long as a partner may follow an authorization up (a refund
// window).
//
// Quarters, not months: every statement over a partitioned table pays for
// each partition it may touch (Postgres 15 locks every partition of a
// cached plan), and 400 days are about six quarters where they are
// sixteen months.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cellpay/cellpay/cmd/cell/internal/store"
)

// Defaults.
const (
	// DefaultKeep is the retention: a partition is dropped once it ended
	// this long ago. 400 days keeps thirteen whole months.
	DefaultKeep = 400 * 24 * time.Hour
	// MinKeep is the shortest retention: the database refuses to drop a
	// partition that ended within 8 days (the idempotency window and a
	// day).
	MinKeep = 8 * 24 * time.Hour
	// DefaultAhead is how many months after the current one are covered.
	DefaultAhead = 2
	// MaxAhead bounds Ahead.
	MaxAhead = 24
	// Quarter is the months a partition spans, from the first month of a
	// calendar quarter.
	Quarter = 3
	// DefaultEvery is how often the keeper looks.
	DefaultEvery = time.Hour
)

// Span is a partition to create: Months months of Table from From (the
// first day of a month, 00:00 UTC).
type Span struct {
	Table  string
	From   time.Time
	Months int
}

// Plan is what a round does.
type Plan struct {
	Create []Span
	Drop   []store.Partition
}

// Decide returns the partitions to create so that every month from the
// current one to ahead after it is covered in each table
// (store.PartitionedTables): each the rest of a calendar quarter, cut
// short where a partition exists already; and the partitions that ended
// at or before now-keep.
func Decide(parts []store.Partition, now time.Time, keep time.Duration, ahead int) Plan {
	var p Plan
	current := monthStart(now)
	end := current.AddDate(0, ahead+1, 0)
	for _, table := range store.PartitionedTables {
		for m := current; m.Before(end); {
			if have, ok := holding(parts, table, m); ok {
				m = monthStart(have.To.Add(-time.Nanosecond)).AddDate(0, 1, 0)
				continue
			}
			to := quarterStart(m).AddDate(0, Quarter, 0)
			for _, q := range parts {
				if q.Table == table && q.From.After(m) && q.From.Before(to) {
					to = monthStart(q.From)
				}
			}
			if !to.After(m) { // a partition starting within m: not one of ours
				break
			}
			p.Create = append(p.Create, Span{Table: table, From: m, Months: months(m, to)})
			m = to
		}
	}
	since := now.Add(-keep)
	for _, part := range parts {
		if !part.To.After(since) {
			p.Drop = append(p.Drop, part)
		}
	}
	return p
}

// Horizon is how long from now every table can take rows: the earliest,
// over the tables, of the end of the partitions that run on from now
// without a gap. Zero or less means a table cannot take a row created now.
func Horizon(parts []store.Partition, now time.Time) time.Duration {
	h := time.Duration(1<<63 - 1)
	for _, table := range store.PartitionedTables {
		end := now
		for {
			next, ok := holding(parts, table, end)
			if !ok {
				break
			}
			end = next.To
		}
		h = min(h, end.Sub(now))
	}
	return h
}

func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

func quarterStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month()-(t.Month()-1)%Quarter, 1, 0, 0, 0, 0, time.UTC)
}

// months counts the months from one month's start to another's.
func months(from, to time.Time) int {
	return (to.Year()-from.Year())*12 + int(to.Month()) - int(from.Month())
}

// holding is table's partition that holds a row created at t.
func holding(parts []store.Partition, table string, t time.Time) (store.Partition, bool) {
	for _, p := range parts {
		if p.Table == table && !t.Before(p.From) && t.Before(p.To) {
			return p, true
		}
	}
	return store.Partition{}, false
}

// Store is what the keeper needs of the cell's store.
type Store interface {
	Partitions(ctx context.Context) ([]store.Partition, error)
	CreatePartition(ctx context.Context, table string, first time.Time, months int) (bool, error)
	DropPartition(ctx context.Context, name string, retainedSince time.Time) (kept string, err error)
}

// Config configures a Keeper; zero values take the defaults.
type Config struct {
	Store Store
	Keep  time.Duration // [DefaultKeep]
	Ahead int           // [DefaultAhead]
	Every time.Duration // [DefaultEvery]
	Log   *slog.Logger
	Now   func() time.Time
}

// Keeper creates and drops partitions, on the instance that runs it.
type Keeper struct {
	cfg Config
	// end is where the last round found the tables' room for rows to end
	// (now + Horizon), in Unix seconds; 0 before a round listed.
	end atomic.Int64
}

// New checks cfg and returns a Keeper.
func New(cfg Config) (*Keeper, error) {
	if cfg.Store == nil {
		return nil, errors.New("retention: Store is required")
	}
	if cfg.Keep == 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.Keep < MinKeep {
		return nil, fmt.Errorf("retention: keep %s: shorter than %s (the idempotency window and a day)", cfg.Keep, MinKeep)
	}
	if cfg.Ahead <= 0 {
		cfg.Ahead = DefaultAhead
	}
	if cfg.Ahead > MaxAhead {
		return nil, fmt.Errorf("retention: ahead %d: more than %d months", cfg.Ahead, MaxAhead)
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Keeper{cfg: cfg}, nil
}

// Result is what a round did.
type Result struct {
	Created []Span
	Dropped []string
	// Kept are partitions past the retention the database kept, by why.
	Kept map[string]string
}

// Once runs one round: list, create, drop, list again for the horizon.
// A failed creation or drop is logged and left to the next round; the
// error is the first of them, or the listing's.
func (k *Keeper) Once(ctx context.Context) (Result, error) {
	var res Result
	now := k.cfg.Now()
	parts, err := k.cfg.Store.Partitions(ctx)
	if err != nil {
		return res, err
	}
	plan := Decide(parts, now, k.cfg.Keep, k.cfg.Ahead)
	var errs []error
	for _, c := range plan.Create {
		created, err := k.cfg.Store.CreatePartition(ctx, c.Table, c.From, c.Months)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if created {
			res.Created = append(res.Created, c)
			k.cfg.Log.Info("retention: partition created", "table", c.Table, "from", c.From.Format("2006-01"), "months", c.Months)
		}
	}
	for _, p := range plan.Drop {
		kept, err := k.cfg.Store.DropPartition(ctx, p.Name, now.Add(-k.cfg.Keep))
		switch {
		case err != nil:
			errs = append(errs, err)
		case kept != "":
			if res.Kept == nil {
				res.Kept = map[string]string{}
			}
			res.Kept[p.Name] = kept
			k.cfg.Log.Warn("retention: a partition past retention kept", "partition", p.Name, "why", kept)
		default:
			res.Dropped = append(res.Dropped, p.Name)
			k.cfg.Log.Info("retention: partition dropped", "partition", p.Name, "ended", p.To)
		}
	}
	if parts, err := k.cfg.Store.Partitions(ctx); err == nil {
		now := k.cfg.Now()
		k.end.Store(now.Add(Horizon(parts, now)).Unix())
	} else {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// Run runs a round now and every cfg.Every until ctx ends.
func (k *Keeper) Run(ctx context.Context) {
	t := time.NewTicker(k.cfg.Every)
	defer t.Stop()
	for {
		if _, err := k.Once(ctx); err != nil && ctx.Err() == nil {
			k.cfg.Log.Warn("retention: round failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// End is when the room the last round found for rows ends (its time plus
// Horizon), and false before a round listed the partitions.
func (k *Keeper) End() (time.Time, bool) {
	s := k.end.Load()
	return time.Unix(s, 0), s != 0
}
