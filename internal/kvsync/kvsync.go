// Package kvsync keeps a document converged across every GTR replica
// through one key of a NATS KV bucket, and keeps the last-known copy in a
// local file. The routing table (cmd/gtr/internal/routesync, key
// "routing") and the partner registry (internal/partnerstate, key
// "partners") are two instances of the one Replica. A read-only Replica
// (ReplicaConfig.ReadOnly) follows an entry without ever writing it: cells
// follow the partner registry that way, for their callback settings.
//
// The KV entry is the source of truth. Each replica watches it (and polls
// it as a safety net for missed updates) and applies every newer revision
// to its Target; a revision that is not newer is never even decoded.
// Changes go through Update: read the entry, change it, write it back only
// if its revision has not moved (optimistic concurrency), retrying on a
// conflict. On first start with an empty bucket the entry is seeded from
// the YAML config.
//
// Nothing that serves a request ever waits on any of this. At start the
// replica applies its last-known file (or, without one, the seed) before it
// even dials NATS; while NATS is away it keeps serving what it has, admin
// reads keep answering, and writes fail fast with ErrUnavailable. An entry
// that does not decode or validate is logged once and refused; the document
// in force stays.
package kvsync

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
)

// Errors Update returns; callers branch on them.
var (
	// ErrUnavailable means the config store cannot be reached now. Nothing
	// changed; the replica goes on with the last-known document.
	ErrUnavailable = errors.New("kvsync: config store unavailable")
	// ErrConflict means other writers kept changing the entry while Update
	// retried.
	ErrConflict = errors.New("kvsync: concurrent updates, try again")
	// ErrReadOnly: Update on a read-only Replica.
	ErrReadOnly = errors.New("kvsync: read-only replica")
)

// Store states, as Status reports them.
const (
	StatusStandalone   = "standalone"
	StatusConnected    = "connected"
	StatusDisconnected = "disconnected"
)

// DefaultBucket is the KV bucket every GTR document lives in.
const DefaultBucket = natsauth.GTRBucket

// DefaultMaxBytes bounds the bucket: its documents (a routing table, a
// partner registry) and their history take kilobytes to a few megabytes.
const DefaultMaxBytes = 64 << 20

// Target is one kind of replicated document, D, and its holder on this
// replica. A Replica calls its methods one at a time (under its own lock),
// never on a request's path.
type Target[D any] interface {
	// Decode reads a document from a KV value or a state file, refusing
	// what is malformed. It need not validate: Apply does.
	Decode(b []byte) (D, error)
	// Encode is Decode's inverse.
	Encode(d D) ([]byte, error)
	// Validate checks d whole. Update writes nothing that fails it.
	Validate(d D) error
	// Apply validates d and makes it the document in force on this
	// replica, read at KV revision rev (0: the seed). An invalid d is
	// refused and nothing changes. The caller does not change d afterwards.
	Apply(d D, rev uint64) error
	// Current returns the document in force, as a copy the caller may
	// change; ok is false before the first Apply.
	Current() (d D, ok bool)
}

// Versioned is an optional ability of a Target: the document's own
// version, which logs show next to the KV revision.
type Versioned[D any] interface {
	Version(d D) uint64
}

// ReplicaConfig configures a Replica.
type ReplicaConfig[D any] struct {
	Target Target[D] // required
	// Seed returns the document to start from when there is neither a
	// state file nor a KV entry (the YAML config). Required.
	Seed func() (D, error)
	// What names the document in logs, e.g. "routing table". Required.
	What string
	// NATSURL is the NATS server; "" runs standalone: changes stay on this
	// replica (and in its state file).
	NATSURL string
	// NATSTLS is the component's certificate as its NATS identity; zero
	// for plaintext NATS without authentication (tests, benchmarks).
	NATSTLS tlsconf.Files
	// Bucket and Key name the KV entry; Bucket defaults to DefaultBucket,
	// Key is required.
	Bucket, Key string
	// Limits are the bucket's if this replica creates it (nobody has
	// yet): Replicas (zero is 1), and MaxBytes (zero is DefaultMaxBytes).
	// A bucket that exists is kept as it is; Drift, if set, records
	// whether it differs (package jsconf).
	Limits jsconf.Limits
	Drift  *jsconf.Drift
	// StateFile keeps the last-known document; "" keeps none.
	StateFile string
	// ReplicaID names this replica in NATS and the state file.
	ReplicaID string
	// PollInterval is how often the entry is re-read in case a watch update
	// was missed; default 1s.
	PollInterval time.Duration
	// OpTimeout bounds each KV operation; default 2s.
	OpTimeout time.Duration
	// ReadOnly follows the entry only: the replica never creates the
	// bucket or the entry (it waits for them), Seed is only what it starts
	// from without a state file, and Update answers ErrReadOnly. A
	// component that must never change the document (a cell reading the
	// partner registry) runs this way.
	ReadOnly bool
	Log      *slog.Logger
}

