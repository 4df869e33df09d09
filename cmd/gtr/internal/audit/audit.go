// Package audit is the GTR admin API's audit log: one record per admin
// call that changes something (and per refused call), with who made it,
// when, the request, and the state before and after. Records go to a
// JetStream stream (CELLPAY_AUDIT, subject cellpay.audit.<replica>) shared
// by every replica, published synchronously (the call answers only once
// the stream has acknowledged its record) and deduplicated by record ID.
//
// It never drops a record. A change first reserves room in a bounded local
// spool file (Reserve); only then is it applied, and its record is
// published; when the stream does not acknowledge in time, the record is
// appended to the spool (fsync'd) and moved to the stream by a background
// loop once it is back. When the spool has no room left, Reserve refuses
// (ErrUnavailable) and the change is never applied. Without NATS the file
// is the log itself, unbounded.
//
// It must never write records through the process logger, which drops
// when full: its own logger is only for its own troubles, and never
// carries a record.
package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"crypto/rand"
	"encoding/hex"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/internal/jsconf"
	"github.com/cellpay/cellpay/internal/natsauth"
	"github.com/cellpay/cellpay/internal/natsconn"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// Record is one audited call.
type Record struct {
	ID      string    `json:"id"`
	Time    time.Time `json:"time"`
	Replica string    `json:"replica"`
	Actor   string    `json:"actor"`
	Role    string    `json:"role"`
	Method  string    `json:"method"`
	// Request, Before and After are JSON; null when there is none.
	Request json.RawMessage `json:"request,omitempty"`
	Before  json.RawMessage `json:"before,omitempty"`
	After   json.RawMessage `json:"after,omitempty"`
	// Outcome is "OK" or the gRPC code name the call ended with.
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
}

// ErrUnavailable: the audit log cannot promise to keep a record now (the
// spool is full, or no audit log is configured). Nothing was written.
var ErrUnavailable = errors.New("audit: log unavailable")

// Defaults.
const (
	DefaultStream   = natsauth.AuditStream
	SubjectPrefix   = natsauth.AuditSubjectPrefix
	defaultMaxSpool = 10000
)

// Config configures a Log.
type Config struct {
	// NATSURL is where the stream lives; "" keeps the log in File only.
	NATSURL string
	// NATSTLS is the component's certificate as its NATS identity; zero
	// for plaintext NATS without authentication (tests, benchmarks).
	NATSTLS tlsconf.Files
	// Stream names the stream; default CELLPAY_AUDIT. StreamReplicas is
	// its replica count in a NATS cluster; default 1.
	Stream         string
	StreamReplicas int
	// Drift, if set, records whether the stream found differs from
	// AuditStreamConfig (package jsconf).
	Drift *jsconf.Drift
	// Replica names this GTR replica: the subject's last token.
	Replica string
	// File is the spool (with NATS) or the log (without). Without both
	// NATSURL and File every Reserve fails: a GTR that cannot audit does
	// not change anything.
	File string
	// MaxSpool bounds the spool, in records, with NATS; default 10000.
	MaxSpool int
	// Timeout bounds waiting for the stream's acknowledgement; default 2s.
	Timeout time.Duration
	// RetryInterval is how often the spool is moved to the stream; default 1s.
	RetryInterval time.Duration
	Log           *slog.Logger
}

func (c *Config) validate() error {
	if c.Replica == "" {
		return errors.New("audit: Replica is required")
	}
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.StreamReplicas <= 0 {
		c.StreamReplicas = 1
	}
	if c.MaxSpool <= 0 {
		c.MaxSpool = defaultMaxSpool
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Second
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = time.Second
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// subjectToken makes a replica ID a NATS subject token (a host name has
// dots).
func subjectToken(s string) string {
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r == '.' || r == '*' || r == '>' {
			return '_'
		}
		return r
	}, s)
}

// Log is the audit log of one replica. Its methods are safe for
// concurrent use.
type Log struct {
	cfg  Config
	nc   *nats.Conn
	js   jetstream.JetStream
	stop context.CancelFunc
	done chan struct{}

	// mu guards the fields below and the spool file. It is held across
	// file writes (fsync included) but never across a publish from Commit.
	mu       sync.Mutex
	reserved int
	spooled  int  // records in the spool file (NATS mode)
	stream   bool // the stream has been made
}

