// Package partnerstate holds this process's partner registry: the
// partners.Registry replicated through the config store's "partners" key
// (kvsync, beside the routing table), compiled into a partners.Index and
// published through an atomic pointer.
//
// Index is what authenticating a partner's call reads: one atomic load,
// never a lock, never NATS, no allocation, and never nil (an empty
// registry, which refuses every key, until one loads). Update is for the
// Admin API. While NATS is away the replica keeps authenticating with its
// last-known registry (also kept in its own state file, which it starts
// from), and Update fails fast with ErrUnavailable.
//
// A cell runs it read-only (Config.ReadOnly) to follow partners' callback
// settings: it never writes the registry, and nothing of a transaction's
// path reads it.
//
// This package never logs a key, a hash or a signing secret: kvsync logs
// versions and revisions only.
package partnerstate

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cellpay/cellpay/internal/jsconf"
	"github.com/cellpay/cellpay/internal/kvsync"
	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// Key is the registry's key in the config store's bucket.
const Key = "partners"

// Errors Update returns besides fn's and validation's (partners.ErrInvalid);
// callers branch on them.
var (
	// ErrUnavailable: the config store cannot be reached now. Nothing
	// changed; authentication goes on with the last-known registry.
	ErrUnavailable = kvsync.ErrUnavailable
	// ErrConflict: other writers kept changing the registry while Update
	// retried.
	ErrConflict = kvsync.ErrConflict
)

// Config configures a Store.
type Config struct {
	// File is the registry (YAML, partners.Load) that seeds an empty
	// bucket, and that a replica without a state file starts from. ""
	// is an empty registry: every partner call is refused.
	File string
	// NATSURL is the NATS server holding the config store; "" runs
	// standalone (changes stay on this replica and in its state file).
	NATSURL string
	// NATSTLS is the component's certificate as its NATS identity; zero
	// for plaintext NATS without authentication (tests, benchmarks).
	NATSTLS tlsconf.Files
	// Bucket is the config store's KV bucket; default kvsync.DefaultBucket.
	Bucket string
	// StateFile keeps the last-known registry; "" keeps none. It holds
	// key hashes and callback signing secrets, so it is written 0600.
	StateFile string
	// ReplicaID names this replica in NATS and the state file.
	ReplicaID string
	// PollInterval and OpTimeout: see kvsync.ReplicaConfig.
	PollInterval, OpTimeout time.Duration
	// ReadOnly follows the registry without ever writing it: it never
	// creates the bucket or seeds the entry (File is only what it starts
	// from without a state file), and Update answers kvsync.ErrReadOnly.
	// Cells run this way: they read partners' callback settings.
	ReadOnly bool
	// Limits and Drift: see kvsync.ReplicaConfig.
	Limits jsconf.Limits
	Drift  *jsconf.Drift
	Log    *slog.Logger
}

// Store is this replica's partner registry. Its methods are safe for
// concurrent use.
type Store struct {
	ix  atomic.Pointer[partners.Index]
	rep *kvsync.Replica[partners.Registry]
}

// empty is the Index of a Store before its first registry loads.
var empty = func() *partners.Index {
	ix, err := partners.Compile(&partners.Registry{})
	if err != nil {
		panic(err) // an empty registry is valid
	}
	return ix
}()

// Start applies the last-known registry (the state file, else cfg.File)
// and, with a NATS URL, starts syncing in the background. It never waits
// for NATS. Close stops it.
func Start(cfg Config) (*Store, error) {
	s := &Store{}
	s.ix.Store(empty)
	rep, err := kvsync.StartReplica(kvsync.ReplicaConfig[partners.Registry]{
		Target: target{s}, Seed: seed(cfg.File), What: "partner registry", Key: Key,
		NATSURL: cfg.NATSURL, NATSTLS: cfg.NATSTLS, Bucket: cfg.Bucket, StateFile: cfg.StateFile, ReplicaID: cfg.ReplicaID,
		PollInterval: cfg.PollInterval, OpTimeout: cfg.OpTimeout, Limits: cfg.Limits, Drift: cfg.Drift, ReadOnly: cfg.ReadOnly, Log: cfg.Log,
	})
	if err != nil {
		return nil, err
	}
	s.rep = rep
	return s, nil
}

func seed(file string) func() (partners.Registry, error) {
	return func() (partners.Registry, error) {
		if file == "" {
			return partners.Registry{}, nil
		}
		r, err := partners.Load(file)
		if err != nil {
			return partners.Registry{}, err
		}
		return *r, nil
	}
}

// Index is the registry in force: one atomic load, which never blocks and
// never allocates. It is never nil. Callers must not change what it holds.
func (s *Store) Index() *partners.Index { return s.ix.Load() }

// Update changes the registry with fn, which gets a copy of the current
// one with Version already raised by one, and may be called more than
// once (once per attempt; the last one is what is written). Its errors come
// back unchanged and nothing is written. A Version that fn changes is set
// back. The result is validated (partners.ErrInvalid), written with
// optimistic concurrency, in force on this replica when Update returns, and
// reaches the others through the config store. ErrUnavailable when NATS is
// away (and the store is not standalone), ErrConflict after too many races.
func (s *Store) Update(ctx context.Context, fn func(*partners.Registry) error) error {
	_, err := s.rep.Update(ctx, func(r *partners.Registry) error {
		v := r.Version + 1
		r.Version = v
		if err := fn(r); err != nil {
			return err
		}
		r.Version = v
		return nil
	})
	return err
}

// Status is "connected", "disconnected" or "standalone".
func (s *Store) Status() string { return s.rep.Status() }

// Close stops syncing. Index keeps answering with the last registry.
func (s *Store) Close() { s.rep.Close() }

// target is the registry as a kvsync.Target: strict JSON in the store and
// the state file, applied by compiling and publishing its Index.
type target struct{ s *Store }

func (target) Decode(b []byte) (partners.Registry, error) { return decodeEntry(b) }

// decodeEntry reads a KV entry (or a state file's document): strict JSON,
// validated.
func decodeEntry(b []byte) (partners.Registry, error) {
	r, err := partners.ParseJSON(b)
	if err != nil {
		return partners.Registry{}, err
	}
	return *r, nil
}

func (target) Encode(r partners.Registry) ([]byte, error) { return json.Marshal(r) }
func (target) Validate(r partners.Registry) error         { return r.Validate() }
func (target) Version(r partners.Registry) uint64         { return r.Version }

// Apply compiles a copy of r (the Index keeps what it compiles, and r's
// slices are shared with the caller) and publishes it.
func (t target) Apply(r partners.Registry, _ uint64) error {
	ix, err := partners.Compile(r.Clone())
	if err != nil {
		return err
	}
	t.s.ix.Store(ix)
	return nil
}

func (t target) Current() (partners.Registry, bool) {
	ix := t.s.ix.Load()
	if ix == empty {
		return partners.Registry{}, false
	}
	return *ix.Registry().Clone(), true
}