func (c *ReplicaConfig[D]) validate() error {
	if c.Target == nil || c.Seed == nil || c.Key == "" || c.What == "" {
		return errors.New("kvsync: Target, Seed, Key and What are required")
	}
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if c.Limits.Replicas == 0 {
		c.Limits.Replicas = 1
	}
	if c.Limits.MaxBytes == 0 {
		c.Limits.MaxBytes = DefaultMaxBytes
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("kvsync: bucket %s: %w", c.Bucket, err)
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.OpTimeout <= 0 {
		c.OpTimeout = 2 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	c.Log = c.Log.With("doc", c.What)
	return nil
}

// Replica keeps one document converged. Its methods are safe for
// concurrent use.
type Replica[D any] struct {
	cfg    ReplicaConfig[D]
	cancel context.CancelFunc
	done   chan struct{}

	nc *nats.Conn                         // nil when standalone
	kv atomic.Pointer[jetstream.KeyValue] // set once the bucket is open
	// warnedLimits: the bucket's differing limits were logged (by run's
	// goroutine only).
	warnedLimits bool

	// mu serialises applying documents and writing the state file, and
	// guards the fields below.
	mu sync.Mutex
	// rev is the KV revision of the document applied last (0: the seed, or
	// nothing yet).
	rev uint64
	// synced: an entry of the current bucket has been applied (or found
	// equal to rev) since start; until then the first entry wins whatever
	// its revision, so that a recreated bucket (revisions start again at 1)
	// still wins over the state file.
	synced bool
	// refused is the last revision refused as undecodable or invalid, so
	// that polling does not decode and log it again every interval.
	refused uint64
}

// StartReplica applies the last-known document (the state file, else Seed)
// to cfg.Target and, with a NATS URL, starts syncing in the background. It
// never waits for NATS. Close stops it.
func StartReplica[D any](cfg ReplicaConfig[D]) (*Replica[D], error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Replica[D]{cfg: cfg, done: make(chan struct{})}
	if err := r.loadInitial(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	if cfg.NATSURL == "" {
		close(r.done)
		return r, nil
	}
	nc, err := natsconn.Connect(cfg.NATSURL, "cellpay "+cfg.ReplicaID+" "+cfg.Key, cfg.NATSTLS, nats.NoCallbacksAfterClientClose())
	if err != nil {
		cancel()
		return nil, fmt.Errorf("kvsync: nats: %w", err)
	}
	r.nc = nc
	go r.run(ctx)
	return r, nil
}

// Close stops syncing and closes the NATS connection. The target keeps the
// last document applied.
func (r *Replica[D]) Close() {
	r.cancel()
	<-r.done
	if r.nc != nil {
		r.nc.Close()
	}
}

// Status is StatusStandalone, StatusConnected or StatusDisconnected.
func (r *Replica[D]) Status() string {
	switch {
	case r.nc == nil:
		return StatusStandalone
	case r.nc.Status() == nats.CONNECTED && r.kv.Load() != nil:
		return StatusConnected
	}
	return StatusDisconnected
}

// logVersion is the document's version for a log line, when the target
// knows it.
func (r *Replica[D]) logVersion(d D) slog.Attr {
	if v, ok := r.cfg.Target.(Versioned[D]); ok {
		return slog.Uint64("version", v.Version(d))
	}
	return slog.Attr{}
}

// applyEntry applies a KV value at revision rev if rev is newer than what
// is in force (see synced), decoding it only then. r.mu must not be held.
func (r *Replica[D]) applyEntry(value []byte, rev uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.synced && rev <= r.rev, rev == r.refused:
		return
	case !r.synced && rev == r.rev:
		r.synced = true // the state file holds this very revision
		return
	}
	d, err := r.cfg.Target.Decode(value)
	if err != nil {
		r.refused = rev
		r.cfg.Log.Error("refused an entry that does not decode; keeping the document in force", "revision", rev, "err", err)
		return
	}
	r.applyLocked(d, rev)
}

// observeLatest is told the revision of the entry as a Get found it, the
// newest the bucket holds. One older than the revision in force means the
// bucket was recreated (a stream's revisions never go down), so its entries
// are taken afresh, whatever their revision.
func (r *Replica[D]) observeLatest(rev uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.synced && rev < r.rev {
		r.cfg.Log.Warn("the config store's revisions went back (bucket recreated); taking its entry", "revision", rev, "was", r.rev)
		r.synced, r.refused = false, 0
	}
}

// applyLocked applies d, read at rev, and records it. r.mu held.
func (r *Replica[D]) applyLocked(d D, rev uint64) {
	if r.synced && rev <= r.rev {
		return // the watch got there first
	}
	if err := r.cfg.Target.Apply(d, rev); err != nil {
		r.refused = rev
		r.cfg.Log.Error("refused an invalid entry; keeping the document in force", "revision", rev, "err", err)
		return
	}
	r.rev, r.synced = rev, true
	r.save(d, rev)
	r.cfg.Log.Info("configuration applied", r.logVersion(d), "revision", rev)
}

// Update changes the document with fn, which gets a copy of the current one
// and may be called more than once (once per attempt). Its errors come back
// unchanged and nothing is written. The result is checked with
// Target.Validate, written with optimistic concurrency, applied to this
// replica at once, and reaches the others through their watches.
func (r *Replica[D]) Update(ctx context.Context, fn func(*D) error) (D, error) {
	var zero D
	if r.cfg.ReadOnly {
		return zero, ErrReadOnly
	}
	if r.nc == nil {
		return r.updateLocal(fn)
	}
	kvp := r.kv.Load()
	if kvp == nil || r.nc.Status() != nats.CONNECTED {
		return zero, ErrUnavailable
	}
	kv := *kvp
	for range 5 {
		octx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
		e, err := kv.Get(octx, r.cfg.Key)
		cancel()
		if err != nil {
			return zero, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		r.observeLatest(e.Revision())
		d, err := r.cfg.Target.Decode(e.Value())
		if err != nil {
			return zero, fmt.Errorf("kvsync: the stored entry does not decode: %w", err)
		}
		if err := fn(&d); err != nil {
			return zero, err
		}
		if err := r.cfg.Target.Validate(d); err != nil {
			return zero, err
		}
		b, err := r.cfg.Target.Encode(d)
		if err != nil {
			return zero, fmt.Errorf("kvsync: %w", err)
		}
		octx, cancel = context.WithTimeout(ctx, r.cfg.OpTimeout)
		rev, err := kv.Update(octx, r.cfg.Key, b, e.Revision())
		cancel()
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		if err != nil {
			return zero, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		r.mu.Lock()
		r.applyLocked(d, rev)
		r.mu.Unlock()
		return d, nil
	}
	return zero, ErrConflict
}

// errNoDoc: Update before anything was applied, which Start rules out.
var errNoDoc = errors.New("kvsync: no document applied yet")

// updateLocal is Update without a config store: the change is applied to
// this replica and its state file only.
func (r *Replica[D]) updateLocal(fn func(*D) error) (D, error) {
	var zero D
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.cfg.Target.Current()
	if !ok {
		return zero, errNoDoc
	}
	if err := fn(&d); err != nil {
		return zero, err
	}
	if err := r.cfg.Target.Apply(d, r.rev+1); err != nil {
		return zero, err
	}
	r.rev++
	r.save(d, r.rev)
	return d, nil
}
