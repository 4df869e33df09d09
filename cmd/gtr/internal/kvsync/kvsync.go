// Package kvsync keeps every GTR replica's routing state converged through
// one key of a NATS KV bucket, and keeps the last-known configuration in a
// local file.
//
// The KV entry is the source of truth. Each replica watches it (and polls
// it as a safety net for missed updates) and applies every newer revision
// to its state.State. Changes go through Update: read the entry, change it,
// write it back only if its revision has not moved (optimistic
// concurrency), retrying on a conflict. On first start with an empty bucket
// the entry is seeded from the YAML config.
//
// Routing never waits on any of this. At start the replica publishes its
// last-known file (or, without one, the YAML) before it even dials NATS;
// while NATS is away it keeps routing on what it has, admin reads keep
// answering, and writes fail fast with ErrUnavailable.
package kvsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/cmd/gtr/internal/state"
)

// Errors Update returns; callers branch on them.
var (
	// ErrUnavailable means the config store cannot be reached now. Nothing
	// changed; routing goes on with the last-known table.
	ErrUnavailable = errors.New("kvsync: config store unavailable")
	// ErrConflict means other writers kept changing the entry while Update
	// retried.
	ErrConflict = errors.New("kvsync: concurrent updates, try again")
)

// Store states, as Status reports them.
const (
	StatusStandalone   = "standalone"
	StatusConnected    = "connected"
	StatusDisconnected = "disconnected"
)

// Config configures a Syncer.
type Config struct {
	State *state.State // required
	// Seed returns the configuration to start from when there is neither a
	// state file nor a KV entry (the YAML config). Required.
	Seed func() (state.Doc, error)
	// NATSURL is the NATS server; "" runs standalone: changes stay on this
	// replica (and in its state file).
	NATSURL string
	// Bucket and Key name the KV entry; defaults "cellpay_gtr", "routing".
	Bucket, Key string
	// StateFile keeps the last-known configuration; "" keeps none.
	StateFile string
	// ReplicaID names this replica in NATS and the state file.
	ReplicaID string
	// PollInterval is how often the entry is re-read in case a watch update
	// was missed; default 1s.
	PollInterval time.Duration
	// OpTimeout bounds each KV operation; default 2s.
	OpTimeout time.Duration
	Log       *slog.Logger
}

