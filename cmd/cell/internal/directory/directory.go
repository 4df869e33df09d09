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
	// SigningCert is the certificate whose key signs this cell's entries,
	// and whose CA every entry's signer must chain to; NATSTLS when zero.
	// With neither, entries are written unsigned and only unsigned ones
	// are read (a test's plaintext NATS).
	SigningCert tlsconf.Files
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
	if !c.SigningCert.Set() {
		c.SigningCert = c.NATSTLS
	}
	return nil
}

// History is how many revisions of an entry the bucket keeps (the
// MaxMsgsPerSubject of its stream): every one, from the claim on, so that
// a reader judges each change by the rules (verify). A claim, its
// takeovers, pin and final state take a few; past History, NATS refuses
// more writes to the key (DiscardNewPerSubject), so a writer can fill an
// entry up but never push its history out.
const History = 16

// Directory is a cell's connection to the transaction directory. It is
// safe for concurrent use.
type Directory struct {
	cfg     Config
	nc      *nats.Conn
	kv      atomic.Pointer[jetstream.KeyValue]
	stream  atomic.Pointer[jetstream.Stream]
	signer  *signer // nil: unsigned
	trust   *trust  // nil: unsigned
	queue   chan func(context.Context)
	dropped atomic.Int64
	forged  atomic.Int64
	health  outage
	opened  chan struct{} // closed once the bucket is open
	// releases caches the release records read (ReleaseKey), by cell.
	releases struct {
		sync.Mutex
		m map[string]releaseSeen
	}
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Open connects to NATS and opens (creating it if needed) the bucket in
// the background: a cell starts whether or not NATS is up, and the
// directory is unavailable until it is.
func Open(cfg Config) (*Directory, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	d := &Directory{cfg: cfg, queue: make(chan func(context.Context), cfg.QueueSize), health: outage{after: OutageAfter, now: time.Now},
		opened: make(chan struct{})}
	if cfg.SigningCert.Set() {
		var err error
		if d.signer, err = newSigner(cfg.CellID, cfg.SigningCert); err != nil {
			return nil, err
		}
		if d.trust, err = newTrust(cfg.SigningCert.CA); err != nil {
			return nil, err
		}
	}
	// The connection's state is seen as operations are: lost, a failure
	// seen then; back, an answer.
	nc, err := natsconn.Connect(cfg.NATSURL, "cellpay "+cfg.CellID+" directory", cfg.NATSTLS, nats.NoCallbacksAfterClientClose(),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { d.health.observe(context.Background(), ErrUnavailable) }),
		nats.ReconnectHandler(func(*nats.Conn) { d.health.observe(context.Background(), nil) }))
	if err != nil {
		return nil, fmt.Errorf("directory: nats: %w", err)
	}
	if nc.Status() != nats.CONNECTED {
		d.health.observe(context.Background(), ErrUnavailable) // started without NATS
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.nc, d.cancel = nc, cancel
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

// WaitOpen waits until the bucket is open, for at most wait or until ctx
// ends, and reports whether it is: a cell that serves before its
// directory is open re-routes what it could not claim until the directory
// opens, or until it has been unavailable for OutageAfter.
func (d *Directory) WaitOpen(ctx context.Context, wait time.Duration) bool {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-d.opened:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// Ready reports whether the bucket is open and NATS connected.
func (d *Directory) Ready() bool {
	return d.kv.Load() != nil && d.nc.Status() == nats.CONNECTED
}

// Dropped counts best-effort updates dropped because the queue was full.
func (d *Directory) Dropped() int64 { return d.dropped.Load() }

// Forged counts the revisions of entries this cell read and ignored: a
// signature that does not verify, a change the rules do not allow, a
// delete marker (verify).
func (d *Directory) Forged() int64 { return d.forged.Load() }

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
		st, kv, differs, err := d.openBucket(octx, js)
		cancel()
		if err == nil {
			d.stream.Store(&st) // before kv: bucket() says ready by kv
			d.kv.Store(&kv)
			d.health.observe(ctx, nil)
			close(d.opened)
			if d.cfg.Drift != nil {
				d.cfg.Drift.Set(d.cfg.Bucket, differs)
			}
			if len(differs) > 0 {
				d.cfg.Log.Warn("transaction directory open; its bucket's configuration differs from this cell's, kept as it is", "bucket", d.cfg.Bucket, "differences", differs)
			} else {
				d.cfg.Log.Info("transaction directory open", "bucket", d.cfg.Bucket, "signed", d.signer != nil)
			}
			return
		}
		d.health.observe(ctx, unavailable(err))
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

// openBucket opens the bucket's stream, creating it when missing with the
// directory's configuration: a key-value bucket's, with every revision of
// a key kept (History, new ones refused past it) and no rollup, purge or
// delete, so that no writer can erase an entry's history. It returns how
// the stream found differs from that configuration.
func (d *Directory) openBucket(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, jetstream.KeyValue, []string, error) {
	name := "KV_" + d.cfg.Bucket // a bucket's stream, as nats.go names it
	st, differs, err := jsconf.OpenStream(ctx, js, jetstream.StreamConfig{
		Name:                 name,
		Description:          "Cellpay transaction directory: the owner cell of each transaction, and its answer, signed by the owner",
		Subjects:             []string{"$KV." + d.cfg.Bucket + ".>"},
		Storage:              jetstream.FileStorage,
		MaxMsgsPerSubject:    History,
		MaxMsgSize:           MaxEncoded + maxChain,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		Duplicates:           2 * time.Minute,
		DenyDelete:           true,
		DenyPurge:            true,
		AllowRollup:          false,
		AllowDirect:          true,
	}, d.cfg.Limits)
	if err != nil {
		return nil, nil, nil, err
	}
	c := st.CachedInfo().Config
	if c.AllowRollup || !c.DenyPurge || !c.DenyDelete || !c.DiscardNewPerSubject || c.MaxMsgsPerSubject < History {
		differs = append(differs, fmt.Sprintf("history %d, rollup %v, purge denied %v, delete denied %v, new refused per key %v: want %d, false, true, true, true (else an entry's history can be erased, and a forged change cannot be told)",
			c.MaxMsgsPerSubject, c.AllowRollup, c.DenyPurge, c.DenyDelete, c.DiscardNewPerSubject, History))
	}
	kv, err := js.KeyValue(ctx, d.cfg.Bucket)
	if err != nil {
		return nil, nil, nil, err
	}
	if d.signer != nil {
		sc, err := d.signer.current()
		if err != nil {
			return nil, nil, nil, err
		}
		if err := d.publish(ctx, kv, sc); err != nil {
			return nil, nil, nil, err
		}
	}
	return st, kv, differs, nil
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
	d.health.observe(ctx, err)
	if err != nil || ok {
		return cur, ok, err
	}
	return cur, cur.Owner == e.Owner, nil
}

// Take replaces k's entry, read at revision rev, with e: a takeover or a
// reclaim. It returns the entry that holds k and whether e is now it; on
// a lost race, the winner's entry.
func (d *Directory) Take(ctx context.Context, k idempotency.Key, e Entry, rev uint64) (Entry, bool, error) {
	cur, ok, err := d.write(ctx, k, e, rev)
	d.health.observe(ctx, err)
	return cur, ok, err
}

// write creates k's entry as e (rev 0) or updates it at rev. It returns e
// and true when written; else the entry that holds k. A key whose
// revisions hold no entry a reader may rely on (every one ignored, or
// expired) is written over at its last revision.
func (d *Directory) write(ctx context.Context, k idempotency.Key, e Entry, rev uint64) (Entry, bool, error) {
	kv, err := d.bucket()
	if err != nil {
		return Entry{}, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.OpTimeout)
	defer cancel()
	for range 3 {
		b, err := d.seal(ctx, kv, Key(k), e)
		if err != nil {
			return Entry{}, false, err
		}
		// Update at revision 0 succeeds only on a key with no message at
		// all (Create would also write over a delete marker: a forged one
		// would make this cell think it claimed an entry readers judge
		// another's).
		n, err := kv.Update(ctx, Key(k), b, rev)
		switch {
		case err == nil:
			e.Revision = n
			return e, true, nil
		case !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			return Entry{}, false, unavailable(err)
		}
		cur, found, err := d.get(ctx, k)
		switch {
		case err != nil:
			return Entry{}, false, err
		case found:
			return cur, false, nil
		}
		rev = cur.Revision // nothing to rely on: write over it
	}
	return Entry{}, false, unavailable(errors.New("entry kept changing"))
}

// seal encodes e for key and signs it with this cell's certificate,
// publishing the certificate first if readers may not have it.
func (d *Directory) seal(ctx context.Context, kv jetstream.KeyValue, key string, e Entry) ([]byte, error) {
	payload, err := encodeEntry(key, e)
	if err != nil {
		return nil, err
	}
	if d.signer == nil {
		return Seal(payload, "", nil)
	}
	sc, err := d.signer.current()
	if err != nil {
		return nil, err
	}
	if err := d.publish(ctx, kv, sc); err != nil {
		return nil, err
	}
	sig, err := sc.sign(key, payload)
	if err != nil {
		return nil, fmt.Errorf("directory: sign: %w", err)
	}
	return Seal(payload, sc.id, sig)
}

// publish puts sc's chain in the bucket under this cell's certificate key
// unless this cell put it there within an eighth of the bucket's MaxAge.
// It is in the bucket's stream before any entry it signs, so a replica
// that holds the entry holds it; and it is kept there by every write, so
// it expires after an entry it signed only when its cell has written
// nothing for seven eighths of the window (a cell lost for days: an
// operator releases its entries first, gtrctl).
func (d *Directory) publish(ctx context.Context, kv jetstream.KeyValue, sc *signingCert) error {
	refresh := d.cfg.Limits.MaxAge / 8
	if at := sc.publishedAt.Load(); at != 0 && time.Since(time.Unix(0, at)) < refresh {
		return nil
	}
	b, err := encodeChain(sc.chain)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, certKey(d.cfg.CellID, sc.id), b); err != nil {
		return unavailable(fmt.Errorf("publishing the signing certificate: %w", err))
	}
	sc.publishedAt.Store(time.Now().UnixNano())
	return nil
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

// FinalizeAt is Finalize for the owner whose own claim is k's entry at
// revision rev: one write, on top of that revision, when nothing changed
// the entry since (a transaction's normal path); Finalize's read and
// write otherwise.
func (d *Directory) FinalizeAt(ctx context.Context, k idempotency.Key, rev uint64, owner string, fp idempotency.Fingerprint, fpKeyID string, answer *cellpayv1.Transaction) error {
	kv, err := d.bucket()
	if err != nil {
		return err
	}
	final := Entry{Owner: owner, Fingerprint: fp, FingerprintKeyID: fpKeyID, State: Final, Answer: answer}
	wctx, cancel := context.WithTimeout(ctx, d.cfg.OpTimeout)
	defer cancel()
	b, err := d.seal(wctx, kv, Key(k), final)
	if err != nil {
		return err
	}
	_, err = kv.Update(wctx, Key(k), b, rev)
	if err == nil || !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
		err = wrapUnavailable(err)
		d.health.observe(ctx, err)
		return err
	}
	return d.Finalize(ctx, k, owner, fp, fpKeyID, answer)
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
func (d *Directory) update(ctx context.Context, k idempotency.Key, next Entry, ok func(Entry) (bool, error)) (err error) {
	parent := ctx
	defer func() { d.health.observe(parent, err) }()
	kv, err := d.bucket()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*d.cfg.OpTimeout)
	defer cancel()
	for range 3 {
		cur, found, err := d.get(ctx, k)
		if err != nil {
			return err
		}
		e := next
		if found {
			write, err := ok(cur)
			if err != nil || !write {
				return err
			}
			if e.Owner == "" {
				e = cur
				e.State = Abandoned
			}
		} else if next.Owner == "" {
			return ErrNotOwner
		}
		b, err := d.seal(ctx, kv, Key(k), e)
		if err != nil {
			return err
		}
		_, err = kv.Update(ctx, Key(k), b, cur.Revision) // 0: only if the key has no message
		if err == nil || !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
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
	if _, err := d.bucket(); err != nil {
		return Entry{}, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.OpTimeout)
	defer cancel()
	return d.get(ctx, k)
}

// get reads every revision of k's entry and returns the entry they make
// by the rules (verify), and false when none may be relied on. Its
// Revision is the key's last, ignored ones included: a write goes on top
// of them.
func (d *Directory) get(ctx context.Context, k idempotency.Key) (Entry, bool, error) {
	kv, err := d.bucket()
	if err != nil {
		return Entry{}, false, err
	}
	st := *d.stream.Load()
	key := Key(k)
	subject := "$KV." + d.cfg.Bucket + "." + key
	var revs []revision
	for seq := uint64(1); ; {
		if len(revs) > 2*History {
			return Entry{}, false, unavailable(fmt.Errorf("entry %s has more than %d revisions", key, 2*History))
		}
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return Entry{}, false, unavailable(err)
		}
		op := m.Header.Get("KV-Operation")
		revs = append(revs, revision{seq: m.Sequence, marker: op == "DEL" || op == "PURGE", value: m.Data})
		seq = m.Sequence + 1
	}
	fetch := func(owner, id string) ([]byte, error) {
		v, err := kv.Get(ctx, certKey(owner, id))
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
			return nil, nil
		case err != nil:
			return nil, unavailable(err)
		}
		return v.Value(), nil
	}
	released := func(owner string) (uint64, error) { return d.released(ctx, kv, owner) }
	e, found, ignored, err := verify(key, revs, d.trust, fetch, released)
	if ignored > 0 {
		d.forged.Add(int64(ignored))
		d.cfg.Log.Warn("directory entry revisions ignored: not signed by their owner, or a change the rules do not allow", "key", key, "ignored", ignored)
	}
	return e, found, err
}

// ReleaseKey is the bucket key of the record declaring cell lost for good
// (gtrctl release): only the GTR's NATS user may write it (package
// natsauth). Its revision is the release's: the cell's entries written
// before it, not final, are released.
func ReleaseKey(cell string) string { return natsauth.DirectoryReleaseKey(cell) }

// releaseSeen is a release record as read: its revision (0: none), and
// when it was read.
type releaseSeen struct {
	rev uint64
	at  time.Time
}

// releaseFresh is how long a release record read stays cached: a release
// is kept for good, so only "none" needs reading again, and a release is
// seen within this of being written.
const releaseFresh = time.Second

// maxReleases bounds the cache: one per cell.
const maxReleases = 4096

// released returns the revision of cell's release record, 0 when it has
// none.
func (d *Directory) released(ctx context.Context, kv jetstream.KeyValue, cell string) (uint64, error) {
	d.releases.Lock()
	seen, ok := d.releases.m[cell]
	d.releases.Unlock()
	if ok && (seen.rev > 0 || time.Since(seen.at) < releaseFresh) {
		return seen.rev, nil
	}
	v, err := kv.Get(ctx, ReleaseKey(cell))
	var rev uint64
	switch {
	case err == nil:
		rev = v.Revision()
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
	default:
		return 0, unavailable(err)
	}
	d.releases.Lock()
	if d.releases.m == nil || len(d.releases.m) >= maxReleases {
		d.releases.m = map[string]releaseSeen{}
	}
	d.releases.m[cell] = releaseSeen{rev: rev, at: time.Now()}
	d.releases.Unlock()
	return rev, nil
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
