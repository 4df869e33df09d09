// Package issuercheck compares a cell's records with the issuer's own
// record of what it applied for the cell: the issuer's ListEffects, by the
// cell's terminal ID (every Authorize and Adjust a cell sends carries its
// cell ID as terminal_id). The issuer's record is the money; a cell must
// hold a record of every effect the issuer applied for it, with the same
// outcome. Invariant 12 of docs/design/README.md says so, and this is how
// it is checked where it matters: routinely, on the cell's leading
// instance (a finding is counted and logged, never corrected here), and
// as the first step of recovering a cell whose database lost its last
// commits (a site lost, an asynchronous copy promoted;
// docs/design/sites.md).
//
// Compare is the pure judgement of one effect against the cell's record,
// and Recovered the record of an effect the cell lost; Check is the
// driver: it pages through the issuer's record of a window, reads the
// cell's record of each, counts what Compare finds, bounded in pages and
// in findings kept, and, given a Recorder, records each Missing effect
// from the issuer's record (docs/design/sites.md, "Step 4").
package issuercheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// Kind is what a comparison found.
type Kind int

// The findings. Missing, Behind and Differs are discrepancies: the cell's
// records are wrong about money, or about an outcome a partner may hold.
// Unresolved is not one yet: the cell's reconciler resolves a record
// sending by inquiry at the issuer, which answers this same outcome.
const (
	// Agrees: the cell's record holds the issuer's outcome.
	Agrees Kind = iota
	// Missing: the issuer applied it, and the cell has no record of it.
	Missing
	// Unresolved: the cell's record is sending (or deciding): it has no
	// outcome yet, and the reconciler resolves it.
	Unresolved
	// Differs: the cell's record holds another outcome: another kind of
	// transaction, approved against declined, another amount or
	// authorization code, or failed or abandoned where the issuer applied
	// it. (An abandoned record of an effect this cell sent is also what
	// a released cell holds once another cell took the transaction over
	// and resolved it: the effect is held, by that cell.)
	Differs
	// Behind: the cell's record is short of its point of no return
	// (received) where the issuer applied it for this cell: the cell's
	// database lost the commits that took the record on (a copy behind its
	// primary promoted). A received record never reached the issuer, so no
	// other cause explains it.
	Behind
	// Elsewhere: the cell's record is abandoned, and the transaction
	// directory names another cell its owner: a released cell's record,
	// whose transaction another cell took over and resolved. The effect
	// is held, by that cell: not a discrepancy.
	Elsewhere
)

var kindNames = [...]string{Agrees: "agrees", Missing: "missing", Unresolved: "unresolved", Differs: "differs", Behind: "behind", Elsewhere: "elsewhere"}

func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Finding is one effect that does not agree with the cell's record: its
// transaction, what the issuer applied and what the cell holds, in words
// with no card data (neither side carries any).
type Finding struct {
	Key    idempotency.Key
	Kind   Kind
	Issuer string // e.g. "approved CAPTURE of a-1, 400 EUR, auth A1B2C3"
	Cell   string // e.g. "no record", "sending", "declined: do_not_honour"
	// Recovered: Missing or Behind, and the cell has recorded it since
	// from the issuer's record (Recovered, CaughtUp).
	Recovered bool
}

// Compare judges effect e against the cell's record r of the same
// transaction (nil when the cell has none). It is pure. Amounts are
// compared for approvals other than a void (whose issuer amount is the
// authorization it released, which the void's record need not carry).
func Compare(e *issuerproto.RecordedEffect, r *cellside.Record) Finding {
	f := Finding{Key: idempotency.Key{PartnerID: e.GetPartnerId(), TransactionID: e.GetTransactionId()}, Issuer: describeEffect(e)}
	if r == nil {
		f.Kind, f.Cell = Missing, "no record"
		return f
	}
	f.Cell = describeRecord(r)
	behind := r.State == cellside.StateReceived
	switch {
	case !r.State.Terminal() && !behind && r.State != cellside.StateAbandoned:
		f.Kind = Unresolved
	case r.PaymentType != paymentType(e) || e.GetOriginalTransactionId() != r.Original:
		f.Kind = Differs
	case behind:
		f.Kind = Behind
	case r.State == cellside.StateApproved && e.GetApproved():
		if e.GetAuthCode() != r.AuthCode || e.GetKind() != issuerproto.AdjustKind_ADJUST_KIND_VOID &&
			(e.GetAmountMinorUnits() != r.Amount || e.GetCurrency() != r.Currency) {
			f.Kind = Differs
		}
	case r.State == cellside.StateDeclined && !e.GetApproved():
	default: // approved against declined, or failed where the issuer applied it
		f.Kind = Differs
	}
	return f
}