func (c *Config) validate() error {
	if c.State == nil || c.Seed == nil {
		return errors.New("kvsync: State and Seed are required")
	}
	if c.Bucket == "" {
		c.Bucket = "cellpay_gtr"
	}
	if c.Key == "" {
		c.Key = "routing"
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
	return nil
}

// Syncer runs the sync. Its methods are safe for concurrent use.
type Syncer struct {
	cfg    Config
	cancel context.CancelFunc
	done   chan struct{}

	nc *nats.Conn                         // nil when standalone
	kv atomic.Pointer[jetstream.KeyValue] // set once the bucket is open

	mu     sync.Mutex // serialises applying entries and writing the state file
	synced bool       // a KV entry has been applied since start
}

// Start publishes the last-known configuration (the state file, else Seed)
// to cfg.State and, with a NATS URL, starts syncing in the background. It
// never waits for NATS. Close stops it.
func Start(cfg Config) (*Syncer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Syncer{cfg: cfg, done: make(chan struct{})}
	if err := s.loadInitial(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if cfg.NATSURL == "" {
		close(s.done)
		return s, nil
	}
	nc, err := nats.Connect(cfg.NATSURL,
		nats.Name("gtr "+cfg.ReplicaID),
		nats.RetryOnFailedConnect(true), // do not wait for NATS at start
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.Timeout(time.Second),
		nats.NoCallbacksAfterClientClose(),
	)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("kvsync: nats: %w", err)
	}
	s.nc = nc
	go s.run(ctx)
	return s, nil
}

// Close stops syncing and closes the NATS connection. The state keeps the
// last configuration applied.
func (s *Syncer) Close() {
	s.cancel()
	<-s.done
	if s.nc != nil {
		s.nc.Close()
	}
}

// Status is StatusStandalone, StatusConnected or StatusDisconnected.
func (s *Syncer) Status() string {
	switch {
	case s.nc == nil:
		return StatusStandalone
	case s.nc.Status() == nats.CONNECTED && s.kv.Load() != nil:
		return StatusConnected
	}
	return StatusDisconnected
}

// fileFormat is the state file's content.
type fileFormat struct {
	Revision uint64    `json:"revision"`
	Replica  string    `json:"replica,omitempty"`
	SavedAt  time.Time `json:"saved_at"`
	Doc      state.Doc `json:"doc"`
}

func (s *Syncer) loadInitial() error {
	if s.cfg.StateFile != "" {
		b, err := os.ReadFile(s.cfg.StateFile)
		switch {
		case err == nil:
			var f fileFormat
			if err := json.Unmarshal(b, &f); err != nil {
				s.cfg.Log.Error("state file unreadable; starting from the config file", "path", s.cfg.StateFile, "err", err)
				break
			}
			if err := s.cfg.State.Apply(f.Doc, f.Revision); err != nil {
				s.cfg.Log.Error("state file invalid; starting from the config file", "path", s.cfg.StateFile, "err", err)
				break
			}
			s.cfg.Log.Info("routing from the last-known state file", "path", s.cfg.StateFile,
				"version", f.Doc.Version, "revision", f.Revision, "saved_at", f.SavedAt)
			return nil
		case !errors.Is(err, os.ErrNotExist):
			s.cfg.Log.Error("state file unreadable; starting from the config file", "path", s.cfg.StateFile, "err", err)
		}
	}
	d, err := s.cfg.Seed()
	if err != nil {
		return fmt.Errorf("kvsync: seed: %w", err)
	}
	if err := s.cfg.State.Apply(d, 0); err != nil {
		return fmt.Errorf("kvsync: seed: %w", err)
	}
	return nil
}

// save writes the state file atomically (write, sync, rename). s.mu held.
func (s *Syncer) save(d state.Doc, rev uint64) {
	if s.cfg.StateFile == "" {
		return
	}
	b, err := json.MarshalIndent(fileFormat{Revision: rev, Replica: s.cfg.ReplicaID, SavedAt: time.Now().UTC(), Doc: d}, "", "  ")
	if err == nil {
		err = writeFileAtomic(s.cfg.StateFile, b)
	}
	if err != nil {
		s.cfg.Log.Error("writing the state file", "path", s.cfg.StateFile, "err", err)
	}
}

func writeFileAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a successful rename this finds nothing
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// applyEntry applies a KV value at revision rev if it is newer than what the
// state has. The first entry after start is applied whatever its revision,
// so that a recreated bucket (revisions start again at 1) still wins over
// the state file. s.mu must not be held.
func (s *Syncer) applyEntry(value []byte, rev uint64) {
	var d state.Doc
	if err := json.Unmarshal(value, &d); err != nil {
		s.cfg.Log.Error("ignoring an undecodable routing entry", "revision", rev, "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applyLocked(d, rev)
}

func (s *Syncer) applyLocked(d state.Doc, rev uint64) {
	var applied bool
	var err error
	if s.synced {
		applied, err = s.cfg.State.ApplyNewer(d, rev)
	} else if _, cur, _ := s.cfg.State.Doc(); cur != rev {
		applied, err = true, s.cfg.State.Apply(d, rev)
	}
	if err != nil {
		s.cfg.Log.Error("ignoring an invalid routing entry; keeping the table in force", "revision", rev, "err", err)
		return
	}
	s.synced = true
	if applied {
		s.save(d, rev)
		s.cfg.Log.Info("routing configuration applied", "version", d.Version, "revision", rev)
	}
}

// Update changes the configuration with fn, which gets a copy of the
// current one and may be called more than once (once per attempt). Its
// errors come back unchanged and nothing is written. The result is checked
// with Doc.Validate, written with optimistic concurrency, applied to this
// replica at once, and reaches the others through their watches.
func (s *Syncer) Update(ctx context.Context, fn func(*state.Doc) error) (state.Doc, error) {
	if s.nc == nil {
		return s.updateLocal(fn)
	}
	kvp := s.kv.Load()
	if kvp == nil || s.nc.Status() != nats.CONNECTED {
		return state.Doc{}, ErrUnavailable
	}
	kv := *kvp
	for range 5 {
		octx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
		e, err := kv.Get(octx, s.cfg.Key)
		cancel()
		if err != nil {
			return state.Doc{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		var d state.Doc
		if err := json.Unmarshal(e.Value(), &d); err != nil {
			return state.Doc{}, fmt.Errorf("kvsync: the stored entry does not decode: %w", err)
		}
		if err := fn(&d); err != nil {
			return state.Doc{}, err
		}
		if err := d.Validate(); err != nil {
			return state.Doc{}, err
		}
		b, err := json.Marshal(d)
		if err != nil {
			return state.Doc{}, fmt.Errorf("kvsync: %w", err)
		}
		octx, cancel = context.WithTimeout(ctx, s.cfg.OpTimeout)
		rev, err := kv.Update(octx, s.cfg.Key, b, e.Revision())
		cancel()
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		if err != nil {
			return state.Doc{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		s.mu.Lock()
		s.applyLocked(d, rev)
		s.mu.Unlock()
		return d, nil
	}
	return state.Doc{}, ErrConflict
}

// updateLocal is Update without a config store: the change is applied to
// this replica and its state file only.
func (s *Syncer) updateLocal(fn func(*state.Doc) error) (state.Doc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, rev, ok := s.cfg.State.Doc()
	if !ok {
		return state.Doc{}, state.ErrNoTable
	}
	if err := fn(&d); err != nil {
		return state.Doc{}, err
	}
	if err := s.cfg.State.Apply(d, rev+1); err != nil {
		return state.Doc{}, err
	}
	s.save(d, rev+1)
	return d, nil
}
