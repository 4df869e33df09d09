// Package server is a cell's gRPC face: it implements the Cell service by
// driving one cellside.Machine per attempt, performing each action
// against the store, the GTR's stream and the issuer.
//
// Context rule: until the point of no return the attempt runs under the
// caller's context, and a caller that goes away ends it as re-routable.
// From the moment the cell has recorded that it is sending, the attempt runs
// to its end under a context of its own: the transaction now belongs to this
// cell whatever the GTR does.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/cmd/cell/internal/directory"
	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/internal/cardkeys"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// Store is what the server needs of the cell's database; *store.Store
// implements it. Each method's contract is the store's: records are keyed by
// (partner, transaction ID).
type Store interface {
	Insert(ctx context.Context, r *cellside.Record) (bool, *cellside.Record, error)
	Reclaim(ctx context.Context, r *cellside.Record) (bool, *cellside.Record, error)
	Get(ctx context.Context, k idempotency.Key) (*cellside.Record, error)
	Persist(ctx context.Context, r *cellside.Record, from cellside.State) error
	// AbandonOwn marks r's record abandoned if it is in one of states and
	// still the row r's attempt wrote (Persist.OrFrom); otherwise an error
	// matching store.ErrStateChanged.
	AbandonOwn(ctx context.Context, r *cellside.Record, states ...cellside.State) error
	Velocity(ctx context.Context, hashes []card.KeyedHash, since time.Time, exclude idempotency.Key) (int64, int64, error)
	// GetActive reads k's record as Get does and, from the same snapshot
	// of it, whether an attempt is working on it now, in this instance of
	// the cell or in a live sibling sharing the database (the record's
	// durable owner and its lease): the orchestrator's Existing.Active.
	// Release ends this instance's ownership of k's record left in state
	// sending, once its attempt has answered PENDING.
	GetActive(ctx context.Context, k idempotency.Key) (*cellside.Record, bool, error)
	Release(ctx context.Context, k idempotency.Key) error
	// MarkUnfiled marks k's record as lacking its directory entry (the
	// best-effort write of its final state failed): the reconciler files
	// it once the directory is back.
	MarkUnfiled(ctx context.Context, k idempotency.Key) error
	// HoldFollowUp records a follow-up and holds its amount on its
	// original (store.Store.HoldFollowUp).
	HoldFollowUp(ctx context.Context, k, original idempotency.Key, build func(original *cellside.Record) *cellside.Record) (held, existing *cellside.Record, err error)
}

// Issuer sends authorizations; issuerproto.IssuerClient implements it. An
// error means the outcome is unknown, except INVALID_ARGUMENT, which means
// the issuer refused the request without applying it.
type Issuer interface {
	Authorize(ctx context.Context, in *issuerproto.AuthorizeRequest, opts ...grpc.CallOption) (*issuerproto.AuthorizeResponse, error)
	// Adjust sends a capture, void or refund, with Authorize's contract.
	Adjust(ctx context.Context, in *issuerproto.AdjustRequest, opts ...grpc.CallOption) (*issuerproto.AuthorizeResponse, error)
}

// Directory is the transaction directory; *directory.Directory implements
// it (see that package and docs/design/transaction-directory.md).
type Directory interface {
	// Claim creates k's entry as e; it returns the entry that holds k and
	// whether it is e.Owner's.
	Claim(ctx context.Context, k idempotency.Key, e cellside.Entry) (cellside.Entry, bool, error)
	// Take replaces k's entry, read at revision rev, with e; it returns the
	// entry that holds k and whether it is now e.
	Take(ctx context.Context, k idempotency.Key, e cellside.Entry, rev uint64) (cellside.Entry, bool, error)
	// Finalize records owner's answer for k; Abandon marks k's entry
	// abandoned if it is still the claim of call's attempt at owner.
	// FinalizeAt does it in one write when rev, owner's own claim, is
	// still the entry's revision.
	Finalize(ctx context.Context, k idempotency.Key, owner string, fp idempotency.Fingerprint, fpKeyID string, answer *cellpayv1.Transaction) error
	FinalizeAt(ctx context.Context, k idempotency.Key, rev uint64, owner string, fp idempotency.Fingerprint, fpKeyID string, answer *cellpayv1.Transaction) error
	Abandon(ctx context.Context, k idempotency.Key, owner, call string, attempt int32) error
	// Get reads k's entry: whether there is one, and which.
	Get(ctx context.Context, k idempotency.Key) (cellside.Entry, bool, error)
	// Later runs fn in the background, bounded; it may drop it.
	Later(fn func(ctx context.Context) error, what string)
	// Outage reports whether every operation for longer than one
	// operation's bound failed: the directory is unavailable, not slow.
	Outage() bool
}

