package directory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/internal/jsconf"
	"github.com/cellpay/cellpay/internal/natsauth"
	"github.com/cellpay/cellpay/internal/natsconn"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// Errors the directory returns; callers branch on them with errors.Is.
var (
	// ErrUnavailable: NATS or the bucket did not answer in time. Nothing
	// is known of the entry.
	ErrUnavailable = errors.New("directory: unavailable")
	// ErrNotOwner: the entry belongs to another cell, or to another claim.
	ErrNotOwner = errors.New("directory: the entry is not this claim's")
)

// Config configures a Directory.
type Config struct {
	NATSURL string
	// NATSTLS is the component's certificate as its NATS identity; zero
	// for plaintext NATS without authentication (tests, benchmarks).
	NATSTLS tlsconf.Files
	// CellID is this cell: the owner it writes.
	CellID string
	// Bucket is the key-value bucket; default "cellpay_txn".
	Bucket string
	// Limits are the bucket's when this cell creates it: Replicas (the
	// cell's flag says 3; zero here is 1, a lone test server), MaxAge (how
	// long an entry is kept: the idempotency window across cells; zero is
	// DefaultMaxAge) and MaxBytes (past it, claims fail and only natural
	// homes decide; zero is none). A bucket that exists is kept as it is
	// (package jsconf); Drift, if set, records whether it differs.
	Limits jsconf.Limits
	Drift  *jsconf.Drift
	// OpTimeout bounds one directory operation; default 500ms, well under
	// the GTR's attempt timeout.
	OpTimeout time.Duration
	// QueueSize bounds the best-effort updates waiting to be written;
	// default 4096. Past it, updates are dropped and counted.
	QueueSize int
	Log       *slog.Logger
}

// DefaultBucket is the directory's bucket name.
const DefaultBucket = natsauth.DirectoryBucket

// DefaultMaxAge is how long an entry is kept by default: the idempotency
// window across cells (docs/design/transaction-directory.md).
const DefaultMaxAge = 7 * 24 * time.Hour

// DefaultMaxBytes is the cell binary's default size limit of the bucket:
// half of the 8 GB JetStream store each NATS server has in the
// Kubernetes manifests, the rest left to the other streams.
const DefaultMaxBytes = 4 << 30

