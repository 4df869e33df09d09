// Package reconcile resolves a cell's transactions that passed their point
// of no return without a known outcome (state sending: the issuer timed out,
// or the cell crashed after recording the send). It asks the issuer by
// partner and transaction ID (the issuer's key for a transaction) and
// records what the issuer says. It never resends an
// authorization: a resend could charge twice; an inquiry cannot.
//
// An inquiry that finds nothing does not mean the issuer will never apply
// the transaction: gRPC deadlines are relative, so an Authorize held up on
// the way (in a stalled connection's send buffer) can still reach the
// issuer with its whole budget, after any wait. So once the record is
// older than NotFoundAfter, the inquiry asks the issuer to close the
// transaction (InquireRequest.close): the issuer either returns an outcome
// it already applied, recorded as any outcome, or closes the transaction
// so that no later Authorize of it is ever applied, and only then is it
// recorded FAILED with reason "issuer_not_reached" — and only once the
// transaction directory says so too (see Directory): a FAILED recorded
// here is final everywhere, and at the issuer. The FAILED rests on the
// close, not on the wait: NotFoundAfter is a courtesy, time for a slow
// send to land and complete normally rather than be refused. Before it,
// the inquiry does not close, and finding nothing waits for the next
// round. An issuer that answers an inquiry that closes with NOT_FOUND has
// not closed anything: the record stays unresolved.
package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// ReasonNotReached is the decline reason of a transaction the issuer never
// received.
const ReasonNotReached = "issuer_not_reached"

// Store is what the reconciler needs of the cell's database.
type Store interface {
	// Unresolved returns up to limit records in state sending or
	// deciding last updated before the given time, oldest first.
	Unresolved(ctx context.Context, before time.Time, limit int) ([]*cellside.Record, error)
	// Persist writes r's outcome if the stored state is still from.
	Persist(ctx context.Context, r *cellside.Record, from cellside.State) error
	// Unfiled returns up to limit final records decided without a
	// directory entry (Record.Unfiled), oldest first; MarkFiled clears
	// k's mark.
	Unfiled(ctx context.Context, limit int) ([]*cellside.Record, error)
	MarkFiled(ctx context.Context, k idempotency.Key) error
}

// Issuer answers inquiries; issuerproto.IssuerClient implements it.
type Issuer interface {
	// Inquire returns the recorded outcome, or closed=true for a
	// transaction an inquiry closed, or NOT_FOUND. With in.Close, a
	// transaction without an outcome is closed (no later Authorize of it
	// is ever applied) and answered closed=true.
	Inquire(ctx context.Context, in *issuerproto.InquireRequest, opts ...grpc.CallOption) (*issuerproto.AuthorizeResponse, error)
}

// Directory is the transaction directory (docs/design/transaction-directory.md);
// *directory.Directory implements it.
type Directory interface {
	// Finalize records owner's answer for k. It fails with an error
	// matching ErrNotOwner when another cell owns k's entry.
	Finalize(ctx context.Context, k idempotency.Key, owner string, fp idempotency.Fingerprint, fpKeyID string, answer *cellpayv1.Transaction) error
	// Get returns k's entry, and false when it has none.
	Get(ctx context.Context, k idempotency.Key) (cellside.Entry, bool, error)
}

