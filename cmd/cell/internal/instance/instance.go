// Package instance keeps one process of a cell in step with its siblings,
// the other instances that share the cell's Postgres
// (docs/design/cell-instances.md): it renews the instance's lease, which
// is what makes its in-flight rows its own, and it elects the one instance
// that runs the cell's reconciler. It never decides a transaction.
package instance

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/cellpay/cellpay/cmd/cell/internal/store"
)

// Lease timing: an instance renews every RenewEvery a lease of LeaseTTL,
// so that it survives a few missed renewals (a slow database) and a dead
// instance's rows are free within LeaseTTL.
const (
	LeaseTTL   = 10 * time.Second
	RenewEvery = 2 * time.Second
)

var seq atomic.Int64

// DefaultID names an instance when none is given: "<hostname>-<pid>",
// with "-<n>" for the n-th (n > 1) asked for in one process, so that it is
// unique per process and per cell in one process (tests). In Kubernetes
// the hostname is the pod's name and the pid is 1: a restarted container
// keeps its name, and abandons its own leftovers at start.
func DefaultID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "cell"
	}
	id := fmt.Sprintf("%s-%d", h, os.Getpid())
	if n := seq.Add(1); n > 1 {
		id = fmt.Sprintf("%s-%d", id, n)
	}
	return id
}

// Leaser is the store's lease; *store.Store implements it.
type Leaser interface {
	// RenewLease makes the instance's lease run ttl from now (the
	// database's clock) and records the reference data version it serves.
	RenewLease(ctx context.Context, ttl time.Duration, refdataVersion *uint64) error
	// DropLease ends the lease at once.
	DropLease(ctx context.Context) error
}

// KeepLease renews st's lease every every (ttl long), with the version
// served reports, until ctx ends; then it drops the lease, so that
// siblings need not wait for it to run out. Call it only once the
// instance's attempts are over, or with a ctx that ends then.
func KeepLease(ctx context.Context, st Leaser, ttl, every time.Duration, served func() *uint64, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			if err := st.DropLease(dctx); err != nil {
				log.Warn("instance: lease not dropped; it runs out", "error", err)
			}
			cancel()
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		if err := st.RenewLease(rctx, ttl, served()); err != nil && ctx.Err() == nil {
			log.Warn("instance: lease not renewed", "error", err)
		}
		cancel()
	}
}

// Locker opens sessions for the cell's reconciler lock; *store.Store
// implements it.
type Locker interface {
	LockSession(ctx context.Context) (*store.LockSession, error)
}

// Lead runs run while this instance holds the cell's reconciler lock
// (store.ReconcilerLock), until ctx ends. On a session of its own, it
// tries to take the lock every every, checks that it still holds it every
// every, and stops run (and waits for it) as soon as it does not. A holder
// that stops or dies releases the lock with its session, and a sibling
// takes over within every; one that vanishes without closing it, within
// Postgres's keepalive bound (store.LockSession). Two reconcilers may
// overlap for up to every: harmless, as each of their writes is
// conditional on the state it read, and an inquiry changes nothing at the
// issuer.
func Lead(ctx context.Context, st Locker, every time.Duration, run func(ctx context.Context), log *slog.Logger) {
	var sess *store.LockSession
	defer func() {
		if sess != nil {
			sess.Close(context.WithoutCancel(ctx))
		}
	}()
	for ctx.Err() == nil {
		tctx, cancel := context.WithTimeout(ctx, every)
		var err error
		if sess == nil {
			sess, err = st.LockSession(tctx)
		}
		held := false
		if err == nil {
			if held, err = sess.TryLock(tctx, store.ReconcilerLock); err != nil {
				sess.Close(context.WithoutCancel(ctx))
				sess = nil
			}
		}
		cancel()
		if err != nil && ctx.Err() == nil {
			log.Warn("instance: reconciler lock unavailable", "error", err)
		}
		if held {
			log.Info("instance: this instance runs the cell's reconciler")
			hold(ctx, sess, every, run)
			sess.Close(context.WithoutCancel(ctx)) // releases the lock
			sess = nil
			if ctx.Err() == nil {
				log.Warn("instance: reconciler lock lost")
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
}

// hold runs run until ctx ends or sess is lost.
func hold(ctx context.Context, sess *store.LockSession, every time.Duration, run func(ctx context.Context)) {
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); run(rctx) }()
	defer func() { stop(); <-done }()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, every)
		err := sess.Check(cctx)
		cancel()
		if err != nil {
			return
		}
	}
}