// Metrics counts how attempts end; *telemetry.Cell implements it. Its
// methods must not block.
type Metrics interface {
	// Finished records an attempt's answer: the state of the record
	// answered with, or "reroutable" or "rejected".
	Finished(state string)
	// PNR records a point of no return the GTR confirmed, or refused.
	PNR(confirmed bool)
	// Directory records a directory claim's result.
	Directory(result string)
}

// Config configures a Server. Every field is required unless it says
// otherwise.
type Config struct {
	CellID string
	Store  Store
	Issuer Issuer
	// Directory is the transaction directory; optional: without it the
	// cell decides from its own records alone (tests, a lone cell).
	Directory Directory
	// RefData returns the reference data to use now.
	RefData func() cellside.RefData
	Policy  cellside.Policy
	// Keys computes the PAN hash and the payload fingerprint, under keys
	// derived from the cell's master secrets (internal/cardkeys).
	Keys *cardkeys.Ring
	// IssuerTimeout bounds one issuer call; default 5s.
	IssuerTimeout time.Duration
	// WaitTimeout bounds waiting for a concurrent attempt at the same
	// transaction; default 10s.
	WaitTimeout time.Duration
	// StartTimeout bounds waiting for a stream's first message; default 5s.
	StartTimeout time.Duration
	// ProceedTimeout bounds waiting for the GTR's Proceed after the PNR
	// event; past it the attempt steps back, as for a refused PNR. It must
	// be well above the GTR's attempt timeout (2s), past which the GTR
	// never sends Proceed; default 5s. It is also how long a duplicate
	// waits when the GTR holding the attempt froze or died after the PNR
	// (the sending record stays active), so it is kept well inside a
	// partner's retries (10s was not: TestAccessPointFreeze).
	ProceedTimeout time.Duration
	// StoreTimeout bounds the final write after the issuer has answered,
	// all of its StoreTries tries together; past it the write is left to
	// the reconciler (the record stays "sending", answered PENDING, and
	// is resolved by inquiry); defaults 5s and 3.
	StoreTimeout time.Duration
	StoreTries   int
	Metrics      Metrics // optional
	// Outbox serves ListCallbacks and ReplayCallbacks; optional (without
	// it they answer UNIMPLEMENTED). RegistryVersion reports the partner
	// registry version the notifier follows; optional.
	Outbox          Outbox
	RegistryVersion func() uint64
	// Records serves List and Statement; optional (without it they
	// answer UNIMPLEMENTED).
	Records Records
	Now     func() time.Time // default time.Now
	Log     *slog.Logger     // default slog.Default()
}

func (c *Config) validate() error {
	switch {
	case c.CellID == "":
		return errors.New("server: CellID is required")
	case c.Store == nil, c.Issuer == nil, c.RefData == nil:
		return errors.New("server: Store, Issuer and RefData are required")
	case c.Keys == nil:
		return errors.New("server: Keys is required")
	case c.Policy.LimitCurrency == "":
		return errors.New("server: Policy is required")
	}
	if c.IssuerTimeout <= 0 {
		c.IssuerTimeout = 5 * time.Second
	}
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = 10 * time.Second
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 5 * time.Second
	}
	if c.ProceedTimeout <= 0 {
		c.ProceedTimeout = 5 * time.Second
	}
	if c.StoreTimeout <= 0 {
		c.StoreTimeout = 5 * time.Second
	}
	if c.StoreTries <= 0 {
		c.StoreTries = 3
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// Server implements cellproto.CellServer.
type Server struct {
	cellproto.UnimplementedCellServer
	cfg Config
	// releases bounds the releases being retried in the background.
	releases chan struct{}
	// inFlight counts the Process streams being served (InFlight).
	inFlight atomic.Int64
}

// InFlight is the number of Process streams being served: the attempts a
// graceful stop waits for (it waits for every other call too).
func (s *Server) InFlight() int64 { return s.inFlight.Load() }

// maxReleaseRetries bounds the releases retried at once (release).
const maxReleaseRetries = 256

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, releases: make(chan struct{}, maxReleaseRetries)}, nil
}

