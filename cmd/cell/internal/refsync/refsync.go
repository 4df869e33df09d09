// Package refsync keeps a cell's reference data: a durable JetStream
// consumer receives every version the replicator publishes, validates it
// whole, writes it to the cell's Postgres in one transaction, then serves it
// (an atomic pointer to the immutable snapshot: view.go), and only then
// acks it. Transactions read the served snapshot through View, lock-free,
// one version per attempt, and never
// wait on NATS or on an apply.
//
// A version that does not decode (a version outside 1..refdata.MaxVersion
// included: it could not be stored, or would leave no room for the next
// one), does not validate, or does not follow the served one (an update
// whose base is not served) is refused whole: logged with the reason,
// counted, terminated in JetStream (never redelivered), and the served
// version stays. A version that fails for a passing reason (Postgres down) is
// redelivered; the consumer allows one unacknowledged message at a time, so
// versions are applied strictly in order.
//
// At start the cell serves the version stored in its Postgres; a cell with
// none serves a bootstrap file as version 0 (below every published
// version), or nothing, and is not ready, until the first version arrives.
// With NATS down it keeps serving what it has.
//
// Several instances of a cell share its Postgres and its durable consumer
// (docs/design/cell-instances.md): each version reaches one of them, which
// stores it, and every instance follows the stored version (Shared): it
// loads a version a sibling stored within FollowInterval, and before it
// applies a message, so that an update's base is checked against the
// cell's version, not a stale copy.
//
// It reports on NATS (refdata.StatusSubjectPrefix + cell ID) the version
// the cell serves: with a Shared store, the minimum over its live
// instances; and as metrics on the cell's meter (RegisterMetrics), staleness (the
// age of the served version) included.
package refsync

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

	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/internal/jsconf"
	"github.com/cellpay/cellpay/internal/natsconn"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/internal/refdata/refnats"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// Sources of the served version, as reported in refdata.Status.
const (
	SourceNone      = "none"
	SourceBootstrap = "bootstrap"
	SourcePostgres  = "postgres"
	SourceNATS      = "nats"
)

// Store is the cell's Postgres as refsync needs it; *store.Store implements
// it, with the contracts documented there.
type Store interface {
	// LoadRefdata reads the stored version whole, or store.ErrNoRefdata.
	LoadRefdata(ctx context.Context) (refdata.File, store.RefdataMeta, error)
	// SaveRefdataSnapshotDiff replaces the stored version with next in one
	// transaction, writing only d if base (> 0) is the stored version;
	// store.ErrRefdataOrder if next is not newer.
	SaveRefdataSnapshotDiff(ctx context.Context, base uint64, d refdata.Diff, next *refdata.Snapshot, meta store.RefdataMeta) error
	// SaveRefdataUpdate applies an update to base in one transaction;
	// store.ErrRefdataOrder if base is not stored.
	SaveRefdataUpdate(ctx context.Context, base, version uint64, u refdata.Update, meta store.RefdataMeta) error
}

// Shared is the ability of a Store that several instances of the cell
// share; *store.Store has it. Without it the syncer is the cell's only
// instance.
type Shared interface {
	// StoredRefdataVersion returns the version stored, 0 for none.
	StoredRefdataVersion(ctx context.Context) (uint64, error)
	// ServedRefdata returns the minimum version the cell's live instances
	// serve; false when none serves one.
	ServedRefdata(ctx context.Context) (uint64, bool, error)
}

// Config configures a Syncer.
type Config struct {
	CellID string // required
	Store  Store  // required
	// NATSURL is the NATS server; "" runs without NATS (stored or
	// bootstrap data only).
	NATSURL string
	// NATSTLS is the component's certificate as its NATS identity; zero
	// for plaintext NATS without authentication (tests, benchmarks).
	NATSTLS tlsconf.Files
	// StreamReplicas is the reference data stream's replica count if this
	// cell creates it (the replicator has not yet); zero is 1. Drift, if
	// set, records whether the stream found differs (package jsconf).
	StreamReplicas int
	Drift          *jsconf.Drift
	// BootstrapFile, if set, is served as version 0 by a cell that has no
	// stored version.
	BootstrapFile string
	// StatusInterval is how often the status is published; default
	// refdata.StatusInterval.
	StatusInterval time.Duration
	// FollowInterval is how often a Shared store's version is checked for
	// one a sibling stored; default 1s.
	FollowInterval time.Duration
	Now            func() time.Time // default time.Now
	Log            *slog.Logger     // default slog.Default()
}

