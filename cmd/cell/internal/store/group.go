package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Group commit: the durable writes of concurrent transactions (Insert
// and Reclaim of the received record, Persist of the sending record before
// the PNR and of every final state before its answer) share commits. A
// writer queues its one statement and waits; each of a few committers
// takes the first write queued and every other one queued behind it (up
// to MaxBatch), and sends them as one pgx batch: one round trip, one
// implicit transaction, one commit, so one WAL flush and one wait for the
// synchronous standby for all of them.
//
// Nothing waits to fill a batch: a committer sends what is queued the
// moment it is free, so a write alone goes out at once, and under load the
// writes that queue while the committers are busy commit together. The
// added wait is bounded by one commit in progress, which a write would
// have waited for anyway for a connection.
//
// Every invariant holds because no writer returns before its batch has
// committed (or failed): a record reported inserted or a state reported
// persisted is durable, and so is a final state before its answer. A batch
// commits whole or not at all, so a crash leaves each transaction in it
// either before its write or after it, as if the writes had been committed
// one by one. The batched statements never fail in the normal course
// (a key already recorded inserts nothing, a state that moved is 0 rows);
// when one does fail on the server, the batch is rolled back whole and
// each of its writes is run again alone, so that one bad write cannot fail
// the others. (Two batches holding one key's insert each, in opposite
// orders, meet in Postgres's deadlock detection, which fails one of them:
// the same path.) A connection lost mid-batch leaves the batch's outcome
// unknown, which each writer is told, as it would be of its own statement.
//
// Two races in the window between a transaction's directory claim and its
// record's write, which queueing widens, were found by the model
// (internal/dev/model, Rules.AsyncInsert) and fixed in the orchestrator's
// machine before the insert joined the batches: the record, not the
// claim, decides which attempt in a cell restarts an abandoned
// transaction, and a claimed entry's payload is compared.
//
// The fault test that kills one instance of a cell under load
// (TestCellInstances) found, with group commit on, a transaction past its
// point of no return in two cells: the instance died after its batch
// committed a sending record and before the PNR reached the GTR, the GTR
// re-routed (its attempt had no Proceed, so another cell may take the
// entry over), and the cell's reconciler later adopted the issuer's
// outcome of the other cell's attempt for the orphaned sending record. The
// window is there without batching (a commit, then the PNR's send), but a
// batch puts many transactions in it at once. The reconciler adopts an
// issuer outcome only while the directory entry is the cell's, and
// abandons the record when another cell holds it (reconcile.resolve).

// GroupCommit configures group commit; zero values take the defaults in
// brackets.
type GroupCommit struct {
	// Committers is how many batches may be in flight at once, each on a
	// connection of the pool [2].
	Committers int
	// MaxBatch bounds the writes of one batch [64].
	MaxBatch int
	// Queue bounds the writes waiting for a committer [4096]; a writer
	// finding it full waits, up to its context's end.
	Queue int
	// BatchTimeout bounds one batch's round trip and commit [10s]; every
	// statement is also bounded by statement_timeout.
	BatchTimeout time.Duration
}

// write is one queued statement and where its outcome goes.
type write struct {
	ctx  context.Context
	sql  string
	args []any
	// count: the statement returns one row of one integer (a CTE's
	// count), scanned into n; otherwise n is the rows affected.
	count bool
	done  chan writeResult
}

type writeResult struct {
	n   int64
	err error
}

// committer runs group commit for one store.
type committer struct {
	cfg   GroupCommit
	exec  func(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	queue chan *write
	stop  chan struct{}
	wg    sync.WaitGroup
	// mu makes closing and queueing exclusive: once closed, nothing is
	// queued that no committer would take.
	mu     sync.RWMutex
	closed bool

	batches, writes atomic.Int64 // for GroupCommitStats
}

func newCommitter(cfg GroupCommit, exec func(ctx context.Context, b *pgx.Batch) pgx.BatchResults) *committer {
	if cfg.Committers <= 0 {
		cfg.Committers = 2
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 64
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 4096
	}
	if cfg.BatchTimeout <= 0 {
		cfg.BatchTimeout = 10 * time.Second
	}
	c := &committer{cfg: cfg, exec: exec, queue: make(chan *write, cfg.Queue), stop: make(chan struct{})}
	for range cfg.Committers {
		c.wg.Go(c.run)
	}
	return c
}

// close stops the committers once the queue is drained of what they had
// taken; writes still queued are answered with an error.
func (c *committer) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	c.wg.Wait()
	for {
		select {
		case w := <-c.queue:
			w.done <- writeResult{err: errors.New("store: closed")}
		default:
			return
		}
	}
}

// do queues one write and waits for its outcome. Once queued, it waits for
// the outcome even past ctx's end (a batch is bounded by BatchTimeout):
// a writer must not be told "failed" of a write that then commits.
func (c *committer) do(ctx context.Context, count bool, sql string, args ...any) (int64, error) {
	w := &write{ctx: ctx, sql: sql, args: args, count: count, done: make(chan writeResult, 1)}
	if err := c.enqueue(ctx, w); err != nil {
		return 0, err
	}
	r := <-w.done
	return r.n, r.err
}

// enqueue queues w, waiting for room up to ctx's end. The committers run
// until close, which waits for this, so a queued write is always taken.
func (c *committer) enqueue(ctx context.Context, w *write) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return errors.New("store: closed")
	}
	select {
	case c.queue <- w:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *committer) run() {
	batch := make([]*write, 0, c.cfg.MaxBatch)
	for {
		var first *write
		select {
		case first = <-c.queue:
		case <-c.stop:
			return
		}
		batch = append(batch[:0], first)
	fill:
		for len(batch) < c.cfg.MaxBatch {
			select {
			case w := <-c.queue:
				batch = append(batch, w)
			default:
				break fill
			}
		}
		c.commit(batch)
		clear(batch)
	}
}

