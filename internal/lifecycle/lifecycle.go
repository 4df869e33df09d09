// Package lifecycle is what a component with New, Start and Shutdown
// (nats-server's shape: the GTR, the cell) keeps of its own life: where it
// is (built, starting, serving, stopped), why serving ended, and what
// Start acquired, to be released in the reverse order, as the defers of
// one long function would. It decides nothing about the component's work
// and performs no I/O.
package lifecycle

import (
	"context"
	"sync"
)

// Life is a component's life: Begin, then Serving or Failed, then Stop.
// The zero value is a component just built. Its methods are safe for
// concurrent use.
type Life struct {
	mu    sync.Mutex
	phase phase
	err   error         // why serving ended; nil for a Shutdown
	done  chan struct{} // closed when serving ends; made on first use

	shutdown    sync.Once
	shutdownErr error
}

type phase uint8

const (
	built    phase = iota // New returned it
	starting              // Start is running
	serving               // Start returned nil
	stopped               // Start failed, or Shutdown was called
)

// Begin moves a component just built to starting, and reports whether it
// did: false when Start was called before, or after Shutdown.
func (l *Life) Begin() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.phase != built {
		return false
	}
	l.phase = starting
	return true
}

// Serving records that Start has returned nil.
func (l *Life) Serving() { l.set(serving) }

// Failed records that Start failed with err: stopped, and Done closed with
// Err err.
func (l *Life) Failed(err error) {
	l.set(stopped)
	l.End(err)
}

// Stop moves the component to stopped and reports whether it was serving:
// only then has Shutdown anything to stop.
func (l *Life) Stop() (wasServing bool) { return l.set(stopped) == serving }

func (l *Life) set(p phase) phase {
	l.mu.Lock()
	defer l.mu.Unlock()
	was := l.phase
	l.phase = p
	return was
}

// End records why serving ended (the first reason wins; nil for a
// Shutdown) and closes Done.
func (l *Life) End(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.doneLocked():
	default:
		l.err = err
		close(l.done)
	}
}

// Done is closed when the component no longer serves.
func (l *Life) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.doneLocked()
}

func (l *Life) doneLocked() chan struct{} {
	if l.done == nil {
		l.done = make(chan struct{})
	}
	return l.done
}

// Err is why serving ended: Start's error, or the serving's; nil while
// the component serves and after a Shutdown.
func (l *Life) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Shutdown runs stop once; later calls wait for the first and return what
// it returned.
func (l *Life) Shutdown(stop func() error) error {
	l.shutdown.Do(func() { l.shutdownErr = stop() })
	return l.shutdownErr
}

// Releases is what a Start acquired, in the order it did.
type Releases []func(context.Context)

// Add adds a release that needs no context.
func (r *Releases) Add(f func()) { *r = append(*r, func(context.Context) { f() }) }

// AddCtx adds a release bounded by the context Release is given.
func (r *Releases) AddCtx(f func(context.Context)) { *r = append(*r, f) }

// Release runs the releases, last added first, and forgets them.
func (r *Releases) Release(ctx context.Context) {
	for i := len(*r) - 1; i >= 0; i-- {
		(*r)[i](ctx)
	}
	*r = nil
}