func (c *Config) validate() error {
	if c.CellID == "" || c.Store == nil {
		return errors.New("refsync: CellID and Store are required")
	}
	if c.StatusInterval <= 0 {
		c.StatusInterval = refdata.StatusInterval
	}
	if c.FollowInterval <= 0 {
		c.FollowInterval = time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// Syncer holds a cell's reference data. View is safe for concurrent use;
// Run is called once.
type Syncer struct {
	cfg     Config
	serving chan struct{} // closed when a version is first served
	once    sync.Once
	kick    chan struct{} // asks for a status report now
	// applyMu serializes what changes the served version: the consumer's
	// applies and following the stored version.
	applyMu sync.Mutex

	// cur is the served version, validated and immutable; nil if none.
	// Written under applyMu and mu (with source and meta) by the consumer,
	// following and New; read with no lock by View, one load per attempt.
	cur    atomic.Pointer[refdata.Snapshot]
	mu     sync.Mutex
	source string
	meta   metaRow

	applied     atomic.Uint64
	refused     atomic.Uint64
	lastRefused atomic.Value // string
	connected   atomic.Bool
	lastApply   atomic.Int64 // nanoseconds the last apply took
	// warnedDiffers: the stream's differing limits were logged (once;
	// read and written by the consumer loop only).
	warnedDiffers bool
}

// New loads what the cell can serve before any message arrives: its stored
// version, else the bootstrap file.
func New(ctx context.Context, cfg Config) (*Syncer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Syncer{
		cfg:     cfg,
		serving: make(chan struct{}),
		kick:    make(chan struct{}, 1),
		source:  SourceNone,
	}
	s.lastRefused.Store("")
	f, meta, err := cfg.Store.LoadRefdata(ctx)
	switch {
	case err == nil:
		snap, verr := refdata.FromFile(f)
		if verr == nil {
			err = s.serve(snap, SourcePostgres, meta.PublishedAt, meta.AppliedAt)
			if err == nil {
				cfg.Log.Info("serving reference data from postgres", "version", snap.Seq())
			}
			return s, err
		}
		// Stored under older rules: do not serve it, and wait for NATS.
		cfg.Log.Error("stored reference data does not validate; not serving it", "version", f.Version, "reason", verr)
	case !errors.Is(err, store.ErrNoRefdata):
		return nil, fmt.Errorf("refsync: %w", err)
	}
	if cfg.BootstrapFile != "" {
		snap, err := refdata.Load(cfg.BootstrapFile)
		if err == nil {
			f := snap.File()
			f.Version = 0
			snap, err = refdata.FromFile(f)
		}
		if err == nil {
			cfg.Log.Info("serving reference data from the bootstrap file as version 0", "file", cfg.BootstrapFile)
			return s, s.serve(snap, SourceBootstrap, time.Time{}, cfg.Now())
		}
		if cfg.NATSURL == "" {
			return nil, fmt.Errorf("refsync: bootstrap: %w", err)
		}
		cfg.Log.Warn("bootstrap file unusable; waiting for NATS", "error", err)
	} else if cfg.NATSURL == "" {
		return nil, errors.New("refsync: no stored reference data, no bootstrap file and no NATS")
	}
	return s, nil
}

// View returns the version to use now. A transaction takes one View and
// uses it throughout, so that it prices and classifies with one version.
func (s *Syncer) View() View { return View{snap: s.cur.Load()} }

// Serving reports whether a version is served.
func (s *Syncer) Serving() bool {
	select {
	case <-s.serving:
		return true
	default:
		return false
	}
}

// WaitServing blocks until a version is served or ctx ends.
func (s *Syncer) WaitServing(ctx context.Context) error {
	select {
	case <-s.serving:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Status reports the served version.
func (s *Syncer) Status() refdata.Status {
	s.mu.Lock()
	st := refdata.Status{
		Cell: s.cfg.CellID, Source: s.source,
		PublishedAt: s.meta.PublishedAt, AppliedAt: s.meta.AppliedAt,
	}
	if s.cur.Load() != nil {
		st.Version = s.cur.Load().Seq()
	}
	s.mu.Unlock()
	st.Refused = s.refused.Load()
	st.LastRefused = s.lastRefused.Load().(string)
	st.ReportedAt = s.cfg.Now().UTC()
	return st
}

// Served is the version this instance serves; nil for none.
func (s *Syncer) Served() *uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur.Load() == nil {
		return nil
	}
	v := s.cur.Load().Seq()
	if s.source == SourceBootstrap {
		v = 0
	}
	return &v
}

// cellStatus is the status the cell reports: Status, with the version the
// cell's live instances all serve when the store is Shared (never above
// this instance's own).
func (s *Syncer) cellStatus(ctx context.Context) refdata.Status {
	st := s.Status()
	if sh, ok := s.cfg.Store.(Shared); ok {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		v, ok, err := sh.ServedRefdata(ctx)
		cancel()
		if err == nil && ok && v < st.Version {
			st.Version = v
		}
	}
	return st
}

// Staleness is the age of the served version: since it was published, or
// since a bootstrap file was loaded. -1 when nothing is served.
func (s *Syncer) Staleness() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur.Load() == nil {
		return -1
	}
	t := s.meta.PublishedAt
	if t.IsZero() {
		t = s.meta.AppliedAt
	}
	return s.cfg.Now().Sub(t)
}

// serve makes snap the served version, in memory.
func (s *Syncer) serve(snap *refdata.Snapshot, source string, publishedAt, appliedAt time.Time) error {
	s.setServed(snap, metaRow{Source: source, PublishedAt: publishedAt.UTC(), AppliedAt: appliedAt.UTC()})
	return nil
}

func (s *Syncer) setServed(snap *refdata.Snapshot, meta metaRow) {
	s.mu.Lock()
	s.cur.Store(snap)
	s.source, s.meta = meta.Source, meta
	s.mu.Unlock()
	s.once.Do(func() { close(s.serving) })
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// natsVersion is the newest version received from NATS that is served (0
// for a bootstrap file or nothing): anything at or below it is a
// redelivery.
func (s *Syncer) natsVersion() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur.Load() == nil || s.source == SourceBootstrap {
		return 0
	}
	return s.cur.Load().Seq()
}

// Run consumes versions from NATS and reports status until ctx ends.
// Without a NATS URL it waits for ctx. Its metrics are registered on the
// process's meter with RegisterMetrics.
func (s *Syncer) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	if _, ok := s.cfg.Store.(Shared); ok {
		wg.Go(func() { s.followLoop(ctx) })
	}
	if s.cfg.NATSURL == "" {
		<-ctx.Done()
		return nil
	}
	nc, err := natsconn.Connect(s.cfg.NATSURL, "cellpay-"+s.cfg.CellID, s.cfg.NATSTLS,
		nats.ConnectHandler(func(*nats.Conn) { s.connected.Store(true) }),
		nats.ReconnectHandler(func(*nats.Conn) { s.connected.Store(true) }),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { s.connected.Store(false) }),
	)
	if err != nil {
		return fmt.Errorf("refsync: nats: %w", err)
	}
	defer nc.Close()
	s.connected.Store(nc.IsConnected())
	wg.Go(func() { s.reportLoop(ctx, nc) })
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("refsync: jetstream: %w", err)
	}
	for delay := 250 * time.Millisecond; ctx.Err() == nil; delay = min(delay*2, 2*time.Second) {
		err := s.consume(ctx, js)
		if ctx.Err() != nil {
			break
		}
		s.cfg.Log.Warn("reference data consumer stopped; retrying", "error", err, "in", delay)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
	}
	return nil
}