// Recovered is the record of the transaction e is the effect of, for a
// cell that lost its own (Missing): final with the issuer's outcome,
// amount, currency, authorization code or decline reason, payment type
// and original, created when the issuer applied it, by the cell whose
// terminal it was. What the issuer does not know stays empty (market,
// merchant, masked card number, settlement), and it has no fingerprint
// (cellside.RecoveredKeyID; a replay is compared by
// cellside.MatchesRecovered). It is pure.
func Recovered(e *issuerproto.RecordedEffect, now time.Time) *cellside.Record {
	r := &cellside.Record{
		TransactionID: e.GetTransactionId(), PartnerID: e.GetPartnerId(), FingerprintKeyID: cellside.RecoveredKeyID,
		PaymentType: paymentType(e), Original: e.GetOriginalTransactionId(), CellID: e.GetTerminalId(), Attempt: 1,
		CreatedAt: e.GetAppliedAt().AsTime().UTC().Truncate(time.Microsecond), UpdatedAt: now.UTC().Truncate(time.Microsecond),
	}
	if e.GetApproved() {
		r.State, r.AuthCode, r.Amount, r.Currency = cellside.StateApproved, e.GetAuthCode(), e.GetAmountMinorUnits(), e.GetCurrency()
	} else {
		// A decline applied no amount; the request's is what the partner
		// was answered with, and what a replay is compared on (an issuer
		// that does not say leaves it empty: any amount matches).
		r.State, r.DeclineReason = cellside.StateDeclined, e.GetDeclineReason()
		r.Amount, r.Currency = e.GetRequestedAmountMinorUnits(), e.GetRequestedCurrency()
	}
	return r
}

// CaughtUp is record r, which Compare found Behind effect e, brought to
// the issuer's outcome: final, with its authorization code or decline
// reason, updated now; everything else (its payload, its fingerprint) is
// the record's. It is pure.
func CaughtUp(e *issuerproto.RecordedEffect, r *cellside.Record, now time.Time) *cellside.Record {
	out := *r
	out.UpdatedAt = now.UTC().Truncate(time.Microsecond)
	if e.GetApproved() {
		out.State, out.AuthCode, out.DeclineReason = cellside.StateApproved, e.GetAuthCode(), ""
	} else {
		out.State, out.AuthCode, out.DeclineReason = cellside.StateDeclined, "", e.GetDeclineReason()
	}
	return &out
}

// paymentType is the payment type of the transaction e is the effect of.
func paymentType(e *issuerproto.RecordedEffect) cellpayv1.PaymentType {
	switch e.GetKind() {
	case issuerproto.AdjustKind_ADJUST_KIND_CAPTURE:
		return cellpayv1.PaymentType_CAPTURE
	case issuerproto.AdjustKind_ADJUST_KIND_VOID:
		return cellpayv1.PaymentType_VOID
	case issuerproto.AdjustKind_ADJUST_KIND_REFUND:
		return cellpayv1.PaymentType_REFUND
	}
	switch {
	case e.GetRefund():
		return cellpayv1.PaymentType_CARD_REFUND
	case e.GetBankTransfer():
		return cellpayv1.PaymentType_BANK_TRANSFER
	}
	return cellpayv1.PaymentType_CARD_AUTHORIZATION
}

func describeEffect(e *issuerproto.RecordedEffect) string {
	what := paymentType(e).String()
	if o := e.GetOriginalTransactionId(); o != "" {
		what += " of " + o
	}
	if !e.GetApproved() {
		return fmt.Sprintf("declined %s: %s", what, e.GetDeclineReason())
	}
	return fmt.Sprintf("approved %s, %d %s, auth %s", what, e.GetAmountMinorUnits(), e.GetCurrency(), e.GetAuthCode())
}

func describeRecord(r *cellside.Record) string {
	what := r.PaymentType.String()
	if r.Original != "" {
		what += " of " + r.Original
	}
	switch r.State {
	case cellside.StateApproved:
		return fmt.Sprintf("approved %s, %d %s, auth %s", what, r.Amount, r.Currency, r.AuthCode)
	case cellside.StateDeclined, cellside.StateFailed:
		return fmt.Sprintf("%s %s: %s", r.State, what, r.DeclineReason)
	}
	return fmt.Sprintf("%s %s", r.State, what)
}

// Issuer is the issuer's record; issuerproto.IssuerClient implements it.
type Issuer interface {
	ListEffects(ctx context.Context, in *issuerproto.ListEffectsRequest, opts ...grpc.CallOption) (*issuerproto.ListEffectsResponse, error)
}

// Records reads the cell's records of keys (at most PageSize) in one
// read: a key the cell holds no record of is absent from the map. The
// store's GetMany is one.
type Records func(ctx context.Context, keys []idempotency.Key) (map[idempotency.Key]*cellside.Record, error)