// Get returns the recorded transaction of (partner, transaction ID).
// Records that partners never see (not yet at their PNR, or abandoned) are
// NOT_FOUND, and so is another partner's transaction with the same ID: the
// store finds only the asked partner's.
func (s *Server) Get(ctx context.Context, req *cellproto.GetRequest) (*cellpayv1.Transaction, error) {
	if err := idempotency.ValidateKey(req.GetPartnerId()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "partner_id: %v", err)
	}
	if err := idempotency.ValidateKey(req.GetTransactionId()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "transaction_id: %v", err)
	}
	r, err := s.cfg.Store.Get(ctx, idempotency.Key{PartnerID: req.GetPartnerId(), TransactionID: req.GetTransactionId()})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, status.Error(codes.NotFound, "transaction not found")
	case err != nil:
		return nil, status.Error(codes.Unavailable, err.Error())
	case r.State == cellside.StateReceived, r.State == cellside.StateAbandoned, r.State == cellside.StateDeciding:
		return nil, status.Error(codes.NotFound, "transaction not found")
	}
	return r.Transaction(), nil
}

// Process runs one attempt; see the Cell service's contract.
func (s *Server) Process(stream grpc.BidiStreamingServer[cellproto.ProcessInput, cellproto.ProcessEvent]) error {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	first, err := recvWithin(stream, s.cfg.StartTimeout)
	if err != nil {
		return err
	}
	req := first.GetStart()
	if req == nil {
		return status.Error(codes.InvalidArgument, "start: the first message must be a ProcessRequest")
	}
	r := req.GetRequest()
	in := cellside.Input{
		Request:    r,
		Attempt:    req.GetAttempt(),
		RouteRule:  req.GetRouteRule(),
		CellID:     s.cfg.CellID,
		LastResort: req.GetLastResort(),
		Directory:  s.cfg.Directory != nil,
		Call:       req.GetCallId(),
		Home:       req.GetHome(),
	}
	if r != nil {
		keys := s.cfg.Keys
		in.Fingerprint, in.FingerprintKeyID = keys.Fingerprint(r), keys.FingerprintKeyID()
		in.FingerprintUnder = func(id string) (idempotency.Fingerprint, bool) { return keys.FingerprintUnder(id, r) }
		if pan := r.GetCard().GetPan(); pan != "" {
			in.MaskedPAN = card.Mask(pan)
			hashes := keys.PANHashes(pan)
			in.PANHash, in.PANHashKeyID, in.OtherPANHashes = hashes[0].Sum, hashes[0].KeyID, hashes[1:]
		}
	}
	m := cellside.New(in, s.cfg.Policy, s.cfg.RefData(), s.cfg.Now)
	ctx := stream.Context()
	if b := req.GetAttemptBudgetMs(); b > 0 {
		ctx = context.WithValue(ctx, waitUntilKey{}, waitDeadline(time.Now(), time.Duration(b)*time.Millisecond))
	}
	a := m.Start()
	owns := false // this attempt wrote the record (an insert, or a reclaim)
	for !cellside.Done(a) {
		var ev cellside.Event
		ev, ctx = s.perform(ctx, stream, a)
		if _, ok := ev.(cellside.Inserted); ok {
			owns = true
		}
		a = m.Step(ev)
	}
	if r, ok := a.(cellside.Reply); ok && owns && r.Record.State == cellside.StateSending {
		s.release(ctx, r.Record.Key())
	}
	s.settleEntry(m, in, a)
	return s.finish(stream, a)
}