// commit sends the live writes of batch as one batch and answers each.
func (c *committer) commit(batch []*write) {
	live := batch[:0:0]
	for _, w := range batch {
		if err := w.ctx.Err(); err != nil {
			w.done <- writeResult{err: err} // gave up while queued: never sent
			continue
		}
		live = append(live, w)
	}
	if len(live) == 0 {
		return
	}
	results, err := c.send(live)
	var pgErr *pgconn.PgError
	if err != nil && len(live) > 1 && errors.As(err, &pgErr) {
		// The server refused a statement, so the implicit transaction was
		// rolled back whole: nothing of it committed, and each write is run
		// again alone for its own outcome.
		for _, w := range live {
			r, err := c.send([]*write{w})
			if err != nil {
				w.done <- writeResult{err: err}
				continue
			}
			w.done <- r[0]
		}
		return
	}
	c.batches.Add(1)
	c.writes.Add(int64(len(live)))
	for i, w := range live {
		if err != nil {
			w.done <- writeResult{err: err}
			continue
		}
		w.done <- results[i]
	}
}

// send runs writes as one batch, so one implicit transaction: all of it
// commits or none of it.
func (c *committer) send(writes []*write) ([]writeResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.BatchTimeout)
	defer cancel()
	b := &pgx.Batch{}
	for _, w := range writes {
		b.Queue(w.sql, w.args...)
	}
	br := c.exec(ctx, b)
	out := make([]writeResult, len(writes))
	var firstErr error
	for i, w := range writes {
		if w.count {
			err := br.QueryRow().Scan(&out[i].n)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			continue
		}
		tag, err := br.Exec()
		if err != nil && firstErr == nil {
			firstErr = err
		}
		out[i].n = tag.RowsAffected()
	}
	if err := br.Close(); err != nil && firstErr == nil {
		firstErr = err
	}
	if firstErr != nil {
		return nil, fmt.Errorf("group commit of %d writes: %w", len(writes), firstErr)
	}
	return out, nil
}

// GroupCommitStats counts the batches committed and the writes in them.
type GroupCommitStats struct{ Batches, Writes int64 }

// GroupCommitStats returns the counts so far (zero without group commit).
func (s *Store) GroupCommitStats() GroupCommitStats {
	if s.group == nil {
		return GroupCommitStats{}
	}
	return GroupCommitStats{Batches: s.group.batches.Load(), Writes: s.group.writes.Load()}
}

// EnableGroupCommit makes Persist share commits with concurrent writes (see GroupCommit). Call it once, before the store is
// used; Close stops it.
func (s *Store) EnableGroupCommit(cfg GroupCommit) {
	s.group = newCommitter(cfg, s.pool.SendBatch)
}

// exec runs one durable write: through group commit when enabled, else
// alone. count says the statement returns one integer rather than rows
// affected.
func (s *Store) exec(ctx context.Context, count bool, sql string, args ...any) (int64, error) {
	n, err := s.execOnce(ctx, count, sql, args...)
	if err == nil {
		s.committed.Store(time.Now().UnixNano())
	}
	return n, err
}

func (s *Store) execOnce(ctx context.Context, count bool, sql string, args ...any) (int64, error) {
	if s.group != nil {
		return s.group.do(ctx, count, sql, args...)
	}
	if count {
		var n int64
		err := s.pool.QueryRow(ctx, sql, args...).Scan(&n)
		return n, err
	}
	tag, err := s.pool.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

// Committed is when a durable write (exec) last succeeded, or the zero
// time: evidence that the database is up when its health check is slow.
func (s *Store) Committed() time.Time {
	if n := s.committed.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}
