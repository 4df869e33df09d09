// Package logging gives every Cellpay process the same logger: JSON lines
// through a bounded asynchronous handler. A transaction must never wait for
// a log write, so when the buffer is full a record is dropped and counted
// instead of blocking the caller; the count is reported in the log itself
// once there is room again.
package logging

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
)

// Async is a slog.Handler that hands records to a goroutine which writes
// them to the wrapped handler. Its methods are safe for concurrent use.
type Async struct {
	inner slog.Handler
	q     *queue
}

type queue struct {
	// mu orders Handle's sends before Close's close of ch (read-locked
	// by senders, write-locked once by Close).
	mu      sync.RWMutex
	closed  bool
	ch      chan entry
	dropped atomic.Uint64
	done    chan struct{}
	once    sync.Once
}

type entry struct {
	h slog.Handler
	r slog.Record
}

// NewAsync wraps inner with a buffer of size records and starts the writer.
// Call Close to flush and stop it.
func NewAsync(inner slog.Handler, size int) *Async {
	q := &queue{ch: make(chan entry, size), done: make(chan struct{})}
	go q.run()
	return &Async{inner: inner, q: q}
}

// DefaultBuffer is New's buffer, in records.
const DefaultBuffer = 4096

// New returns a logger writing JSON lines to w through a DefaultBuffer-record
// async buffer, and the function that flushes it.
func New(w io.Writer) (*slog.Logger, func()) { return NewSize(w, DefaultBuffer) }

// NewSize is New with a buffer of size records (at least 1): a smaller
// one is a test and diagnostic knob, to see the logger saturate and drop.
func NewSize(w io.Writer, size int) (*slog.Logger, func()) {
	a := NewAsync(slog.NewJSONHandler(w, nil), max(size, 1))
	return slog.New(a), a.Close
}

func (q *queue) run() {
	defer close(q.done)
	for e := range q.ch {
		if n := q.dropped.Swap(0); n > 0 {
			r := slog.NewRecord(e.r.Time, slog.LevelWarn, "log records dropped: buffer full", 0)
			r.AddAttrs(slog.Uint64("dropped", n))
			_ = e.h.Handle(context.Background(), r)
		}
		_ = e.h.Handle(context.Background(), e.r)
	}
}

// Enabled reports whether the wrapped handler takes records at level.
func (a *Async) Enabled(ctx context.Context, level slog.Level) bool {
	return a.inner.Enabled(ctx, level)
}

// Handle queues r, or drops and counts it when the buffer is full. It never
// blocks.
func (a *Async) Handle(_ context.Context, r slog.Record) error {
	a.q.mu.RLock()
	defer a.q.mu.RUnlock()
	if a.q.closed {
		return nil
	}
	select {
	case a.q.ch <- entry{a.inner, r.Clone()}:
	default:
		a.q.dropped.Add(1)
	}
	return nil
}

// WithAttrs and WithGroup share the buffer and writer.
func (a *Async) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Async{inner: a.inner.WithAttrs(attrs), q: a.q}
}

// WithGroup returns a handler for a group; see WithAttrs.
func (a *Async) WithGroup(name string) slog.Handler {
	return &Async{inner: a.inner.WithGroup(name), q: a.q}
}

// Dropped is the number of records dropped and not yet reported.
func (a *Async) Dropped() uint64 { return a.q.dropped.Load() }

// Close writes what is queued and stops the writer. Records handled after
// Close are dropped. It is safe to call more than once.
func (a *Async) Close() {
	a.q.once.Do(func() {
		a.q.mu.Lock()
		a.q.closed = true
		close(a.q.ch)
		a.q.mu.Unlock()
		<-a.q.done
	})
}
