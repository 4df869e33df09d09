// Package cellside decides what a cell does with one transaction. It is a
// deterministic state machine with no I/O: the driver (the cell's gRPC
// server) asks it for an Action, performs it against Postgres, the GTR stream
// or the issuer, and feeds the outcome back as an Event. The clock is passed
// in, so every path can be tested, and replayed as a transcript, without a
// database.
//
// The one rule it exists to keep: nothing is sent to the issuer until the
// cell has durably recorded that it is about to send (StateSending) and has
// told the GTR (EmitPNR). Before that point every failure ends in Reroute,
// and the GTR may restart the transaction elsewhere; after it, the
// transaction belongs to this cell and failures end in PENDING, never in a
// resend.
//
// It lives under internal/, not cmd/cell/internal, so that a model of the
// protocol (internal/dev/model) can drive it beside the GTR's half,
// internal/pnr/gtrside; only the cell performs its actions.
package cellside

import (
	"errors"
	"fmt"
	"time"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/internal/validate"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// ErrInProgress means another attempt at the same transaction (partner and
// transaction ID) holds it in this cell and has not passed the point of no
// return; the caller may retry.
var ErrInProgress = errors.New("cellside: transaction in progress in this cell")

// RefData is the reference data the machine prices and classifies with.
// *refdata.Snapshot implements it.
type RefData interface {
	// Version names the data, recorded on every transaction.
	Version() string
	// SettlementCurrency is the currency a partner settles in.
	SettlementCurrency(partner string) string
	// Convert converts minor units between currencies, or fails with
	// refdata.ErrNoRate.
	Convert(minor int64, from, to string) (int64, error)
	// MCC classifies a merchant category code; false when unknown.
	MCC(code string) (refdata.MCC, bool)
	// Blocked reports whether transactions in an MCC category are declined
	// outright.
	Blocked(category string) bool
}

// Policy holds the cell's risk limits. Amounts are in minor units of
// LimitCurrency.
type Policy struct {
	LimitCurrency string
	// MaxAmount is the largest single transaction per MCC risk class.
	MaxAmount map[string]int64
	// Per card, over VelocityWindow, including this transaction: at most
	// VelocityMaxCount transactions and VelocityMaxAmount in total.
	VelocityWindow    time.Duration
	VelocityMaxCount  int64
	VelocityMaxAmount int64
}

// Input is what the cell knows about one attempt when it starts.
type Input struct {
	Request *cellpayv1.SubmitTransactionRequest
	// Fingerprint is the request's under the current fingerprint key,
	// named FingerprintKeyID.
	Fingerprint      idempotency.Fingerprint
	FingerprintKeyID string
	// FingerprintUnder returns the request's fingerprint under the key
	// named keyID, false when the cell no longer has that key: a record or
	// entry written under an earlier key is compared under its own. It
	// must be a pure function of keyID (a keyed hash, no I/O); nil means
	// the cell has no key but the current one.
	FingerprintUnder func(keyID string) (idempotency.Fingerprint, bool)
	MaskedPAN        string
	// PANHash is the card's hash under the current PAN key, named
	// PANHashKeyID; OtherPANHashes, its hashes under the cell's other keys,
	// which velocity counts too.
	PANHash        []byte
	PANHashKeyID   string
	OtherPANHashes []card.KeyedHash
	Attempt        int32
	RouteRule      string
	CellID         string
	// LastResort: the GTR has no other cell to try (see Existing).
	LastResort bool
	// Directory: the cell claims transactions in the transaction directory
	// (see Claim) before it writes anything; without it the machine decides
	// from the cell's own records alone.
	Directory bool
	// Call names the GTR call the attempt belongs to, unique per call.
	Call string
	// Home: this cell is the transaction's natural home, the only cell
	// that may take it without a claim while the directory is unavailable.
	Home bool
}

type phase uint8

const (
	phaseStart phase = iota
	phaseClaim
	phaseInsert
	phaseRisk
	phaseMarkSending
	phaseEmitPNR
	phaseAuthorize
	phaseFinish
	phaseRevert
	phaseDeciding
	phaseDone
)

var phaseNames = [...]string{"start", "claim", "insert", "risk", "mark-sending", "emit-pnr", "authorize", "finish", "revert", "deciding", "done"}

func (p phase) String() string { return phaseNames[p] }

// Machine runs one attempt at one transaction. It is not safe for concurrent
// use; a driver owns it for the attempt's life.
type Machine struct {
	in     Input
	policy Policy
	ref    RefData
	now    func() time.Time

	phase phase
	rec   *Record
	// decided is the outcome settled before the point of no return (a
	// decline or failure from enrichment or risk), if any.
	decided   State
	reason    string
	riskClass string
	// claim is the transaction's directory entry as this attempt last
	// read or wrote it, when it is this cell's; nil while the attempt holds
	// none. unclaimed: the attempt went on without one (the directory was
	// unavailable at the transaction's natural home). next is what follows
	// the claim step in progress; pending, the record a pinned PENDING
	// answers with; waited: the attempt waited on a concurrent one, so the
	// entry it read is stale.
	claim     *Entry
	final     Entry // the outcome's entry being written (thenDecide)
	claims    int
	unclaimed bool
	// adopted: the attempt took over a released entry (thenAdopt) and
	// records the transaction as sent. reclaimed: the attempt restarts an
	// abandoned record (Reclaim), so the entry it read before may have
	// moved on since.
	adopted, reclaimed bool
	next               afterClaimStep
	pending            *Record
	waited             bool
}

// afterClaimStep is what an attempt does once a claim step made the entry
// what it needs.
type afterClaimStep uint8

const (
	// thenInsert: the first claim; the entry is this cell's (new or not).
	thenInsert afterClaimStep = iota
	// thenGoOn: the record was inserted under an entry of another attempt
	// of this cell; the entry is now this attempt's: go on to risk.
	thenGoOn
	// thenPin: the entry is pinned, and the sending record answers
	// PENDING.
	thenPin
	// thenAdopt: the entry of a cell declared lost is taken over, pinned:
	// the record is inserted as sent (its outcome unknown) and answers
	// PENDING, and the reconciler resolves it by inquiry.
	thenAdopt
	// thenDecide: the entry now holds the outcome decided before the
	// point of no return (a decline of the cell's own): record it.
	thenDecide
)

// maxClaims bounds the claim steps of one attempt (a claim, takeovers lost
// to other cells' races, and the entry made final with a decision taken
// before the point of no return).
const maxClaims = 5

// New returns a machine for one attempt. now is its clock.
func New(in Input, policy Policy, ref RefData, now func() time.Time) *Machine {
	return &Machine{in: in, policy: policy, ref: ref, now: now}
}

// Record is the machine's current view of the transaction's record; nil
// before it is built.
func (m *Machine) Record() *Record { return m.rec }

// Start validates and enriches the request and returns the first action.
func (m *Machine) Start() Action {
	if m.phase != phaseStart {
		return m.internal(fmt.Errorf("Start called in phase %v", m.phase))
	}
	now := m.clock()
	if err := validate.Request(m.in.Request, now); err != nil {
		m.phase = phaseDone
		return Reject{Err: err}
	}
	m.rec = m.newRecord(now)
	m.enrich()
	if m.in.Directory {
		return m.claimEntry(0, thenInsert)
	}
	m.phase = phaseInsert
	return Insert{Record: m.rec}
}

// Claimed returns the directory entry the attempt holds, if any.
func (m *Machine) Claimed() (Entry, bool) {
	if m.claim == nil {
		return Entry{}, false
	}
	return *m.claim, true
}

// Unclaimed reports whether the attempt went on without a directory claim.
func (m *Machine) Unclaimed() bool { return m.unclaimed }

// claimEntry writes the directory entry for this attempt, next to follow:
// a Create, or when rev is set an Update of the entry read at rev (a
// takeover, or this cell's entry taken for this attempt).
func (m *Machine) claimEntry(rev uint64, next afterClaimStep) Action {
	return m.claimAs(rev, next, Entry{
		Owner: m.in.CellID, Call: m.in.Call, Attempt: m.in.Attempt, Fingerprint: m.in.Fingerprint,
		FingerprintKeyID: m.in.FingerprintKeyID, State: EntryOwned,
	})
}

func (m *Machine) claimAs(rev uint64, next afterClaimStep, e Entry) Action {
	m.claims++
	if m.claims > maxClaims {
		return m.giveUp(Reject{Err: ErrInProgress})
	}
	m.phase, m.next = phaseClaim, next
	return Claim{Key: m.rec.Key(), Revision: rev, Entry: e}
}

// pin writes this cell's entry e back pinned: the sending record about to
// answer PENDING is a promise that this cell resolves it, so a later
// attempt of the entry's call must no longer take it over.
func (m *Machine) pin(e Entry) Action {
	p := e
	p.State, p.Pinned, p.Answer = EntryOwned, true, nil
	return m.claimAs(e.Revision, thenPin, p)
}

// giveUp ends the attempt with a; a record this attempt inserted and still
// holds in state received steps back to abandoned first.
func (m *Machine) giveUp(a Action) Action {
	if (m.next == thenGoOn || m.next == thenDecide) && (m.rec.State == StateReceived || m.rec.State == StateDeciding) {
		from := m.rec.State
		m.phase = phaseRevert
		m.reason = "transaction directory: the entry went to another attempt"
		m.rec.State, m.rec.DeclineReason = StateAbandoned, ""
		m.rec.UpdatedAt = m.clock()
		return Persist{Record: m.rec, From: from}
	}
	m.phase = phaseDone
	return a
}

// afterClaim applies the directory's rules (docs/design/transaction-directory.md):
// a cell decides a transaction only while it owns its entry.
func (m *Machine) afterClaim(ev Event) Action {
	switch ev := ev.(type) {
	case Claimed:
		e := ev.Entry
		m.claim = &e
		if err := m.checkPayload(e.FingerprintKeyID, e.Fingerprint); err != nil {
			// This cell's entry names another first payload: one of its
			// attempts claimed it and may have been lost before its record
			// was written (a crash between the claim and the insert), while
			// the payload was decided in the cell it was taken over from.
			// The entry's payload is the transaction's, as a record's is.
			return m.giveUp(Reject{Err: err})
		}
		switch m.next {
		case thenAdopt:
			m.adopted = true
			m.rec.State = StateSending
			m.phase = phaseInsert
			return Insert{Record: m.rec}
		case thenInsert:
			if e.State == EntryFinal {
				// This cell's answer is in the entry: it is the answer,
				// whatever the record says by now (a decision recorded in
				// the directory first, its record's write lost with a
				// crash, is never decided again).
				return m.giveUp(ReplyEntry{Entry: e})
			}
			if e.State == EntryAbandoned {
				// This cell stopped it before its point of no return: take
				// the entry for this attempt before anything else, so that
				// no other cell takes it over meanwhile.
				return m.claimEntry(e.Revision, thenInsert)
			}
			m.phase = phaseInsert
			return Insert{Record: m.rec}
		case thenPin:
			if !e.Pinned && e.State != EntryFinal {
				return m.pin(e)
			}
			m.phase = phaseDone
			return Reply{Record: m.pending}
		case thenDecide:
			if e.State != EntryFinal || !e.SameAttempt(m.in.Call, m.in.Attempt) {
				// Another attempt of this cell's holds it: not this one's
				// to decide.
				return m.giveUp(Reroute{Reason: "transaction directory: the entry went to another attempt", CellHealthy: true})
			}
			m.claim = &e
			return m.persistDecided(StateDeciding)
		}
		if !e.SameAttempt(m.in.Call, m.in.Attempt) {
			if e.State == EntryFinal {
				return m.giveUp(Reject{Err: ErrInProgress})
			}
			return m.claimEntry(e.Revision, m.next)
		}
		return m.checkRisk()
	case Held:
		e := ev.Entry
		switch {
		case m.checkPayload(e.FingerprintKeyID, e.Fingerprint) != nil:
			return m.giveUp(Reject{Err: idempotency.ErrConflict})
		case e.State == EntryFinal:
			return m.giveUp(ReplyEntry{Entry: e})
		case e.Released && e.State != EntryFinal && m.next == thenInsert:
			// Its owner was declared lost and may have sent it: take it
			// over pinned, and resolve it by inquiry, never decide it
			// again (no risk check, no authorization).
			return m.claimAs(e.Revision, thenAdopt, Entry{
				Owner: m.in.CellID, Call: m.in.Call, Attempt: m.in.Attempt, Fingerprint: m.in.Fingerprint,
				FingerprintKeyID: m.in.FingerprintKeyID, State: EntryOwned, Pinned: true,
			})
		case e.MayTakeOver(m.in.Call, m.in.Attempt) && m.next != thenGoOn:
			// With thenPin, this cell's sending record answers PENDING
			// under the new claim, pinned.
			return m.claimEntry(e.Revision, m.next)
		}
		return m.giveUp(Reroute{Reason: "owned by cell " + e.Owner, CellHealthy: true, Owner: e.Owner})
	case ClaimFailed:
		if m.next == thenDecide {
			if !ev.Outage && m.claims < maxClaims {
				// One slow write is no outage: the outcome's entry is
				// written again at the revision read (one that landed
				// reads back as this attempt's final entry). Recorded in
				// the cell alone, the entry left owned, a later attempt
				// of the call could take it over and decide again
				// (internal/dev/model, seed 4428 with a slow claim).
				return m.claimAs(m.claim.Revision, thenDecide, m.final)
			}
			// The directory is unavailable: the decision is recorded in
			// the cell alone, as at a natural home through an outage (the
			// design note's remaining window).
			return m.persistDecided(StateDeciding)
		}
		if m.next == thenInsert && m.claims == 1 && !ev.Outage {
			// One slow claim, no outage: asked once more (a claim that
			// landed reads back as this cell's entry, which the rules
			// above judge), rather than re-routed on one slow answer.
			return m.claimEntry(0, thenInsert)
		}
		if m.in.Home && m.claims <= 2 && ev.Outage {
			// Payments go on at home through a directory outage; failover
			// waits for it (see the design note's remaining window). Only
			// through an outage: a claim that was merely slow (a burst, a
			// process resuming from a pause) may hide another cell's
			// claim, made while this one could not answer, and is
			// re-routed like any cell's.
			m.unclaimed = true
			m.rec.Unfiled = true
			m.phase = phaseInsert
			return Insert{Record: m.rec}
		}
		if m.next == thenPin {
			return m.giveUp(Reject{Err: ErrInProgress})
		}
		return m.giveUp(Reroute{Reason: "transaction directory unavailable: " + ev.Err.Error(), CellHealthy: true})
	}
	return m.unexpected(ev)
}

func (m *Machine) newRecord(now time.Time) *Record {
	r := m.in.Request
	return &Record{
		TransactionID:    r.GetTransactionId(),
		Fingerprint:      m.in.Fingerprint,
		FingerprintKeyID: m.in.FingerprintKeyID,
		State:            StateReceived,
		PaymentType:      r.GetPaymentType(),
		PartnerID:        r.GetPartnerId(),
		Market:           r.GetMarket(),
		Amount:           r.GetAmount().GetMinorUnits(),
		Currency:         r.GetAmount().GetCurrency(),
		MerchantID:       r.GetMerchant().GetId(),
		MCC:              r.GetMerchant().GetMcc(),
		MerchantCountry:  r.GetMerchant().GetCountry(),
		MaskedPAN:        m.in.MaskedPAN,
		PANHash:          m.in.PANHash,
		PANHashKeyID:     m.in.PANHashKeyID,
		RefdataVersion:   m.ref.Version(),
		RouteRule:        m.in.RouteRule,
		Attempt:          m.in.Attempt,
		CellID:           m.in.CellID,
		CreatedAt:        now,
		UpdatedAt:        now,
	}
}

// enrich classifies the merchant and converts the amount into the partner's
// settlement currency and the policy's limit currency. A problem here is a
// business outcome, decided now and recorded after the insert.
func (m *Machine) enrich() {
	rec := m.rec
	mcc, ok := m.ref.MCC(rec.MCC)
	if !ok {
		m.decide("unsupported_mcc")
		return
	}
	m.riskClass = mcc.Risk
	if m.ref.Blocked(mcc.Category) {
		m.decide("blocked_category")
		return
	}
	rec.SettlementCurrency = m.ref.SettlementCurrency(rec.PartnerID)
	amt, err := m.ref.Convert(rec.Amount, rec.Currency, rec.SettlementCurrency)
	if err != nil {
		m.decide(ReasonNoFXRate)
		return
	}
	rec.SettlementAmount = amt
	if rec.RiskAmount, err = m.ref.Convert(rec.Amount, rec.Currency, m.policy.LimitCurrency); err != nil {
		m.decide(ReasonNoFXRate)
	}
}

// clock reads the time at the precision the store keeps (Postgres
// timestamptz: microseconds), so that an answer and a later read of its
// record are identical.
func (m *Machine) clock() time.Time { return m.now().UTC().Truncate(time.Microsecond) }

// decide settles the outcome for reason before the PNR (the first reason
// stands); its state is DecisionState's.
func (m *Machine) decide(reason string) {
	if m.decided == "" {
		m.decided, m.reason = DecisionState(reason), reason
	}
}

// Step feeds the outcome of the last action and returns the next one.
func (m *Machine) Step(ev Event) Action {
	switch m.phase {
	case phaseClaim:
		return m.afterClaim(ev)
	case phaseInsert:
		return m.afterInsert(ev)
	case phaseRisk:
		return m.afterRisk(ev)
	case phaseMarkSending:
		return m.afterMarkSending(ev)
	case phaseDeciding:
		return m.afterDeciding(ev)
	case phaseEmitPNR:
		switch ev := ev.(type) {
		case PNRConfirmed:
			m.phase = phaseAuthorize
			return Authorize{Request: m.in.Request, Record: m.rec}
		case PNRRefused:
			// The GTR may be restarting the transaction elsewhere. Nothing
			// was sent: step back from the point of no return.
			m.phase = phaseRevert
			m.reason = "point of no return not confirmed: " + ev.Err.Error()
			m.rec.State = StateAbandoned
			m.rec.UpdatedAt = m.clock()
			return Persist{Record: m.rec, From: StateSending}
		}
		return m.unexpected(ev)
	case phaseRevert:
		switch ev.(type) {
		case Persisted, StoreFailed:
			// On a store failure the record stays where it is (the driver
			// tries the step back again for a while), and a record left in
			// sending is the reconciler's, resolved by inquiry: nothing
			// reached the issuer from this cell.
			m.phase = phaseDone
			return Reroute{Reason: m.reason}
		}
		return m.unexpected(ev)
	case phaseAuthorize:
		return m.afterAuthorize(ev)
	case phaseFinish:
		return m.afterFinish(ev)
	}
	return m.unexpected(ev)
}

func (m *Machine) afterInsert(ev Event) Action {
	switch ev := ev.(type) {
	case Inserted:
		if m.adopted {
			// Recorded as sent: PENDING, the reconciler's to resolve.
			m.phase = phaseDone
			return Reply{Record: m.rec}
		}
		if m.claim != nil && (m.reclaimed || !m.claim.SameAttempt(m.in.Call, m.in.Attempt)) {
			// Recorded under this cell's entry of another attempt (one
			// gone): take the entry for this one before going on. A
			// reclaim takes it again even when it was this attempt's: the
			// record was abandoned meanwhile (another attempt here took
			// the entry, stepped back, and another cell may have taken it
			// over), and only a write at the revision this attempt read
			// shows nothing moved (the simulator, seed 49159).
			return m.claimEntry(m.claim.Revision, thenGoOn)
		}
		return m.checkRisk()
	case Existing:
		if m.waited && m.claim != nil {
			// The entry read before the wait is stale: it may have been
			// abandoned and taken over meanwhile. Claim again.
			m.waited = false
			return m.claimEntry(0, thenInsert)
		}
		return m.existing(ev.Record, ev.Active)
	case StoreFailed:
		m.phase = phaseDone
		if errors.Is(ev.Err, ErrInProgress) {
			// Another attempt here may yet pass its PNR: re-routing this one
			// could start a second copy elsewhere. The caller retries.
			return Reject{Err: ErrInProgress}
		}
		return Reroute{Reason: "store: " + ev.Err.Error()}
	}
	return m.unexpected(ev)
}

// existing applies the idempotency rules to a record this cell already has.
func (m *Machine) existing(prev *Record, active bool) Action {
	if prev.Key() != m.rec.Key() {
		// Another partner's transaction with the same ID is another
		// transaction: a driver that offers it as this one's record has
		// mixed two namespaces, and no rule below may apply to it.
		return m.internal(fmt.Errorf("existing record %s is not the transaction %s", prev.Key(), m.rec.Key()))
	}
	if prev.Recovered() && !MatchesRecovered(prev, m.in.Request) {
		m.phase = phaseDone
		return Reject{Err: idempotency.ErrConflict}
	}
	if err := m.checkPayload(prev.FingerprintKeyID, prev.Fingerprint); !prev.Recovered() && err != nil {
		m.phase = phaseDone
		return Reject{Err: err}
	}
	switch {
	case prev.State == StateSending && active:
		// Another attempt here is between its durable sending state and
		// the GTR's confirmation: it may yet step back to abandoned, and a
		// PENDING answer now might never resolve. Wait for it.
		m.waited = true
		return Wait{Key: prev.Key()}
	case prev.State == StateSending && m.claim != nil && !m.claim.Pinned && m.claim.State != EntryFinal:
		// PENDING from a record no attempt here works on promises that
		// this cell resolves it: pin the entry first.
		m.rec, m.pending = prev, prev
		return m.pin(*m.claim)
	case prev.State.Terminal(), prev.State == StateSending:
		m.phase = phaseDone
		m.rec = prev
		return Reply{Record: prev}
	case prev.State == StateAbandoned && m.claim != nil && m.claim.SameAttempt(m.in.Call, m.in.Attempt):
		// The directory entry is this attempt's: no other cell completed
		// the transaction (it would own the entry), so restart it here.
		m.reclaimed = true
		return Reclaim{Record: m.rec}
	case prev.State == StateAbandoned && m.claim != nil:
		// The entry is this cell's, of another attempt. The record decides
		// which attempt here restarts it: reclaim first (only one attempt
		// wins the conditional write), then take the entry for the winner
		// (afterInsert's Inserted). Claiming first let a loser take the
		// entry from the winner while the winner's write was in flight,
		// and the winner went on to the issuer under an entry naming
		// another call (TestClaimWriteWindow).
		m.reclaimed = true
		return Reclaim{Record: m.rec}
	case prev.State == StateAbandoned && !m.in.LastResort:
		// An attempt here stopped before its point of no return; the GTR
		// may have completed the transaction on another cell since. Send it
		// on along its ranking, where a completed copy answers as a replay.
		m.phase = phaseDone
		return Reroute{Reason: "abandoned in this cell before its point of no return", CellHealthy: true}
	case prev.State == StateAbandoned:
		// Restart, not resume: the earlier attempt never reached the issuer,
		// so this attempt starts over from the request as if new.
		return Reclaim{Record: m.rec}
	default:
		m.waited = true
		return Wait{Key: prev.Key()}
	}
}

// checkPayload applies the conflict rule to a first payload fingerprinted
// under keyID: the request is compared under the same key. A key the cell
// no longer has cannot show the payloads equal, so it is a conflict: a
// recorded answer is never given to a payload not shown to be the same.
func (m *Machine) checkPayload(keyID string, first idempotency.Fingerprint) error {
	fp := m.in.Fingerprint
	if keyID != m.in.FingerprintKeyID {
		var ok bool
		if m.in.FingerprintUnder != nil {
			fp, ok = m.in.FingerprintUnder(keyID)
		}
		if !ok {
			return idempotency.ErrConflict
		}
	}
	return idempotency.Check(first, fp)
}

func (m *Machine) checkRisk() Action {
	if m.decided != "" {
		return m.finishBeforePNR()
	}
	if max, ok := m.policy.MaxAmount[m.riskClass]; ok && m.rec.RiskAmount > max {
		m.decide("amount_limit")
		return m.finishBeforePNR()
	}
	if m.in.Request.GetPaymentType() != cellpayv1.PaymentType_CARD_AUTHORIZATION || len(m.in.PANHash) == 0 {
		return m.markSending()
	}
	m.phase = phaseRisk
	return CheckVelocity{
		PANHashes: append([]card.KeyedHash{{KeyID: m.in.PANHashKeyID, Sum: m.in.PANHash}}, m.in.OtherPANHashes...),
		Since:     m.rec.CreatedAt.Add(-m.policy.VelocityWindow),
		Exclude:   m.rec.Key(),
	}
}

func (m *Machine) afterRisk(ev Event) Action {
	switch ev := ev.(type) {
	case Velocity:
		switch {
		case m.policy.VelocityMaxCount > 0 && ev.Count+1 > m.policy.VelocityMaxCount:
			m.decide("velocity_limit")
		case m.policy.VelocityMaxAmount > 0 && ev.Amount+m.rec.RiskAmount > m.policy.VelocityMaxAmount:
			m.decide("velocity_amount_limit")
		default:
			return m.markSending()
		}
		return m.finishBeforePNR()
	case StoreFailed:
		// The record this attempt wrote steps back to abandoned before the
		// re-route: left in received, it would hold every duplicate of a
		// live instance in its wait until a restart abandoned it.
		m.phase = phaseRevert
		m.reason = "store: " + ev.Err.Error()
		m.rec.State = StateAbandoned
		m.rec.UpdatedAt = m.clock()
		return Persist{Record: m.rec, From: StateReceived}
	}
	return m.unexpected(ev)
}

// finishBeforePNR records an outcome decided without the issuer. With a
// directory claim, the outcome goes into the entry before the record is
// final: the GTR re-routes an attempt whose stream broke before the PNR,
// and a later attempt of the same call may take an unfinished entry over,
// so a decision this cell recorded and did not get to answer would
// otherwise meet another cell's, decided again (another decline, or an
// approval: velocity is counted per cell), two final outcomes for one ID,
// each with its callback. The simulator found it (internal/dev/model).
// The decision is durable here first (StateDeciding), so that a crash
// between the entry's write and the record's leaves the reconciler a row
// to settle by the entry.
func (m *Machine) finishBeforePNR() Action {
	if m.claim != nil && m.claim.SameAttempt(m.in.Call, m.in.Attempt) && m.claim.State != EntryFinal {
		m.phase = phaseDeciding
		m.rec.State, m.rec.DeclineReason = StateDeciding, m.reason
		m.rec.UpdatedAt = m.clock()
		return Persist{Record: m.rec, From: StateReceived}
	}
	return m.persistDecided(StateReceived)
}

// afterDeciding: the decision is durable in the cell; into the entry.
func (m *Machine) afterDeciding(ev Event) Action {
	switch ev := ev.(type) {
	case Persisted:
		out := *m.rec
		out.State = m.decided
		e := *m.claim
		e.State, e.Pinned, e.Answer = EntryFinal, false, out.Transaction()
		m.final = e
		return m.claimAs(m.claim.Revision, thenDecide, e)
	case StoreFailed:
		// Not written (or not known to be): the record steps back from
		// either state, and the attempt re-routes, as a risk check whose
		// store failed does.
		m.phase = phaseRevert
		m.reason = "store: " + ev.Err.Error()
		m.rec.State, m.rec.DeclineReason = StateAbandoned, ""
		m.rec.UpdatedAt = m.clock()
		return Persist{Record: m.rec, From: StateDeciding, OrFrom: StateReceived}
	}
	return m.unexpected(ev)
}

// persistDecided persists the outcome decided before the PNR, from the
// record's state from. Decided: the directory's entry holds it.
func (m *Machine) persistDecided(from State) Action {
	m.phase = phaseFinish
	m.rec.State, m.rec.DeclineReason = m.decided, m.reason
	m.rec.UpdatedAt = m.clock()
	return Persist{Record: m.rec, From: from, Decided: m.claim != nil && m.claim.State == EntryFinal}
}

func (m *Machine) markSending() Action {
	m.phase = phaseMarkSending
	m.rec.State = StateSending
	m.rec.UpdatedAt = m.clock()
	return Persist{Record: m.rec, From: StateReceived}
}

func (m *Machine) afterMarkSending(ev Event) Action {
	switch ev := ev.(type) {
	case Persisted:
		m.phase = phaseEmitPNR
		return EmitPNR{Key: m.rec.Key()}
	case StoreFailed:
		// Not known to be at the point of no return, and the issuer has
		// not been called, so the GTR may restart the transaction
		// elsewhere. But the write may have committed all the same (the
		// primary died with the commit on its way, and the promoted
		// standby has it): left in sending, the record would hold the
		// transaction past its point of no return here while another cell
		// completes it. Step back from either state first.
		m.phase = phaseRevert
		m.reason = "store: " + ev.Err.Error()
		m.rec.State = StateAbandoned
		m.rec.UpdatedAt = m.clock()
		return Persist{Record: m.rec, From: StateSending, OrFrom: StateReceived}
	}
	return m.unexpected(ev)
}

func (m *Machine) afterAuthorize(ev Event) Action {
	switch ev := ev.(type) {
	case IssuerAnswered:
		m.phase = phaseFinish
		if ev.Approved {
			m.rec.State, m.rec.AuthCode = StateApproved, ev.AuthCode
		} else {
			m.rec.State, m.rec.DeclineReason = StateDeclined, ev.DeclineReason
		}
		m.rec.UpdatedAt = m.clock()
		return Persist{Record: m.rec, From: StateSending}
	case IssuerUnknown:
		// The issuer may or may not have applied it. Never resend: answer
		// PENDING and leave it to an inquiry by partner and transaction ID.
		m.phase = phaseDone
		return Reply{Record: m.rec}
	}
	return m.unexpected(ev)
}

func (m *Machine) afterFinish(ev Event) Action {
	switch ev := ev.(type) {
	case Persisted:
		m.phase = phaseDone
		return Reply{Record: m.rec}
	case StoreFailed:
		m.phase = phaseDone
		if m.decided == "" {
			// The issuer answered but the outcome is not recorded: the record
			// still says sending, and the answer must equal the record.
			m.rec.State, m.rec.AuthCode, m.rec.DeclineReason = StateSending, "", ""
			return Reply{Record: m.rec}
		}
		return Reroute{Reason: "store: " + ev.Err.Error()}
	}
	return m.unexpected(ev)
}

func (m *Machine) unexpected(ev Event) Action {
	return m.internal(fmt.Errorf("unexpected event %T in phase %v", ev, m.phase))
}

// internal handles a driver bug: before the point of no return the attempt
// is given up as re-routable; after it, the record stands as PENDING.
func (m *Machine) internal(err error) Action {
	past := m.phase == phaseAuthorize || m.phase == phaseEmitPNR ||
		m.phase == phaseFinish && m.decided == ""
	m.phase = phaseDone
	if past {
		m.rec.State = StateSending
		return Reply{Record: m.rec}
	}
	return Reroute{Reason: "cellside: " + err.Error()}
}
