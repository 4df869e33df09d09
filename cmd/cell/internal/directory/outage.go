package directory

import (
	"context"
	"errors"
	"sync"
	"time"
)

// OutageAfter is how long every directory operation must have failed,
// as this cell saw them, before the directory counts as unavailable: two
// operations' bounds.
const OutageAfter = time.Second

// outage tells a directory outage from a slow operation. A transaction's
// natural home decides without a claim only in an outage
// (docs/design/transaction-directory.md): one claim that outlasted its
// bound, in a burst of load or as a process resumes from a pause, says
// nothing of whether another cell has claimed the transaction since.
//
// It watches writes only (claims, takeovers, final and abandoned
// entries): a full bucket answers reads and refuses every claim, which is
// an outage for claims as much as NATS down is.
//
// It counts from the first failure seen after the last success, at the
// time it was seen: an operation that started before a pause and failed
// after it does not date the outage back to before the pause. The NATS
// connection's loss counts as a failure seen, and its return as an
// answer, so that a cell that starts, or stays idle, while NATS is down
// is in an outage a second later without having failed a claim first.
type outage struct {
	after time.Duration
	now   func() time.Time
	mu    sync.Mutex
	since time.Time // zero: the last operation seen succeeded
}

// observe records an operation's result. A failure of the caller's own
// context (the caller left) says nothing of the directory.
func (o *outage) observe(ctx context.Context, err error) {
	switch {
	case err == nil, errors.Is(err, ErrNotOwner):
		o.mu.Lock()
		o.since = time.Time{}
		o.mu.Unlock()
	case ctx.Err() != nil:
	default:
		now := o.now()
		o.mu.Lock()
		if o.since.IsZero() {
			o.since = now
		}
		o.mu.Unlock()
	}
}

// down reports whether every operation seen for at least after failed.
func (o *outage) down() bool {
	now := o.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.since.IsZero() && now.Sub(o.since) >= o.after
}

// Outage reports whether the directory is unavailable to this cell: every
// operation it saw for at least OutageAfter failed. One
// failed operation is not an outage.
func (d *Directory) Outage() bool { return d.health.down() }

// Usable reports whether the cell can decide with the directory as it
// is: the bucket has been open (claims are asked; in a later outage,
// natural homes decide alone), or it has never opened and has been
// unavailable for OutageAfter (natural homes decide alone). A cell whose
// directory is still opening is neither: a claim there fails and its
// transaction is re-routed, so the cell is better not ready.
func (d *Directory) Usable() bool {
	select {
	case <-d.opened:
		return true
	default:
		return d.Outage()
	}
}

// Opened is closed once the bucket is open.
func (d *Directory) Opened() <-chan struct{} { return d.opened }