// release ends this attempt's ownership of the record it leaves in state
// sending (PENDING): from now on the reconciler resolves it, and a
// duplicate answers PENDING at once. A release that fails (most often the
// very database trouble that made the answer PENDING) is tried again in
// the background every releaseRetry until it succeeds, for up to
// store.ActiveFor, after which the ownership lapses by itself: without
// the retries, a PENDING answered while the database was away stayed
// unresolved for ActiveFor after it came back (TestFaultStopCellPostgres).
func (s *Server) release(ctx context.Context, k idempotency.Key) {
	try := func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		return s.cfg.Store.Release(ctx, k)
	}
	if err := try(); err != nil {
		s.retryLater(k, "release of a pending transaction", err, try)
	}
}

// retryLater tries again in the background, every releaseRetry, a write
// for k that failed with err, until it succeeds or finds nothing left to
// do (store.ErrStateChanged), for up to store.ActiveFor, after which an
// ownership it was to end lapses by itself. At most maxReleaseRetries are
// retried at once; past that the write is given up, logged.
func (s *Server) retryLater(k idempotency.Key, what string, err error, try func() error) {
	log := s.cfg.Log.With("partner_id", k.PartnerID, "transaction_id", k.TransactionID)
	select {
	case s.releases <- struct{}{}:
	default:
		log.Warn(what+" failed, too many retried already; given up", "error", err)
		return
	}
	log.Warn(what+" failed; retrying", "error", err)
	go func() {
		defer func() { <-s.releases }()
		deadline := time.Now().Add(store.ActiveFor)
		for time.Now().Before(deadline) {
			time.Sleep(releaseRetry)
			if err = try(); err == nil || errors.Is(err, store.ErrStateChanged) {
				log.Info(what+" done after a retry", "error", err)
				return
			}
		}
		log.Warn(what+" failed; given up", "error", err)
	}()
}

// releaseRetry is how often a failed release or step back is tried again.
const releaseRetry = 500 * time.Millisecond

// settleEntry brings the transaction's directory entry up to date with
// how the attempt ended, in the background (best effort: no rule depends
// on it, it lets other cells answer without the owner): a final answer of
// this cell's, recorded; a claim of this attempt's given up before its
// point of no return, abandoned.
func (s *Server) settleEntry(m *cellside.Machine, in cellside.Input, a cellside.Action) {
	d := s.cfg.Directory
	if d == nil {
		return
	}
	e, claimed := m.Claimed()
	if m.Unclaimed() && s.cfg.Metrics != nil {
		s.cfg.Metrics.Directory("unclaimed")
	}
	if !claimed && !m.Unclaimed() {
		return
	}
	k := idempotency.KeyOf(in.Request)
	switch a := a.(type) {
	case cellside.Reply:
		if !a.Record.State.Terminal() || a.Record.CellID != s.cfg.CellID || claimed && e.State == cellside.EntryFinal {
			return // not final, not this cell's, or a replay whose entry has the answer already
		}
		if a.Record.Recovered() {
			// No payload to file (the issuer's record has none): the
			// entry stays this cell's, so a replay elsewhere comes here,
			// where the record answers it.
			return
		}
		var rev uint64
		if claimed && e.Owner == s.cfg.CellID {
			rev = e.Revision
		}
		s.fileLater(k, rev, a.Record)
	case cellside.Reroute:
		if claimed && e.SameAttempt(in.Call, in.Attempt) {
			d.Later(func(ctx context.Context) error { return d.Abandon(ctx, k, s.cfg.CellID, in.Call, in.Attempt) }, "abandon")
		}
	}
}