func (c *Config) defaults() error {
	if c.NATSURL == "" || c.CellID == "" {
		return errors.New("directory: NATS URL and cell ID are required")
	}
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if c.Limits.MaxAge == 0 {
		c.Limits.MaxAge = DefaultMaxAge
	}
	if c.Limits.Replicas == 0 {
		c.Limits.Replicas = 1
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("directory: %w", err)
	}
	if c.Limits.MaxAge < time.Hour {
		return fmt.Errorf("directory: max age %v: want an hour or more (the idempotency window across cells)", c.Limits.MaxAge)
	}
	if c.OpTimeout <= 0 {
		c.OpTimeout = 500 * time.Millisecond
	}
	if c.QueueSize <= 0 {
		c.QueueSize = 4096
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// Directory is a cell's connection to the transaction directory. It is
// safe for concurrent use.
type Directory struct {
	cfg     Config
	nc      *nats.Conn
	kv      atomic.Pointer[jetstream.KeyValue]
	queue   chan func(context.Context)
	dropped atomic.Int64
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// Open connects to NATS and opens (creating it if needed) the bucket in
// the background: a cell starts whether or not NATS is up, and the
// directory is unavailable until it is.
func Open(cfg Config) (*Directory, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	nc, err := natsconn.Connect(cfg.NATSURL, "cellpay "+cfg.CellID+" directory", cfg.NATSTLS, nats.NoCallbacksAfterClientClose())
	if err != nil {
		return nil, fmt.Errorf("directory: nats: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Directory{cfg: cfg, nc: nc, queue: make(chan func(context.Context), cfg.QueueSize), cancel: cancel}
	d.wg.Add(3)
	go d.open(ctx)
	for range 2 {
		go d.work(ctx)
	}
	return d, nil
}

// Close stops the background work and closes the connection; updates
// still queued are dropped.
func (d *Directory) Close() {
	d.cancel()
	d.wg.Wait()
	d.nc.Close()
}

// Ready reports whether the bucket is open and NATS connected.
func (d *Directory) Ready() bool {
	return d.kv.Load() != nil && d.nc.Status() == nats.CONNECTED
}

// Dropped counts best-effort updates dropped because the queue was full.
func (d *Directory) Dropped() int64 { return d.dropped.Load() }

func (d *Directory) open(ctx context.Context) {
	defer d.wg.Done()
	js, err := jetstream.New(d.nc)
	if err != nil {
		d.cfg.Log.Error("directory: jetstream", "err", err)
		return
	}
	var last string
	for ctx.Err() == nil {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		kv, differs, err := jsconf.OpenKeyValue(octx, js, jetstream.KeyValueConfig{
			Bucket:      d.cfg.Bucket,
			Description: "Cellpay transaction directory: the owner cell of each transaction, and its answer",
			History:     1,
			Storage:     jetstream.FileStorage,
		}, d.cfg.Limits)
		cancel()
		if err == nil {
			d.kv.Store(&kv)
			if d.cfg.Drift != nil {
				d.cfg.Drift.Set(d.cfg.Bucket, differs)
			}
			if len(differs) > 0 {
				d.cfg.Log.Warn("transaction directory open; its bucket's limits differ from this cell's, kept as they are", "bucket", d.cfg.Bucket, "differences", differs)
			} else {
				d.cfg.Log.Info("transaction directory open", "bucket", d.cfg.Bucket)
			}
			return
		}
		if err.Error() != last {
			last = err.Error()
			d.cfg.Log.Warn("transaction directory unavailable; only natural homes take new transactions", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (d *Directory) bucket() (jetstream.KeyValue, error) {
	p := d.kv.Load()
	if p == nil || d.nc.Status() != nats.CONNECTED {
		return nil, ErrUnavailable
	}
	return *p, nil
}

func unavailable(err error) error { return fmt.Errorf("%w: %w", ErrUnavailable, err) }

// Claim creates k's entry as e. It returns the entry that holds k and
// whether it is this cell's (a new entry, or one e.Owner already owns).
func (d *Directory) Claim(ctx context.Context, k idempotency.Key, e Entry) (Entry, bool, error) {
	cur, ok, err := d.write(ctx, k, e, 0)
	if err != nil || ok {
		return cur, ok, err
	}
	return cur, cur.Owner == e.Owner, nil
}

// Take replaces k's entry, read at revision rev, with e: a takeover or a
// reclaim. It returns the entry that holds k and whether e is now it; on
// a lost race, the winner's entry.
func (d *Directory) Take(ctx context.Context, k idempotency.Key, e Entry, rev uint64) (Entry, bool, error) {
	return d.write(ctx, k, e, rev)
}

// write creates k's entry as e (rev 0) or updates it at rev. It returns e
// and true when written; else the entry that holds k. An entry gone
// between the write and the read (expired, purged) is created again.
func (d *Directory) write(ctx context.Context, k idempotency.Key, e Entry, rev uint64) (Entry, bool, error) {
	kv, err := d.bucket()
	if err != nil {
		return Entry{}, false, err
	}
	b, err := Encode(e)
	if err != nil {
		return Entry{}, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.OpTimeout)
	defer cancel()
	var n uint64
	if rev == 0 {
		n, err = kv.Create(ctx, Key(k), b)
	} else {
		n, err = kv.Update(ctx, Key(k), b, rev)
	}
	switch {
	case err == nil:
		e.Revision = n
		return e, true, nil
	case !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return Entry{}, false, unavailable(err)
	}
	cur, found, err := d.get(ctx, kv, k)
	switch {
	case err != nil:
		return Entry{}, false, err
	case !found:
		return d.write(ctx, k, e, 0)
	}
	return cur, false, nil
}

// Finalize records answer as k's outcome, for owner, with the payload's
// fingerprint fp under the key named fpKeyID. It succeeds when the
// entry is owner's (or missing: a transaction decided without a claim) and
// fails with ErrNotOwner when another cell owns it.
func (d *Directory) Finalize(ctx context.Context, k idempotency.Key, owner string, fp idempotency.Fingerprint, fpKeyID string, answer *cellpayv1.Transaction) error {
	final := Entry{Owner: owner, Fingerprint: fp, FingerprintKeyID: fpKeyID, State: Final, Answer: answer}
	return d.update(ctx, k, final, func(cur Entry) (bool, error) {
		switch {
		case cur.Owner != owner:
			return false, ErrNotOwner
		case cur.State == Final:
			return false, nil // written before; the owner's outcome never changes
		}
		return true, nil
	})
}

// Abandon marks k's entry abandoned if it is still the claim of call's
// attempt at owner: that attempt stopped before its point of no return.
func (d *Directory) Abandon(ctx context.Context, k idempotency.Key, owner, call string, attempt int32) error {
	return d.update(ctx, k, Entry{}, func(cur Entry) (bool, error) {
		if cur.Owner != owner || cur.State != Owned || !cur.SameAttempt(call, attempt) {
			return false, ErrNotOwner
		}
		return true, nil
	})
}

// update rewrites k's entry when ok says so: next, or for a zero next the
// current entry marked Abandoned. A missing entry is created as next (a
// zero next creates nothing).
func (d *Directory) update(ctx context.Context, k idempotency.Key, next Entry, ok func(Entry) (bool, error)) error {
	kv, err := d.bucket()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*d.cfg.OpTimeout)
	defer cancel()
	for range 3 {
		cur, found, err := d.get(ctx, kv, k)
		if err != nil {
			return err
		}
		if !found {
			if next.Owner == "" {
				return ErrNotOwner
			}
			b, err := Encode(next)
			if err != nil {
				return err
			}
			if _, err := kv.Create(ctx, Key(k), b); err == nil || !errors.Is(err, jetstream.ErrKeyExists) {
				return wrapUnavailable(err)
			}
			continue
		}
		write, err := ok(cur)
		if err != nil || !write {
			return err
		}
		e := next
		if e.Owner == "" {
			e = cur
			e.State = Abandoned
		}
		b, err := Encode(e)
		if err != nil {
			return err
		}
		_, err = kv.Update(ctx, Key(k), b, cur.Revision)
		if err == nil || !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return wrapUnavailable(err)
		}
	}
	return unavailable(errors.New("entry kept changing"))
}

func wrapUnavailable(err error) error {
	if err == nil {
		return nil
	}
	return unavailable(err)
}

// Get returns k's entry, and false when it has none.
func (d *Directory) Get(ctx context.Context, k idempotency.Key) (Entry, bool, error) {
	kv, err := d.bucket()
	if err != nil {
		return Entry{}, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.OpTimeout)
	defer cancel()
	return d.get(ctx, kv, k)
}

func (d *Directory) get(ctx context.Context, kv jetstream.KeyValue, k idempotency.Key) (Entry, bool, error) {
	v, err := kv.Get(ctx, Key(k))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return Entry{}, false, nil
	case err != nil:
		return Entry{}, false, unavailable(err)
	}
	e, err := Decode(v.Value())
	if err != nil {
		// A corrupt entry is no entry anyone may rely on: treat it as the
		// directory failing for this key, so that no rule takes it as
		// absent.
		return Entry{}, false, unavailable(err)
	}
	e.Revision = v.Revision()
	return e, true, nil
}

// Later runs fn in the background, bounded by the queue; when the queue is
// full it drops fn and counts it. Best-effort updates (Finalize, Abandon
// after the fact) go through here, so that no answer waits on them.
func (d *Directory) Later(fn func(ctx context.Context) error, what string) {
	select {
	case d.queue <- func(ctx context.Context) {
		if err := fn(ctx); err != nil && !errors.Is(err, ErrNotOwner) {
			d.cfg.Log.Debug("directory update not written", "op", what, "err", err)
		}
	}:
	default:
		d.dropped.Add(1)
	}
}

func (d *Directory) work(ctx context.Context) {
	defer d.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case fn := <-d.queue:
			fn(ctx)
		}
	}
}