// Owner reads the transaction directory's owner of a transaction: "" when
// it has no entry.
type Owner func(ctx context.Context, k idempotency.Key) (string, error)

// Recorder records what the issuer applied where the cell lost it; the
// store is one. Each reports whether it wrote.
type Recorder interface {
	// Recover writes a recovered record (Recovered) unless the cell holds
	// one of its key by then.
	Recover(ctx context.Context, r *cellside.Record) (bool, error)
	// CatchUp writes r (CaughtUp) over the cell's record of its key if
	// that is still in state from.
	CatchUp(ctx context.Context, r *cellside.Record, from cellside.State) (bool, error)
}

// Bounds of one Check.
const (
	// PageSize is the issuer's page Check asks for.
	PageSize = 500
	// MaxPages bounds the pages one Check reads: a window holding more
	// effects than that is reported Truncated, and the caller narrows it.
	MaxPages = 200
	// MaxFindings is how many findings a Report keeps (it counts them all).
	MaxFindings = 100
)

// Report is what one Check found.
type Report struct {
	From, To time.Time
	Checked  int          // effects compared
	Counts   map[Kind]int // by kind, Agrees included
	Findings []Finding    // the first MaxFindings that do not agree
	// Truncated says the window held more than MaxPages pages: the
	// effects after them were not compared.
	Truncated bool
	// Recovered counts the Missing and Behind effects recorded from the
	// issuer's record by this check.
	Recovered int
}

// Discrepancies is the number of effects Missing, Behind or Differs.
func (r Report) Discrepancies() int { return r.Counts[Missing] + r.Counts[Behind] + r.Counts[Differs] }

// Unrecovered is the number of Missing and Behind effects the check did
// not record: what is left for a person.
func (r Report) Unrecovered() int { return r.Counts[Missing] + r.Counts[Behind] - r.Recovered }