// fileLater writes r's final answer into its directory entry in the
// background: at revision rev (this cell's own claim), or, with rev 0,
// wherever the entry stands if it is this cell's. Left to the reconciler
// (the record marked unfiled) when the directory does not answer.
func (s *Server) fileLater(k idempotency.Key, rev uint64, r *cellside.Record) {
	d := s.cfg.Directory
	txn, fp, fpKey := r.Transaction(), r.Fingerprint, r.FingerprintKeyID
	d.Later(func(ctx context.Context) error {
		var err error
		if rev != 0 {
			err = d.FinalizeAt(ctx, k, rev, s.cfg.CellID, fp, fpKey, txn)
		} else {
			err = d.Finalize(ctx, k, s.cfg.CellID, fp, fpKey, txn)
		}
		if err != nil && !errors.Is(err, directory.ErrNotOwner) {
			// Left to the reconciler, which files it once the
			// directory answers (reconcile.File): the directory is
			// complete again after an outage.
			mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
			defer cancel()
			if merr := s.cfg.Store.MarkUnfiled(mctx, k); merr != nil {
				s.cfg.Log.Warn("directory entry not written, nor its record marked to file it later", "partner_id", k.PartnerID, "transaction_id", k.TransactionID, "error", merr)
			}
		}
		return err
	}, "finalize")
}

// processStream is the cell's side of a Process stream.
type processStream = grpc.BidiStreamingServer[cellproto.ProcessInput, cellproto.ProcessEvent]

// perform carries out one action and returns its event, and the context
// for the actions after it.
func (s *Server) perform(ctx context.Context, stream processStream, a cellside.Action) (cellside.Event, context.Context) {
	switch a := a.(type) {
	case cellside.Claim:
		return s.claim(ctx, a), ctx
	case cellside.Insert:
		ok, existing, err := s.cfg.Store.Insert(ctx, a.Record)
		return s.existingOr(ctx, ok, existing, err), ctx
	case cellside.Reclaim:
		ok, existing, err := s.cfg.Store.Reclaim(ctx, a.Record)
		return s.existingOr(ctx, ok, existing, err), ctx
	case cellside.Wait:
		return s.wait(ctx, a.Key), ctx
	case cellside.CheckVelocity:
		n, amt, err := s.cfg.Store.Velocity(ctx, a.PANHashes, a.Since, a.Exclude)
		if err != nil {
			return cellside.StoreFailed{Err: err}, ctx
		}
		return cellside.Velocity{Count: n, Amount: amt}, ctx
	case cellside.Persist:
		stepBack := a.Record.State == cellside.StateAbandoned
		if a.From == cellside.StateReceived && ctx.Err() != nil && !stepBack && !a.Decided {
			// The GTR has given up on this attempt and may be restarting it
			// elsewhere: record no outcome here, and stop short of the
			// point of no return rather than ask for a confirmation it
			// will not give.
			return cellside.StoreFailed{Err: fmt.Errorf("caller gone before the point of no return: %w", ctx.Err())}, ctx
		}
		pctx := ctx
		switch {
		case a.Record.State == cellside.StateSending, a.Record.State == cellside.StateDeciding:
			// Once begun, this write must end one way or the other, not be
			// cut off leaving us unsure whether it committed; the handshake
			// (or the directory's entry) that follows is what honours a GTR
			// that gave up.
			pctx = context.WithoutCancel(ctx)
		case a.Decided:
			// The directory answers with this outcome already: written
			// whatever became of the caller, bounded; a row left deciding
			// is the reconciler's, which settles it by the entry.
			var cancel context.CancelFunc
			pctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
			defer cancel()
		case stepBack:
			// A step back to abandoned is written even when the GTR is
			// gone (most often why the attempt steps back): it is what
			// lets a duplicate reclaim the record. Bounded.
			var cancel context.CancelFunc
			pctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
			defer cancel()
		}
		if a.OrFrom != "" {
			return s.abandonOwn(pctx, a), ctx
		}
		persist := s.cfg.Store.Persist
		if a.From == cellside.StateSending {
			persist = s.persistAfterIssuer
		}
		if err := persist(pctx, a.Record, a.From); err != nil {
			return cellside.StoreFailed{Err: err}, ctx
		}
		return cellside.Persisted{}, ctx
	case cellside.EmitPNR:
		ev, ctx := s.confirmPNR(stream, a.Key)
		if s.cfg.Metrics != nil {
			_, ok := ev.(cellside.PNRConfirmed)
			s.cfg.Metrics.PNR(ok)
		}
		return ev, ctx
	case cellside.Authorize:
		return s.authorize(ctx, a), ctx
	}
	return cellside.StoreFailed{Err: fmt.Errorf("server: no driver for action %T", a)}, ctx
}