// consume binds the durable consumer and applies messages until an error.
func (s *Syncer) consume(ctx context.Context, js jetstream.JetStream) error {
	setup, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stream, differs, err := refnats.EnsureStream(setup, js, s.cfg.StreamReplicas)
	if err != nil {
		return err
	}
	if s.cfg.Drift != nil {
		s.cfg.Drift.Set(refdata.Stream, differs)
	}
	if len(differs) > 0 && !s.warnedDiffers {
		s.warnedDiffers = true
		s.cfg.Log.Warn("reference data stream's limits differ from this cell's, kept as they are", "stream", refdata.Stream, "differences", differs)
	}
	cons, err := stream.CreateOrUpdateConsumer(setup, jetstream.ConsumerConfig{
		Durable:       "cell-" + s.cfg.CellID,
		Description:   "reference data for cell " + s.cfg.CellID,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		// One at a time: a redelivered version is never overtaken.
		MaxAckPending: 1,
	})
	if err != nil {
		return fmt.Errorf("refsync: consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1), jetstream.PullHeartbeat(2*time.Second))
	if err != nil {
		return fmt.Errorf("refsync: messages: %w", err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		msg, err := it.Next()
		if err != nil {
			return fmt.Errorf("refsync: next: %w", err)
		}
		s.handle(ctx, msg)
	}
}

// followLoop serves the stored version whenever a sibling stored a newer
// one, until ctx ends.
func (s *Syncer) followLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.FollowInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.applyMu.Lock()
		err := s.follow(ctx)
		s.applyMu.Unlock()
		if err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("reference data: cannot follow the stored version", "error", err)
		}
	}
}