// Open opens the log. With NATS it connects in the background (a NATS
// that is down at start only sends records to the spool), and reads the
// spool a previous run left.
func Open(cfg Config) (*Log, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l := &Log{cfg: cfg, done: make(chan struct{})}
	if cfg.File != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.File), 0o700); err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		f, err := os.OpenFile(cfg.File, os.O_CREATE|os.O_RDONLY, 0o600)
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		f.Close()
		if cfg.NATSURL != "" {
			recs, err := readFile(cfg.File)
			if err != nil {
				return nil, err
			}
			l.spooled = len(recs)
		}
	}
	if cfg.NATSURL == "" {
		close(l.done)
		return l, nil
	}
	nc, err := natsconn.Connect(cfg.NATSURL, "gtr audit "+cfg.Replica, cfg.NATSTLS)
	if err != nil {
		return nil, fmt.Errorf("audit: nats: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("audit: jetstream: %w", err)
	}
	l.nc, l.js = nc, js
	ctx, stop := context.WithCancel(context.Background())
	l.stop = stop
	go l.retry(ctx)
	return l, nil
}

// Close stops the spool loop and the connection. Records already
// committed are in the stream or the spool.
func (l *Log) Close() {
	if l.stop != nil {
		l.stop()
	}
	<-l.done
	if l.nc != nil {
		l.nc.Close()
	}
}

// Reservation is room for one record, held from before a change until its
// record is committed. Commit or Release it exactly once.
type Reservation struct {
	l    *Log
	once sync.Once
}

// Reserve makes room for one record, or returns ErrUnavailable when the
// log cannot promise to keep it: the change must then not be made.
func (l *Log) Reserve() (*Reservation, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.cfg.File == "":
		return nil, fmt.Errorf("%w: no audit log configured (neither NATS nor a spool file)", ErrUnavailable)
	case l.js != nil && l.spooled+l.reserved >= l.cfg.MaxSpool:
		return nil, fmt.Errorf("%w: the audit stream is unreachable and the local spool is full (%d records)", ErrUnavailable, l.spooled)
	}
	l.reserved++
	return &Reservation{l: l}, nil
}

// Release gives the room back without a record.
func (r *Reservation) Release() {
	r.once.Do(func() {
		r.l.mu.Lock()
		r.l.reserved--
		r.l.mu.Unlock()
	})
}

// Commit writes rec (filling in ID, Time and Replica when empty): to the
// stream, acknowledged, or else to the spool, synced. An error means
// neither took it (the disk failed); the caller reports it.
func (r *Reservation) Commit(ctx context.Context, rec Record) error {
	defer r.Release()
	return r.l.write(ctx, rec)
}

// Write writes rec without a reservation, for records of calls that
// changed nothing (refused ones): with a full spool it fails.
func (l *Log) Write(ctx context.Context, rec Record) error {
	res, err := l.Reserve()
	if err != nil {
		return err
	}
	return res.Commit(ctx, rec)
}

func (l *Log) write(ctx context.Context, rec Record) error {
	if rec.ID == "" {
		rec.ID = newID()
	}
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	rec.Time = rec.Time.UTC()
	if rec.Replica == "" {
		rec.Replica = l.cfg.Replica
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if l.js != nil {
		perr := l.publish(ctx, rec.ID, b)
		if perr == nil {
			return nil
		}
		l.cfg.Log.Warn("audit: stream unreachable, record kept in the spool", "err", perr, "spool", l.cfg.File)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := appendLine(l.cfg.File, b); err != nil {
		return err
	}
	if l.js != nil {
		l.spooled++
	}
	return nil
}

func (l *Log) publish(ctx context.Context, id string, b []byte) error {
	// The caller's context may be nearly done; the record still deserves
	// the full timeout (it is bounded either way).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.Timeout)
	defer cancel()
	if err := l.ensureStream(ctx); err != nil {
		return err
	}
	_, err := l.js.Publish(ctx, SubjectPrefix+subjectToken(l.cfg.Replica), b, jetstream.WithMsgID(id))
	return err
}

func (l *Log) ensureStream(ctx context.Context) error {
	l.mu.Lock()
	made := l.stream
	l.mu.Unlock()
	if made {
		return nil
	}
	// Create only, never update: the GTR's NATS user may not update the
	// stream (natsauth.AuditStreamConfig). An existing stream, made by
	// the platform's NATS administrator or another replica, is used as
	// it is, whatever its configuration (package jsconf).
	sc := natsauth.AuditStreamConfig(l.cfg.StreamReplicas)
	sc.Name = l.cfg.Stream
	_, differs, err := jsconf.OpenStream(ctx, l.js, sc, jsconf.Limits{Replicas: sc.Replicas, MaxAge: sc.MaxAge, MaxBytes: sc.MaxBytes})
	if err != nil {
		return fmt.Errorf("audit: stream %s: %w", l.cfg.Stream, err)
	}
	if l.cfg.Drift != nil {
		l.cfg.Drift.Set(l.cfg.Stream, differs)
	}
	if len(differs) > 0 {
		l.cfg.Log.Warn("audit: the stream's limits differ from this GTR's; used as they are", "stream", l.cfg.Stream, "differences", differs)
	}
	l.mu.Lock()
	l.stream = true
	l.mu.Unlock()
	return nil
}

// retry moves the spool to the stream whenever it is not empty.
func (l *Log) retry(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.cfg.RetryInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := l.drain(ctx); err != nil {
			l.cfg.Log.Warn("audit: spool not moved to the stream yet", "err", err)
		}
	}
}

// drain publishes the spooled records, oldest first, and keeps in the file
// those not acknowledged. A record published twice (a crash between the
// acknowledgement and the rewrite) is deduplicated by its ID.
func (l *Log) drain(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.spooled == 0 || l.cfg.File == "" {
		return nil
	}
	lines, err := readLines(l.cfg.File)
	if err != nil {
		return err
	}
	sent := 0
	var perr error
	for _, line := range lines {
		var rec Record
		if err := json.Unmarshal(line, &rec); err != nil {
			sent++ // a torn last line of a crash: it was never committed
			continue
		}
		l.mu.Unlock()
		perr = l.publish(ctx, rec.ID, line)
		l.mu.Lock()
		if perr != nil {
			break
		}
		sent++
	}
	// Records appended while publishing stay after the unsent ones.
	all, err := readLines(l.cfg.File)
	if err != nil {
		return err
	}
	if err := rewrite(l.cfg.File, all[sent:]); err != nil {
		return err
	}
	l.spooled = len(all) - sent
	return perr
}

// Pending is how many records wait in the spool for the stream.
func (l *Log) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.spooled
}