// abandonOwn is the step back of an attempt whose write to a.From failed
// and may have committed (Persist.OrFrom). A try that fails is tried
// again in the background (retryLater), the machine told at once: a
// record left in sending by a commit that went through unseen would hold
// the transaction here past its point of no return, with no issuer call
// behind it, while the GTR completes it on another cell.
func (s *Server) abandonOwn(ctx context.Context, a cellside.Persist) cellside.Event {
	r := *a.Record
	try := func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
		defer cancel()
		return s.cfg.Store.AbandonOwn(ctx, &r, a.From, a.OrFrom)
	}
	err := try()
	if err == nil {
		return cellside.Persisted{}
	}
	if !errors.Is(err, store.ErrStateChanged) {
		s.retryLater(r.Key(), "step back of an attempt whose sending write failed", err, try)
	}
	return cellside.StoreFailed{Err: err}
}

// confirmPNR asks the GTR to confirm the point of no return and waits for
// its Proceed. Once confirmed, the attempt runs to its end under a context
// of its own: the transaction belongs to this cell whatever the GTR does.
func (s *Server) confirmPNR(stream processStream, k idempotency.Key) (cellside.Event, context.Context) {
	ctx := stream.Context()
	refused := func(err error) (cellside.Event, context.Context) {
		return cellside.PNRRefused{Err: err}, context.WithoutCancel(ctx)
	}
	if err := stream.Send(&cellproto.ProcessEvent{Event: &cellproto.ProcessEvent_PointOfNoReturn{
		PointOfNoReturn: &cellproto.PointOfNoReturn{TransactionId: k.TransactionID, PartnerId: k.PartnerID, CellId: s.cfg.CellID},
	}}); err != nil {
		return refused(err)
	}
	in, err := recvWithin(stream, s.cfg.ProceedTimeout)
	switch {
	case err != nil:
		return refused(err)
	case in.GetProceed() == nil:
		return refused(errors.New("expected Proceed"))
	}
	// Said before the issuer is called: from here the GTR answers PENDING
	// for a stream that ends, since this cell resolves the transaction. A
	// failed send changes nothing: the GTR then tells its caller the
	// outcome is unknown, and a retry reads it here.
	_ = stream.Send(proceeding)
	return cellside.PNRConfirmed{}, context.WithoutCancel(ctx)
}

var proceeding = &cellproto.ProcessEvent{Event: &cellproto.ProcessEvent_Proceeding{Proceeding: &cellproto.Proceeding{}}}

// errNoMessage is the error of a stream that sent nothing in time.
var errNoMessage = status.Error(codes.DeadlineExceeded, "no message on the stream in time")

// recvWithin receives the stream's next message, waiting at most d. A
// Recv that outlives d is left to end with the stream, which the handler's
// return ends.
func recvWithin(stream processStream, d time.Duration) (*cellproto.ProcessInput, error) {
	type got struct {
		in  *cellproto.ProcessInput
		err error
	}
	ch := make(chan got, 1)
	go func() {
		in, err := stream.Recv()
		ch <- got{in, err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case g := <-ch:
		return g.in, g.err
	case <-t.C:
		return nil, errNoMessage
	case <-stream.Context().Done():
		return nil, status.FromContextError(stream.Context().Err()).Err()
	}
}

// persistAfterIssuer writes the issuer's answer: each try bounded, a few
// tries, and then it is the reconciler's (by inquiry, never a resend).
func (s *Server) persistAfterIssuer(ctx context.Context, r *cellside.Record, from cellside.State) error {
	// One budget for every try: past it the attempt answers PENDING and
	// the reconciler resolves the record. A budget per try held answers
	// for three of them, 15 s and more, past a partner's deadline, when a
	// Postgres shutting down took connections it never answered
	// (TestFaultStopCellPostgres, DEADLINE_EXCEEDED on a slow host).
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
	defer cancel()
	var err error
	for i := range s.cfg.StoreTries {
		if i > 0 {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(time.Duration(i) * 100 * time.Millisecond):
			}
		}
		err = s.cfg.Store.Persist(ctx, r, from)
		if err == nil || errors.Is(err, store.ErrStateChanged) {
			// ErrStateChanged on a retry: the try before committed, or the
			// reconciler got there first; either way the record is final,
			// and an answer of PENDING reads it back.
			return err
		}
	}
	return err
}