// Config configures a Reconciler.
type Config struct {
	Store  Store
	Issuer Issuer
	// Busy reports whether an attempt is still working on transaction k;
	// such records are left alone. Optional: the cell leaves it unset, as
	// its store's Unresolved already leaves out the records an attempt
	// works on in any of the cell's instances (the durable owner and its
	// lease, docs/design/cell-instances.md), which no process's memory can
	// tell.
	Busy func(k idempotency.Key) bool
	// Directory, CellID and ErrNotOwner: the transaction directory this
	// cell claims transactions in. Optional: without it an outcome is
	// recorded from the inquiry alone. With it, every outcome (the
	// issuer's, or FAILED issuer_not_reached) is recorded only after the
	// directory took it, so that no other cell decides the transaction
	// otherwise later; a record whose entry another cell owns is marked
	// abandoned, whatever the inquiry found (that cell took it over, which
	// the directory's rules allow only from an attempt that never had the
	// GTR's Proceed, so nothing of this record reached the issuer, and an
	// effect the issuer reports is the other cell's).
	Directory   Directory
	CellID      string
	ErrNotOwner error
	// OnFiled, if set, counts each entry File wrote ("filed") or found
	// another cell's ("conflict").
	OnFiled func(result string)
	// Interval between rounds [2s]; MinAge: records younger than this are
	// left to their attempt [1s]; Batch per round [500]. NotFoundAfter
	// [20s]: from this age on, the inquiry closes a transaction the issuer
	// has no outcome for. Safety does not rest on it (a closed transaction
	// is never applied, however late its Authorize arrives); it is meant
	// to exceed the longest an issuer call normally takes to arrive after
	// the record was written (the GTR's attempts before it, 3 × 2 s, plus
	// the cell's issuer timeout, 5 s, with room to spare), so that a slow
	// send lands and completes normally instead of being refused.
	Interval, MinAge, NotFoundAfter time.Duration
	Batch                           int
	InquiryTimeout                  time.Duration // [2s]
	Now                             func() time.Time
	Log                             *slog.Logger
}