// Check compares every effect the issuer applied for terminal in [from,
// to) of the issuer's clock with the cell's records. With recorder, each
// Missing effect is recorded from the issuer's record (Recovered), and
// each Behind record brought to the issuer's outcome (CaughtUp), as it is
// found: the issuer's record lists an original before its follow-ups, so
// an original lost with its capture is recovered first and the capture's
// sums land on it. Unresolved and Differs are never written: the
// reconciler resolves the first by inquiry, and the second is for a
// person.
//
// With owner, an abandoned record where the issuer applied the effect
// (Differs by Compare alone) is asked of the directory: Elsewhere when
// the directory names another cell its owner (a released cell's record,
// another cell holding the transaction); Behind when it names this cell
// and the record is a payment's (its commits past abandoned lost: this
// cell abandons a received record at its start, and a copy behind holds
// received what the lost primary had taken on, so a record abandoned
// under this cell's own entry where the issuer applied it for this cell
// is one the copy held short of its outcome), caught up with the rest.
func Check(ctx context.Context, issuer Issuer, records Records, recorder Recorder, owner Owner, terminal string, from, to time.Time) (Report, error) {
	if terminal == "" {
		return Report{}, errors.New("issuercheck: terminal is required")
	}
	rep := Report{From: from, To: to, Counts: map[Kind]int{}}
	req := &issuerproto.ListEffectsRequest{From: timestamppb.New(from), To: timestamppb.New(to), TerminalId: terminal, PageSize: PageSize}
	for page := 0; ; page++ {
		if page == MaxPages {
			rep.Truncated = true
			return rep, nil
		}
		resp, err := issuer.ListEffects(ctx, req)
		if err != nil {
			return rep, fmt.Errorf("issuercheck: the issuer's effects: %w", err)
		}
		effects := resp.GetEffects()
		if len(effects) > PageSize {
			return rep, fmt.Errorf("issuercheck: the issuer answered a page of %d effects, asked for %d", len(effects), PageSize)
		}
		keys := make([]idempotency.Key, len(effects))
		for i, e := range effects {
			keys[i] = idempotency.Key{PartnerID: e.GetPartnerId(), TransactionID: e.GetTransactionId()}
		}
		held, err := records(ctx, keys)
		if err != nil {
			return rep, fmt.Errorf("issuercheck: the cell's records: %w", err)
		}
		for i, e := range effects {
			k, r := keys[i], held[keys[i]]
			f := Compare(e, r)
			if f.Kind == Differs && r.State == cellside.StateAbandoned && owner != nil {
				o, err := owner(ctx, k)
				if err != nil {
					return rep, fmt.Errorf("issuercheck: the directory's owner of %s/%s: %w", k.PartnerID, k.TransactionID, err)
				}
				switch {
				case o != "" && o != terminal:
					f.Kind, f.Cell = Elsewhere, f.Cell+"; held by "+o
				case o == terminal && r.Original == "":
					f.Kind = Behind
				}
			}
			if (f.Kind == Missing || f.Kind == Behind) && recorder != nil {
				var ok bool
				if f.Kind == Missing {
					ok, err = recorder.Recover(ctx, Recovered(e, time.Now()))
				} else {
					ok, err = recorder.CatchUp(ctx, CaughtUp(e, r, time.Now()), r.State)
				}
				if err != nil {
					return rep, fmt.Errorf("issuercheck: recovering %s/%s: %w", k.PartnerID, k.TransactionID, err)
				}
				f.Recovered = ok
				if ok {
					rep.Recovered++
					f.Cell += "; recorded from the issuer's record"
				}
			}
			rep.Checked++
			rep.Counts[f.Kind]++
			if f.Kind != Agrees && len(rep.Findings) < MaxFindings {
				rep.Findings = append(rep.Findings, f)
			}
		}
		if resp.GetNextPageToken() == "" {
			return rep, nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

// DefaultEvery is how often a Watcher checks by default.
const DefaultEvery = 5 * time.Minute

// WatchConfig configures a Watcher.
type WatchConfig struct {
	Issuer   Issuer
	Records  Records
	Terminal string // the cell's ID
	// Every is the time between checks [DefaultEvery]; each checks the
	// window of Lookback [2 × Every] up to its start, so that windows
	// overlap and an effect recorded late at the issuer is not skipped. A
	// routine check thus sees an effect for about Lookback after the
	// issuer applied it: a record lost later (a database restored from a
	// copy) is seen only by a check reaching back before the copy's point.
	Every, Lookback time.Duration
	// Recorder, when set, records each Missing effect from the issuer's
	// record (Check); nil only reports.
	Recorder Recorder
	// Owner, when set, reads the directory's owner of an abandoned
	// record's transaction (Check); nil without a directory.
	Owner Owner
	Log   *slog.Logger
	Now   func() time.Time // [time.Now]
}

// Watcher runs Check on a schedule, logs every finding that is a
// discrepancy, and keeps the last report for the metrics. The cell runs
// one, on its leading instance.
type Watcher struct {
	cfg  WatchConfig
	mu   sync.Mutex
	last Report
	at   time.Time // when last was taken; zero before the first
}

// NewWatcher returns a Watcher for cfg.
func NewWatcher(cfg WatchConfig) (*Watcher, error) {
	if cfg.Issuer == nil || cfg.Records == nil || cfg.Terminal == "" || cfg.Log == nil {
		return nil, errors.New("issuercheck: Issuer, Records, Terminal and Log are required")
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.Lookback <= 0 {
		cfg.Lookback = 2 * cfg.Every
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Watcher{cfg: cfg}, nil
}

// Run checks every Every until ctx ends, the first at once. When it
// returns (the instance stopped leading), Last is false again: an
// instance that no longer checks exports no finding.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(w.cfg.Every)
	defer t.Stop()
	defer func() {
		w.mu.Lock()
		w.last, w.at = Report{}, time.Time{}
		w.mu.Unlock()
	}()
	for {
		if _, err := w.Once(ctx); err != nil && ctx.Err() == nil {
			w.cfg.Log.Warn("checking the issuer's record of its effects failed; next check in "+w.cfg.Every.String(), "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once checks the window of Lookback up to now, logs what does not agree
// and keeps the report.
func (w *Watcher) Once(ctx context.Context) (Report, error) {
	now := w.cfg.Now()
	rep, err := Check(ctx, w.cfg.Issuer, w.cfg.Records, w.cfg.Recorder, w.cfg.Owner, w.cfg.Terminal, now.Add(-w.cfg.Lookback), now)
	if err != nil {
		return rep, err
	}
	for _, f := range rep.Findings {
		if f.Kind == Unresolved || f.Kind == Elsewhere {
			continue // the reconciler's, or held by another cell
		}
		if f.Recovered {
			w.cfg.Log.Warn("recorded a transaction the issuer applied and this cell had lost, from the issuer's record",
				"partner_id", f.Key.PartnerID, "transaction_id", f.Key.TransactionID, "issuer", f.Issuer)
			continue
		}
		w.cfg.Log.Error("the issuer applied a transaction this cell does not hold as applied",
			"finding", f.Kind.String(), "partner_id", f.Key.PartnerID, "transaction_id", f.Key.TransactionID,
			"issuer", f.Issuer, "cell", f.Cell)
	}
	if rep.Truncated {
		w.cfg.Log.Warn("the issuer's record of the window is longer than one check reads; shorten the check's interval",
			"checked", rep.Checked, "lookback", w.cfg.Lookback)
	}
	w.mu.Lock()
	w.last, w.at = rep, now
	w.mu.Unlock()
	return rep, nil
}

// Last is the last report and when it was taken; false before the first.
func (w *Watcher) Last() (Report, time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.at, !w.at.IsZero()
}