// List returns the newest limit records at or after since (zero: all),
// oldest first: the stream's, and the spool's not yet in it.
func (l *Log) List(ctx context.Context, since time.Time, limit int) ([]Record, error) {
	if limit <= 0 {
		return nil, nil
	}
	var recs []Record
	if l.js != nil {
		var err error
		if recs, err = l.listStream(ctx, since, limit); err != nil {
			return nil, err
		}
	}
	if l.cfg.File != "" {
		l.mu.Lock()
		local, err := readFile(l.cfg.File)
		l.mu.Unlock()
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for _, r := range recs {
			seen[r.ID] = true
		}
		for _, r := range local {
			if !seen[r.ID] && !r.Time.Before(since) {
				recs = append(recs, r)
			}
		}
	}
	slices.SortStableFunc(recs, func(a, b Record) int { return a.Time.Compare(b.Time) })
	if len(recs) > limit {
		recs = recs[len(recs)-limit:]
	}
	return recs, nil
}

func (l *Log) listStream(ctx context.Context, since time.Time, limit int) ([]Record, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := l.js.Stream(ctx, l.cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s: %w", ErrUnavailable, l.cfg.Stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s: %w", ErrUnavailable, l.cfg.Stream, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil, nil
	}
	occ := jetstream.OrderedConsumerConfig{InactiveThreshold: 10 * time.Second}
	if since.IsZero() {
		// Without a time, only the tail is wanted.
		start := info.State.FirstSeq
		if last >= uint64(limit) && last-uint64(limit)+1 > start {
			start = last - uint64(limit) + 1
		}
		occ.DeliverPolicy, occ.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
	} else {
		occ.DeliverPolicy, occ.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := st.OrderedConsumer(ctx, occ)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var recs []Record
	for {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		n, done := 0, false
		for m := range batch.Messages() {
			n++
			var r Record
			if json.Unmarshal(m.Data(), &r) == nil {
				recs = append(recs, r)
				if len(recs) > limit {
					recs = recs[1:]
				}
			}
			if md, err := m.Metadata(); err == nil && md.Sequence.Stream >= last {
				done = true
			}
		}
		if batch.Error() != nil && !errors.Is(batch.Error(), nats.ErrTimeout) {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, batch.Error())
		}
		if done || n == 0 {
			return recs, nil
		}
	}
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

func appendLine(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	_, err = f.Write(append(slices.Clip(b), '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("audit: %s: %w", path, err)
	}
	return nil
}

func readLines(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) > 0 {
			lines = append(lines, slices.Clone(sc.Bytes()))
		}
	}
	return lines, sc.Err()
}

func readFile(path string) ([]Record, error) {
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	recs := make([]Record, 0, len(lines))
	for _, line := range lines {
		var r Record
		if json.Unmarshal(line, &r) == nil {
			recs = append(recs, r)
		}
	}
	return recs, nil
}

// rewrite replaces path with lines, atomically and synced.
func rewrite(path string, lines [][]byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".audit-*")
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriter(tmp)
	for _, line := range lines {
		w.Write(line)
		w.WriteByte('\n')
	}
	err = w.Flush()
	if err == nil {
		err = tmp.Chmod(0o600)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("audit: %s: %w", path, err)
	}
	return nil
}