// follow serves the stored version if it is newer than the served one: a
// sibling instance stored it. The caller holds applyMu.
func (s *Syncer) follow(ctx context.Context) error {
	sh, ok := s.cfg.Store.(Shared)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := sh.StoredRefdataVersion(ctx)
	if err != nil || v == 0 || v <= s.natsVersion() {
		return err
	}
	f, meta, err := s.cfg.Store.LoadRefdata(ctx)
	if err != nil {
		return fmt.Errorf("refsync: follow: %w", err)
	}
	snap, err := refdata.FromFile(f)
	if err != nil {
		return fmt.Errorf("refsync: follow: version %d: %w", f.Version, err)
	}
	if err := s.serve(snap, SourcePostgres, meta.PublishedAt, meta.AppliedAt); err != nil {
		return err
	}
	s.cfg.Log.Info("reference data: serving the version another instance stored", "version", snap.Seq())
	return nil
}

// handle applies one message and acks, terminates or naks it.
func (s *Syncer) handle(ctx context.Context, msg jetstream.Msg) {
	start := time.Now()
	m, err := refdata.DecodeMessage(msg.Data())
	if err != nil {
		s.refuse(msg, 0, err)
		return
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	// A sibling may have stored versions this instance has not loaded
	// yet: its base is the cell's stored version.
	if err := s.follow(ctx); err != nil {
		s.cfg.Log.Warn("reference data version not applied: the stored version is unknown; will retry", "version", m.Version, "error", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if m.Version <= s.natsVersion() {
		_ = msg.Ack() // applied before a restart, acked or not
		return
	}
	snap, err := s.validate(m)
	if err != nil {
		s.refuse(msg, m.Version, err)
		return
	}
	// A snapshot is written as its difference from the served version
	// (a NATS or Postgres one: a bootstrap file is not stored), in Postgres
	// if it stores that version, and in memory.
	s.mu.Lock()
	prev := s.cur.Load()
	if s.source == SourceBootstrap {
		prev = nil
	}
	s.mu.Unlock()
	var diff refdata.Diff
	var base uint64
	if m.Kind == refdata.KindSnapshot && prev != nil {
		diff, base = snap.Diff(prev), prev.Seq()
	}
	now := s.cfg.Now()
	meta := store.RefdataMeta{Kind: m.Kind, Hash: m.Hash, PublishedAt: m.PublishedAt.UTC(), AppliedAt: now.UTC()}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if m.Kind == refdata.KindSnapshot {
		err = s.cfg.Store.SaveRefdataSnapshotDiff(pctx, base, diff, snap, meta)
	} else {
		err = s.cfg.Store.SaveRefdataUpdate(pctx, m.Base, m.Version, *m.Update, meta)
	}
	cancel()
	if errors.Is(err, store.ErrRefdataOrder) {
		s.refuse(msg, m.Version, err)
		return
	}
	if err != nil {
		// Postgres is away: the version is not applied anywhere. Try again.
		s.cfg.Log.Warn("reference data version not stored; will retry", "version", m.Version, "error", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	s.setServed(snap, metaRow{Source: SourceNATS, PublishedAt: meta.PublishedAt, AppliedAt: meta.AppliedAt})
	s.applied.Add(1)
	s.lastApply.Store(int64(time.Since(start)))
	_ = msg.Ack()
	s.cfg.Log.Info("reference data version applied", "version", m.Version, "kind", m.Kind,
		"lag", now.Sub(m.PublishedAt).String(), "took", time.Since(start).String())
}

// validate builds the version m describes on top of the served one.
func (s *Syncer) validate(m *refdata.Message) (*refdata.Snapshot, error) {
	if m.Kind == refdata.KindSnapshot {
		return refdata.FromFile(*m.Snapshot)
	}
	s.mu.Lock()
	cur, source := s.cur.Load(), s.source
	s.mu.Unlock()
	if cur == nil || source == SourceBootstrap || cur.Seq() != m.Base {
		served := uint64(0)
		if cur != nil && source != SourceBootstrap {
			served = cur.Seq()
		}
		return nil, fmt.Errorf("%w: update %d is based on %d, but %d is served", refdata.ErrInconsistent, m.Version, m.Base, served)
	}
	return cur.Apply(m.Version, *m.Update)
}

func (s *Syncer) refuse(msg jetstream.Msg, version uint64, reason error) {
	// Logged before it is counted, so that whoever sees the count also
	// finds the log line.
	s.cfg.Log.Error("reference data version refused; keeping the served version",
		"version", version, "served", s.Status().Version, "reason", reason.Error())
	s.lastRefused.Store(fmt.Sprintf("version %d: %v", version, reason))
	s.refused.Add(1)
	_ = msg.Term()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}