// claim performs a directory claim or takeover.
func (s *Server) claim(ctx context.Context, a cellside.Claim) cellside.Event {
	var (
		e    cellside.Entry
		ours bool
		err  error
	)
	if a.Revision == 0 {
		e, ours, err = s.cfg.Directory.Claim(ctx, a.Key, a.Entry)
	} else {
		// A lost takeover hands back the entry that won, which may be
		// this cell's all the same (another attempt here wrote it).
		e, ours, err = s.cfg.Directory.Take(ctx, a.Key, a.Entry, a.Revision)
		ours = ours || err == nil && e.Owner == s.cfg.CellID
	}
	result := "claimed"
	switch {
	case err != nil:
		result = "unavailable"
	case !ours:
		result = "held"
	case a.Revision != 0:
		result = "taken_over"
	}
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.Directory(result)
	}
	switch {
	case err != nil:
		return cellside.ClaimFailed{Err: err, Outage: s.cfg.Directory.Outage()}
	case !ours:
		return cellside.Held{Entry: e}
	}
	// Active is left false: the machine reads it from Existing only, where
	// the store is asked (a round trip per transaction here for nothing).
	return cellside.Claimed{Entry: e}
}

func (s *Server) existingOr(ctx context.Context, ok bool, existing *cellside.Record, err error) cellside.Event {
	switch {
	case err != nil:
		return cellside.StoreFailed{Err: err}
	case ok:
		return cellside.Inserted{}
	}
	return s.existingRecord(ctx, existing)
}

// existingRecord is the Existing event of a record this attempt did not
// write: Active comes from the durable owner and its lease
// (Store.GetActive), so that an attempt at a sibling instance counts as
// one here. A record in sending is read again with it, in one statement:
// Active read after the record could belong to a later state (the attempt
// finished in between), and answer PENDING from a stale sending.
func (s *Server) existingRecord(ctx context.Context, r *cellside.Record) cellside.Event {
	if r.State != cellside.StateSending {
		return cellside.Existing{Record: r} // Active matters for sending only
	}
	r, active, err := s.cfg.Store.GetActive(ctx, r.Key())
	if err != nil {
		return cellside.StoreFailed{Err: err}
	}
	return cellside.Existing{Record: r, Active: active && r.State == cellside.StateSending}
}

// waitUntilKey keys, in an attempt's context, when its waits on another
// attempt at the same transaction end (waitDeadline), if the GTR said its
// budget.
type waitUntilKey struct{}

// waitDeadline is when an attempt received at now, which the GTR gives
// budget to reach its point of no return, stops waiting on another
// attempt at the same transaction: a fifth of the budget (at least
// 100 ms) before it, for the ABORTED to reach the GTR before the GTR's
// own timer, which would take the wait for a slow cell and shrink its
// concurrency limit (the backup access point refused a frozen primary's
// partners OVERLOADED for seconds: TestAccessPointFreeze, 2026-12-07).
func waitDeadline(now time.Time, budget time.Duration) time.Time {
	return now.Add(budget - max(budget/5, 100*time.Millisecond))
}

// wait polls the durable record until another attempt's record of k
// leaves state received, and leaves state sending or its attempt (in any
// instance) ends: bounded by the caller's deadline, WaitTimeout and the
// attempt's budget (waitDeadline).
func (s *Server) wait(ctx context.Context, k idempotency.Key) cellside.Event {
	d := s.cfg.WaitTimeout
	if until, ok := ctx.Value(waitUntilKey{}).(time.Time); ok {
		d = min(d, time.Until(until))
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return cellside.StoreFailed{Err: fmt.Errorf("waiting for a concurrent attempt: %w", cellside.ErrInProgress)}
		case <-t.C:
		}
		r, active, err := s.cfg.Store.GetActive(ctx, k)
		if err != nil || r.State == cellside.StateReceived || r.State == cellside.StateDeciding {
			continue
		}
		if active = active && r.State == cellside.StateSending; !active {
			return cellside.Existing{Record: r}
		}
	}
}