func (c *Config) validate() error {
	if c.Store == nil || c.Issuer == nil {
		return errors.New("reconcile: Store and Issuer are required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Interval, 2*time.Second)
	def(&c.MinAge, time.Second)
	def(&c.NotFoundAfter, 20*time.Second)
	def(&c.InquiryTimeout, 2*time.Second)
	if c.Batch <= 0 {
		c.Batch = 500
	}
	if c.Busy == nil {
		c.Busy = func(idempotency.Key) bool { return false }
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// Reconciler resolves unknown outcomes.
type Reconciler struct{ cfg Config }

// New returns a Reconciler.
func New(cfg Config) (*Reconciler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Reconciler{cfg: cfg}, nil
}

// Run reconciles at once, then every Interval, until ctx ends.
func (r *Reconciler) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		if n, err := r.Once(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Log.Warn("reconcile: round failed", "error", err)
		} else if n > 0 {
			r.cfg.Log.Info("reconcile: resolved pending transactions", "count", n)
		}
		r.fileAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once runs one round and returns how many transactions it resolved.
func (r *Reconciler) Once(ctx context.Context) (int, error) {
	now := r.cfg.Now()
	recs, err := r.cfg.Store.Unresolved(ctx, now.Add(-r.cfg.MinAge), r.cfg.Batch)
	if err != nil {
		return 0, err
	}
	resolved := 0
	for _, rec := range recs {
		if r.cfg.Busy(rec.Key()) {
			continue
		}
		resolve := r.resolve
		if rec.State == cellside.StateDeciding {
			resolve = r.settle
		}
		ok, err := resolve(ctx, rec, now)
		if err != nil {
			if ctx.Err() != nil {
				return resolved, ctx.Err()
			}
			r.cfg.Log.Warn("reconcile: transaction still unknown", "partner_id", rec.PartnerID, "transaction_id", rec.TransactionID, "error", err)
			continue
		}
		if ok {
			resolved++
		}
	}
	return resolved, nil
}

// fileAll files batches of entries until one is short (the backlog
// filed) or fails.
func (r *Reconciler) fileAll(ctx context.Context) {
	filed, conflicts := 0, 0
	for ctx.Err() == nil {
		n, c, err := r.File(ctx)
		filed, conflicts = filed+n, conflicts+c
		if err != nil && ctx.Err() == nil {
			// Every round of an outage fails here: said once it has
			// begun filing, quietly before.
			log := r.cfg.Log.Debug
			if filed > 0 {
				log = r.cfg.Log.Warn
			}
			log("reconcile: directory entries of transactions decided in its outage not all filed yet", "filed", filed, "error", err)
		}
		if err != nil || n+c < r.cfg.Batch {
			break
		}
	}
	if filed+conflicts > 0 {
		r.cfg.Log.Info("reconcile: filed the directory entries of transactions decided in its outage", "filed", filed, "conflicts", conflicts)
	}
}

// File writes the directory entries of up to Batch final records decided
// without one (at their natural home while the directory was
// unavailable), and clears their mark: the directory is complete again,
// and a copy of such an ID sent to another cell later gets this cell's
// answer. An entry found another cell's (the ID was decided there too,
// across the outage: the window docs/design/transaction-directory.md
// names) is logged and counted as a conflict, and its mark cleared: this
// cell's record stays as it is and the other cell's entry stands. A
// record the directory refuses is left for the next round and the others
// go on (one entry that cannot be written, its history full, blocks no
// other); the first such error is returned. An error of the store ends
// the round.
func (r *Reconciler) File(ctx context.Context) (filed, conflicts int, err error) {
	d := r.cfg.Directory
	if d == nil {
		return 0, 0, nil
	}
	recs, err := r.cfg.Store.Unfiled(ctx, r.cfg.Batch)
	if err != nil {
		return 0, 0, err
	}
	var first error
	for _, rec := range recs {
		err := d.Finalize(ctx, rec.Key(), r.cfg.CellID, rec.Fingerprint, rec.FingerprintKeyID, rec.Transaction())
		result := "filed"
		switch {
		case r.cfg.ErrNotOwner != nil && errors.Is(err, r.cfg.ErrNotOwner):
			result = "conflict"
			r.cfg.Log.Error("reconcile: a transaction decided here in a directory outage is another cell's in the directory; both answers stand, this record unchanged",
				"partner_id", rec.PartnerID, "transaction_id", rec.TransactionID, "state", rec.State)
		case err != nil:
			if first == nil {
				first = err
			}
			continue
		}
		if err := r.cfg.Store.MarkFiled(ctx, rec.Key()); err != nil {
			return filed, conflicts, err
		}
		if result == "filed" {
			filed++
		} else {
			conflicts++
		}
		if r.cfg.OnFiled != nil {
			r.cfg.OnFiled(result)
		}
	}
	return filed, conflicts, first
}

// errNotClosed: the issuer answered NOT_FOUND to an inquiry that closes,
// so it closed nothing, and a late Authorize could still be applied.
var errNotClosed = errors.New("reconcile: the issuer answered NOT_FOUND to an inquiry with close: the transaction is not closed")

func (r *Reconciler) resolve(ctx context.Context, rec *cellside.Record, now time.Time) (bool, error) {
	ictx, cancel := context.WithTimeout(ctx, r.cfg.InquiryTimeout)
	defer cancel()
	// Before NotFoundAfter the send may still be on its way: ask, without
	// closing it.
	closing := now.Sub(rec.UpdatedAt) >= r.cfg.NotFoundAfter
	if closing && r.cfg.Directory != nil {
		// Only the entry's owner may close the ID at the issuer: another
		// cell took it over (from an attempt of this record's that never
		// had the GTR's Proceed) and may be sending it now, and a close
		// would refuse that send. This record never reached the issuer:
		// abandoned.
		e, found, err := r.cfg.Directory.Get(ctx, rec.Key())
		if err != nil {
			return false, err // stays PENDING; tried again next round
		}
		if found && e.Owner != r.cfg.CellID {
			out := *rec
			out.UpdatedAt = now.UTC().Truncate(time.Microsecond)
			out.State = cellside.StateAbandoned
			if err := r.cfg.Store.Persist(ctx, &out, cellside.StateSending); err != nil {
				return false, err
			}
			return true, nil
		}
	}
	resp, err := r.cfg.Issuer.Inquire(ictx, &issuerproto.InquireRequest{PartnerId: rec.PartnerID, TransactionId: rec.TransactionID, Close: closing})
	out := *rec
	out.UpdatedAt = now.UTC().Truncate(time.Microsecond)
	switch status.Code(err) {
	case codes.OK:
		switch {
		case resp.GetClosed():
			// Closed by this inquiry or an earlier one (this reconciler's,
			// or another's): the issuer will never apply it.
			out.State, out.DeclineReason = cellside.StateFailed, ReasonNotReached
		case resp.GetApproved():
			out.State, out.AuthCode = cellside.StateApproved, resp.GetAuthCode()
		default:
			out.State, out.DeclineReason = cellside.StateDeclined, resp.GetDeclineReason()
		}
	case codes.NotFound:
		if closing {
			return false, errNotClosed
		}
		return false, nil // the send may still be on its way
	default:
		return false, err
	}
	// With the directory, the outcome is written to the entry first, and
	// only while the entry is this cell's. The issuer keys effects by
	// (partner, transaction ID), not by cell: when another cell took the
	// entry over (allowed only from an attempt that never had the GTR's
	// Proceed, so this record never reached the issuer), an outcome found
	// is that cell's effect, and this record is abandoned rather than
	// adopting it, or two cells would hold the transaction past its point
	// of no return. The same holds for FAILED: no other cell decides the
	// transaction otherwise later (and the issuer, having closed it,
	// applies no send of it).
	if d := r.cfg.Directory; d != nil {
		err := d.Finalize(ctx, rec.Key(), r.cfg.CellID, rec.Fingerprint, rec.FingerprintKeyID, out.Transaction())
		switch {
		case r.cfg.ErrNotOwner != nil && errors.Is(err, r.cfg.ErrNotOwner):
			out.State, out.AuthCode, out.DeclineReason = cellside.StateAbandoned, "", ""
		case err != nil:
			return false, err // stays PENDING; tried again next round
		}
	}
	if err := r.cfg.Store.Persist(ctx, &out, cellside.StateSending); err != nil {
		return false, err
	}
	return true, nil
}

// settle brings a record left deciding (its attempt ended between the
// decision's durable write and its entry's, a crash) to what the
// directory says: the decision is the transaction's once the entry holds
// it; an entry of this cell's not final yet takes it now (the attempt
// never answered, and no other cell decided: it would own the entry); an
// entry another cell holds means that cell took the transaction over, and
// this record is abandoned. Without a directory (a cell that runs without
// one never writes deciding) the decision stands.
func (r *Reconciler) settle(ctx context.Context, rec *cellside.Record, now time.Time) (bool, error) {
	out := *rec
	out.UpdatedAt = now.UTC().Truncate(time.Microsecond)
	out.State = cellside.DecisionState(rec.DeclineReason)
	if d := r.cfg.Directory; d != nil {
		e, found, err := d.Get(ctx, rec.Key())
		switch {
		case err != nil:
			return false, err
		case found && e.Owner == r.cfg.CellID && e.State == cellside.EntryFinal:
			// The entry holds this cell's answer: the record follows it.
			ans := e.Answer
			out.State, out.DeclineReason, out.AuthCode = cellside.StateOf(ans.GetStatus()), ans.GetDeclineReason(), ans.GetAuthCode()
		default:
			err := d.Finalize(ctx, rec.Key(), r.cfg.CellID, rec.Fingerprint, rec.FingerprintKeyID, out.Transaction())
			switch {
			case r.cfg.ErrNotOwner != nil && errors.Is(err, r.cfg.ErrNotOwner):
				out.State, out.DeclineReason = cellside.StateAbandoned, ""
			case err != nil:
				return false, err
			}
		}
	}
	if err := r.cfg.Store.Persist(ctx, &out, cellside.StateDeciding); err != nil {
		return false, err
	}
	return true, nil
}