func (s *Server) authorize(ctx context.Context, a cellside.Authorize) cellside.Event {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.IssuerTimeout)
	defer cancel()
	r := a.Request
	resp, err := s.cfg.Issuer.Authorize(ctx, &issuerproto.AuthorizeRequest{
		PartnerId:        r.GetPartnerId(),
		TransactionId:    r.GetTransactionId(),
		Pan:              r.GetCard().GetPan(),
		ExpiryMonth:      r.GetCard().GetExpiryMonth(),
		ExpiryYear:       r.GetCard().GetExpiryYear(),
		AmountMinorUnits: r.GetAmount().GetMinorUnits(),
		Currency:         r.GetAmount().GetCurrency(),
		MerchantId:       r.GetMerchant().GetId(),
		Mcc:              r.GetMerchant().GetMcc(),
		Refund:           r.GetPaymentType() == cellpayv1.PaymentType_CARD_REFUND,
		BankTransfer:     r.GetPaymentType() == cellpayv1.PaymentType_BANK_TRANSFER,
		TerminalId:       s.cfg.CellID,
	})
	switch status.Code(err) {
	case codes.OK:
		return cellside.IssuerAnswered{Approved: resp.GetApproved(), AuthCode: resp.GetAuthCode(), DeclineReason: resp.GetDeclineReason()}
	case codes.InvalidArgument:
		s.cfg.Log.Warn("issuer refused the request", "partner_id", r.GetPartnerId(), "transaction_id", r.GetTransactionId(),
			"error", status.Convert(err).Message())
		return cellside.IssuerAnswered{DeclineReason: "issuer_invalid_request"}
	}
	s.cfg.Log.Warn("issuer outcome unknown; transaction pending", "partner_id", r.GetPartnerId(), "transaction_id", r.GetTransactionId(),
		"code", status.Code(err).String())
	return cellside.IssuerUnknown{Err: err}
}

func (s *Server) finish(stream processStream, a cellside.Action) error {
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.Finished(finishedAs(a))
	}
	switch a := a.(type) {
	case cellside.Reply:
		return stream.Send(&cellproto.ProcessEvent{Event: &cellproto.ProcessEvent_Result{Result: a.Record.Transaction()}})
	case cellside.ReplyEntry:
		return stream.Send(&cellproto.ProcessEvent{Event: &cellproto.ProcessEvent_Result{Result: a.Entry.Answer}})
	case cellside.Reroute:
		s.cfg.Log.Warn("attempt re-routable", "reason", a.Reason, "owner", a.Owner)
		return stream.Send(&cellproto.ProcessEvent{Event: &cellproto.ProcessEvent_Reroutable{
			Reroutable: &cellproto.Reroutable{Reason: a.Reason, CellHealthy: a.CellHealthy, OwnerCell: a.Owner},
		}})
	case cellside.Reject:
		return rejectStatus(a.Err)
	}
	return status.Errorf(codes.Internal, "server: unexpected final action %T", a)
}

// finishedAs names a final action for Metrics.
func finishedAs(a cellside.Action) string {
	switch a := a.(type) {
	case cellside.Reply:
		return string(a.Record.State)
	case cellside.ReplyEntry:
		return "from_directory"
	case cellside.Reroute:
		return "reroutable"
	}
	return "rejected"
}

// rejectStatus maps the orchestrator's rejections to gRPC codes.
func rejectStatus(err error) error {
	switch {
	case errors.Is(err, idempotency.ErrConflict):
		return status.Error(codes.AlreadyExists, "transaction_id: already used with a different payload")
	case errors.Is(err, cellside.ErrInProgress):
		return status.Error(codes.Aborted, "transaction_id: an earlier attempt is still in progress; retry")
	}
	if _, ok := status.FromError(err); ok {
		return err // a *validate.FieldError carries INVALID_ARGUMENT
	}
	return status.Error(codes.Internal, err.Error())
}
