package model

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// The cell's side of the protocol is the real machine,
// cellside.Machine, one per attempt; this file is its driver, as
// cmd/cell/internal/server (perform, claim, settleEntry) is in the cell,
// performing each action against the model's state: the records (db), the
// directory (dir), the message pool (the stream to the GTR, the issuer,
// the best-effort directory updates). An action whose answer comes from
// elsewhere (the GTR's Proceed, the issuer, a concurrent attempt, or one
// that may be overtaken by a cancellation) parks the attempt until its
// message is delivered; the rest are answered at once.

// partner is the model's one partner (see doc.go).
const partner = "p1"

// limit is the policy's largest amount: a payload%3 == 2 asks for more
// (amount_limit, a decline before the PNR).
const limit = 1_000_000

var modelPolicy = cellside.Policy{LimitCurrency: "EUR", MaxAmount: map[string]int64{refdata.RiskLow: limit}}

// modelRef is reference data that prices nothing and classifies every
// merchant as low risk: the model's payloads decide outcomes.
type modelRef struct{}

func (modelRef) Version() string                                 { return "model" }
func (modelRef) SettlementCurrency(string) string                { return "EUR" }
func (modelRef) Convert(minor int64, _, _ string) (int64, error) { return minor, nil }
func (modelRef) MCC(string) (refdata.MCC, bool) {
	return refdata.MCC{Category: "grocery", Risk: refdata.RiskLow}, true
}
func (modelRef) Blocked(string) bool { return false }

// modelTime is every cell's clock: nothing in the machine depends on it
// but the records' timestamps.
var modelTime = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

var fingerprints = idempotency.NewFingerprinter([]byte("model"))

// request is the SubmitTransaction of id with payload p: a card
// authorization (so that an approved one may be captured, voided and
// refunded: followup.go) whose amount decides the risk limit. The machine
// is given no hash of the card (Input.PANHash), so it checks no velocity:
// the model's payloads decide outcomes.
func request(id string, p payload) *cellpayv1.SubmitTransactionRequest {
	return &cellpayv1.SubmitTransactionRequest{
		TransactionId: id,
		PaymentType:   cellpayv1.PaymentType_CARD_AUTHORIZATION,
		PartnerId:     partner,
		Market:        "GB",
		Amount:        &cellpayv1.Money{MinorUnits: amountOf(p), Currency: "EUR"},
		Merchant:      &cellpayv1.Merchant{Id: "m-1", Mcc: "5411", Country: "GB"},
		Card:          &cellpayv1.Card{Pan: "4242424242424242", ExpiryMonth: 12, ExpiryYear: 2030},
	}
}

// amountOf is payload p's amount, in minor units of EUR: 100 to 105, or
// over the policy's limit for p%3 == 2.
func amountOf(p payload) int64 {
	if p%3 == 2 {
		return limit + 1 + int64(p)
	}
	return int64(100 + p)
}

func fingerprint(id string, p payload) idempotency.Fingerprint {
	return fingerprints.Of(request(id, p))
}

// payloadOf is the payload whose fingerprint under id is fp.
func payloadOf(id string, fp idempotency.Fingerprint) payload {
	for p := range payload(6) {
		if fingerprint(id, p) == fp {
			return p
		}
	}
	panic(fmt.Sprintf("no payload of %s has fingerprint %x", id, fp[:4]))
}

func cellName(i int) string { return "cell-" + strconv.Itoa(i) }

func cellIndex(name string) int {
	i, err := strconv.Atoi(name[len("cell-"):])
	if err != nil {
		panic(err)
	}
	return i
}

func callName(n int) string {
	if n < 0 {
		return ""
	}
	return strconv.Itoa(n)
}

func callIndex(s string) int {
	if s == "" {
		return -1
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

// run is one attempt in a cell's process: its machine, and what the
// driver keeps beside it.
type run struct {
	x  msg // the attempt's process message
	in cellside.Input
	m  *cellside.Machine
	// truePayload: records and entries the driver handed the machine
	// with the request's fingerprint (knobs IgnorePayload and
	// AnswerEntryAnyPayload), with the payload they really hold.
	truePayload map[any]payload
	// claims counts the attempt's claim steps.
	claims int
}

func (r *run) key() attemptKey { return r.x.key() }

// process starts an attempt: its machine, driven until it waits on a
// message or ends.
func (m *model) process(x msg) {
	in := cellside.Input{
		Request:     request(x.id, x.payload),
		Fingerprint: fingerprint(x.id, x.payload),
		Attempt:     int32(x.attempt),
		CellID:      cellName(x.cell),
		LastResort:  x.lastResort,
		Directory:   !m.rules.NoDirectory,
		Call:        callName(x.call),
		Home:        ranking(x.id)[0] == x.cell || m.rules.IgnoreOwner,
	}
	r := &run{x: x, in: in, m: cellside.New(in, modelPolicy, modelRef{}, func() time.Time { return modelTime }),
		truePayload: map[any]payload{}}
	r.x.epoch = m.cells[x.cell].epoch
	m.cells[x.cell].runs[x.key()] = r
	m.drive(r, r.m.Start())
}

// drive performs a and the actions after it until one waits on a message
// or the attempt ends.
func (m *model) drive(r *run, a cellside.Action) {
	for !cellside.Done(a) {
		ev, ok := m.perform(r, a)
		if !ok {
			return
		}
		a = r.m.Step(ev)
	}
	m.finishRun(r, a)
}

// resume feeds ev to r's machine and drives it on.
func (m *model) resume(r *run, ev cellside.Event) { m.drive(r, r.m.Step(ev)) }

// perform carries out a, as the server's perform: the event at once, or
// false when the answer comes with a message.
func (m *model) perform(r *run, a cellside.Action) (cellside.Event, bool) {
	x := r.x
	cl := m.cells[x.cell]
	switch a := a.(type) {
	case cellside.Claim:
		if m.cancelled[x.key()] {
			return cellside.ClaimFailed{Err: errors.New("stream cancelled")}, true
		}
		if ev, ok := m.slowClaim(r, a); ok {
			return ev, true
		}
		return m.claim(r, a), true
	case cellside.Insert, cellside.Reclaim:
		if m.cancelled[x.key()] {
			return cellside.StoreFailed{Err: errors.New("stream cancelled")}, true
		}
		if m.rules.GroupCommit && m.rules.AsyncInsert {
			return m.queueWrite(r, a)
		}
		return m.write(r, a), true
	case cellside.Wait:
		m.cover(covDuplicateWait)
		m.send(msg{kind: mWait, call: x.call, attempt: x.attempt, cell: x.cell, epoch: cl.epoch, id: x.id})
		return nil, false
	case cellside.CheckVelocity:
		return cellside.Velocity{}, true
	case cellside.Persist:
		if a.From == cellside.StateReceived {
			// The persist from received (a decline, or the sending
			// record): a cancellation may overtake it.
			m.send(msg{kind: mMarkSend, call: x.call, attempt: x.attempt, cell: x.cell, epoch: cl.epoch, id: x.id})
			if a.Record.State == cellside.StateSending {
				// Or the write commits and its answer is lost (the
				// connection died with it: a failing-over database);
				// whichever is delivered first happens.
				m.send(msg{kind: mMarkSendLost, call: x.call, attempt: x.attempt, cell: x.cell, epoch: cl.epoch, id: x.id})
			}
			cl.persisting[x.key()] = a
			return nil, false
		}
		if a.OrFrom != "" && m.rules.NoStepBackAfterLostCommit {
			return cellside.StoreFailed{Err: errors.New("store: no step back")}, true
		}
		if m.rules.GroupCommit {
			return m.queueWrite(r, a)
		}
		return m.persist(x, a), true
	case cellside.EmitPNR:
		m.send(msg{kind: mPNR, call: x.call, attempt: x.attempt, cell: x.cell, epoch: cl.epoch, id: x.id})
		if m.rules.IssuerWithoutProceed {
			return cellside.PNRConfirmed{}, true // the driver does not wait for Proceed
		}
		cl.awaiting[x.key()] = x.id
		return nil, false
	case cellside.Authorize:
		m.callIssuer(x.cell, x.key(), x.id, x.payload)
		return nil, false
	}
	panic(fmt.Sprintf("no driver for action %T", a))
}

// write is the store's Insert or Reclaim of a's record, or its Persist
// from a state after received, done now.
func (m *model) write(r *run, a cellside.Action) cellside.Event {
	x := r.x
	cl := m.cells[x.cell]
	switch a := a.(type) {
	case cellside.Insert:
		if rec, ok := cl.db[x.id]; ok {
			return m.existingEvent(r, rec)
		}
		if f := m.fuRecordAt(x.cell, x.id); f != nil {
			// The key's row is a follow-up's (one key space): the insert
			// finds it, and the machine compares its payload.
			prev := *f.rec
			return cellside.Existing{Record: &prev, Active: m.active(r)}
		}
		cl.db[x.id] = m.stored(a.Record, x.key())
		return cellside.Inserted{}
	case cellside.Reclaim:
		if rec := cl.db[x.id]; rec.state != abandoned {
			return m.existingEvent(r, rec)
		}
		how := "reclaimed"
		if !r.in.Directory && r.in.LastResort {
			how += " (last resort)"
		}
		m.logf("cell %d: %s %s", x.cell, x.id, how)
		cl.db[x.id] = m.stored(a.Record, x.key())
		return cellside.Inserted{}
	case cellside.Persist:
		return m.persist(x, a)
	}
	panic(fmt.Sprintf("no write for action %T", a))
}

// queueWrite is group commit (Rules.GroupCommit): the write waits in the
// process for a shared commit, mCommit, which any other step may come
// before (other writes committing, a crash that loses it with the
// process); the machine hears of it only once it has committed.
func (m *model) queueWrite(r *run, a cellside.Action) (cellside.Event, bool) {
	cl := m.cells[r.x.cell]
	cl.committing[r.key()] = a
	m.send(msg{kind: mCommit, call: r.x.call, attempt: r.x.attempt, cell: r.x.cell, epoch: cl.epoch, id: r.x.id})
	return nil, false
}

// committed is mCommit: the queued write commits now, and its attempt goes
// on.
func (m *model) committed(r *run) {
	cl := m.cells[r.x.cell]
	a := cl.committing[r.key()]
	delete(cl.committing, r.key())
	m.resume(r, m.write(r, a))
}

// stored is the store's copy of rec, written by attempt k.
func (m *model) stored(rec *cellside.Record, k attemptKey) *record {
	return &record{state: state(rec.State), payload: payloadOf(rec.TransactionID, rec.Fingerprint),
		auth: rec.AuthCode, reason: rec.DeclineReason, attempt: k}
}

// orchestratorRecord is the store's read of rec, held by cell i: a
// recovered row as the recovery wrote it, with its ledger.
func orchestratorRecord(i int, id string, rec *record) *cellside.Record {
	l := rec.ledger
	if rec.recovered != nil {
		r := *rec.recovered
		l.Authorized = r.Amount
		r.Ledger = l
		return &r
	}
	l.Authorized = amountOf(rec.payload)
	return &cellside.Record{TransactionID: id, PartnerID: partner, Fingerprint: fingerprint(id, rec.payload),
		State: cellside.State(rec.state), AuthCode: rec.auth, DeclineReason: rec.reason,
		PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION, Market: "GB", Amount: amountOf(rec.payload), Currency: "EUR",
		SettlementAmount: amountOf(rec.payload), SettlementCurrency: "EUR", RiskAmount: amountOf(rec.payload),
		Attempt: int32(rec.attempt.attempt), CellID: cellName(i), CreatedAt: modelTime, UpdatedAt: modelTime, Ledger: l}
}

// existingEvent is the store's Existing answer with rec, and whether
// another attempt at the ID runs in the process.
func (m *model) existingEvent(r *run, rec *record) cellside.Event {
	prev := orchestratorRecord(r.x.cell, r.x.id, rec)
	if m.rules.IgnorePayload && rec.payload != r.x.payload {
		prev.Fingerprint = r.in.Fingerprint // the cell does not compare payloads
		r.truePayload[prev] = rec.payload
	}
	return cellside.Existing{Record: prev, Active: m.active(r)}
}

// active is the server's othersBusy: another attempt at r's ID runs in
// its cell's process. NoWaitOnSending has the driver answer false.
func (m *model) active(r *run) bool {
	if m.rules.NoWaitOnSending {
		return false
	}
	for k, o := range m.cells[r.x.cell].runs {
		if k != r.key() && o.x.id == r.x.id {
			return true
		}
	}
	return false
}

// persist is the store's conditional write of a.Record, from a.From (or
// a.OrFrom, on the row of x's attempt only).
func (m *model) persist(x msg, a cellside.Persist) cellside.Event {
	rec := m.cells[x.cell].db[x.id]
	from := rec != nil && rec.state == state(a.From)
	if a.OrFrom != "" {
		from = rec != nil && (rec.state == state(a.From) || rec.state == state(a.OrFrom)) && rec.attempt == x.key()
	}
	if !from {
		return cellside.StoreFailed{Err: errors.New("store: record is not in the expected state")}
	}
	rec.state, rec.auth, rec.reason = state(a.Record.State), a.Record.AuthCode, a.Record.DeclineReason
	return cellside.Persisted{}
}

// markSending delivers a parked persist from received: nothing but a step
// back to abandoned is persisted from received once the stream is
// cancelled (server.perform). lost: the write commits, and the machine
// hears that it failed (mMarkSendLost). The first of mMarkSend and
// mMarkSendLost delivered decides; the other finds nothing parked.
func (m *model) markSending(r *run, lost bool) {
	cl := m.cells[r.x.cell]
	a, ok := cl.persisting[r.key()]
	if !ok {
		return
	}
	delete(cl.persisting, r.key())
	if m.cancelled[r.key()] && a.Record.State != cellside.StateAbandoned && !a.Decided {
		// A step back to abandoned is written all the same: it lets a
		// duplicate reclaim the record (server.perform).
		m.resume(r, cellside.StoreFailed{Err: errors.New("caller gone before the point of no return")})
		return
	}
	ev := m.persist(r.x, a)
	if _, ok := ev.(cellside.Persisted); ok && lost {
		m.cover(covLostCommit)
		m.logf("cell %d: %s sending committed, its answer lost", r.x.cell, r.x.id)
		ev = cellside.StoreFailed{Err: errors.New("store: persist: unexpected EOF")}
	}
	m.resume(r, ev)
}

// waited ends a Wait: the record settled (left received, and is not
// sending while another attempt here runs), or the wait timed out
// (StoreFailed with ErrInProgress: ABORTED, which the GTR passes on).
func (m *model) waited(r *run) {
	rec := m.cells[r.x.cell].db[r.x.id]
	active := m.active(r)
	if m.cancelled[r.key()] || rec.state == received || rec.state == deciding || rec.state == sending && active {
		m.resume(r, cellside.StoreFailed{Err: fmt.Errorf("waiting for a concurrent attempt: %w", cellside.ErrInProgress)})
		return
	}
	ev := m.existingEvent(r, rec).(cellside.Existing)
	ev.Active = active
	m.resume(r, ev)
}

// refused is PNRRefused: the stream ended without Proceed.
func (m *model) refused(r *run) {
	delete(m.cells[r.x.cell].awaiting, r.key())
	m.logf("cell %d: %s not confirmed", r.x.cell, r.x.id)
	m.resume(r, cellside.PNRRefused{Err: errors.New("stream cancelled")})
}

// issuerAnswered feeds the issuer's answer to the attempt waiting on it.
func (m *model) issuerAnswered(r *run, res result) {
	m.resume(r, cellside.IssuerAnswered{Approved: res.status == "APPROVED", AuthCode: res.auth, DeclineReason: res.reason})
}

// finishRun sends the attempt's last action to the GTR, and brings the
// directory entry up to date in the background (server.settleEntry).
func (m *model) finishRun(r *run, a cellside.Action) {
	x := r.x
	cl := m.cells[x.cell]
	delete(cl.runs, r.key())
	switch a := a.(type) {
	case cellside.Reply:
		rec := &record{state: state(a.Record.State), auth: a.Record.AuthCode, reason: a.Record.DeclineReason,
			payload: m.replyPayload(x.cell, a.Record)}
		if p, ok := r.truePayload[a.Record]; ok {
			rec.payload = p
		}
		if rec.state == sending {
			for k, id := range cl.awaiting {
				if id == x.id && k != x.key() {
					m.violate("no PENDING from an unconfirmed sending record: cell %d answered %s (call %d attempt %d) while call %d attempt %d waits for Proceed",
						x.cell, x.id, x.call, x.attempt, k.call, k.attempt)
				}
			}
		}
		m.reply(x, mResult, rec.result(), rec.payload)
	case cellside.ReplyEntry:
		p := payloadOf(x.id, a.Entry.Fingerprint)
		if tp, ok := r.truePayload[a.Entry.Fingerprint]; ok {
			p = tp
		}
		m.logf("cell %d: %s answered from the directory (owner %s)", x.cell, x.id, a.Entry.Owner)
		m.reply(x, mResult, resultOf(a.Entry.Answer), p)
	case cellside.Reject:
		m.reuseRefused(r, a)
		res := result{status: "INVALID_ARGUMENT"}
		switch {
		case errors.Is(a.Err, idempotency.ErrConflict):
			res.status = "ALREADY_EXISTS"
		case errors.Is(a.Err, cellside.ErrInProgress):
			res.status = "ABORTED"
		}
		m.reply(x, mResult, res, x.payload)
	case cellside.Reroute:
		m.logf("cell %d: %s re-routable: %s", x.cell, x.id, a.Reason)
		out := msg{kind: mReroutable, call: x.call, attempt: x.attempt, cell: x.cell, id: x.id}
		if a.Owner != "" {
			out.owner, out.redirect = cellIndex(a.Owner), true
		}
		m.send(out)
	}
	m.settleEntry(r, a)
}

// settleEntry is server.settleEntry: a final answer of this cell's
// recorded (but a recovered record's), a claim of this attempt's given
// up before its PNR abandoned; both best effort, as messages that may be
// delayed, reordered or lost.
func (m *model) settleEntry(r *run, a cellside.Action) {
	if m.rules.NoDirectory {
		return
	}
	e, claimed := r.m.Claimed()
	if !claimed && !r.m.Unclaimed() {
		return
	}
	switch a := a.(type) {
	case cellside.Reply:
		// A recovered record (loss.go) is not filed: it holds no payload
		// fingerprint to file, and the entry stays this cell's, so that a
		// replay elsewhere comes here, where the record answers it.
		if a.Record.State.Terminal() && a.Record.CellID == r.in.CellID && !a.Record.Recovered() {
			p := m.replyPayload(r.x.cell, a.Record)
			if tp, ok := r.truePayload[a.Record]; ok {
				p = tp
			}
			m.finalizeLater(r.x.cell, r.x.id, p, resultOf(a.Record.Transaction()))
		}
	case cellside.Reroute:
		if claimed && e.SameAttempt(r.in.Call, r.in.Attempt) {
			m.send(msg{kind: mDirUpdate, cell: r.x.cell, id: r.x.id, call: r.x.call, attempt: r.x.attempt, dirState: entryAbandoned})
		}
	}
}

// replyPayload is the payload of the record a Reply of cell i carries:
// its fingerprint's; a recovered record has none (loss.go), and its
// payload is the one the issuer's effect was of, as the model keeps it.
func (m *model) replyPayload(i int, rec *cellside.Record) payload {
	if r := m.cells[i].db[rec.TransactionID]; rec.Recovered() && r != nil {
		return r.payload
	}
	return payloadOf(rec.TransactionID, rec.Fingerprint)
}

// finalizeLater is a best-effort Finalize of cell i's answer res for id.
func (m *model) finalizeLater(i int, id string, p payload, res result) {
	if m.rules.NoDirectory {
		return
	}
	m.send(msg{kind: mDirUpdate, cell: i, id: id, payload: p, dirState: entryFinal, res: res})
}

// resultOf is what a partner is told of txn.
func resultOf(txn *cellpayv1.Transaction) result {
	switch txn.GetStatus() {
	case cellpayv1.TransactionStatus_APPROVED:
		return result{status: "APPROVED", auth: txn.GetAuthCode()}
	case cellpayv1.TransactionStatus_DECLINED:
		return result{status: "DECLINED", reason: txn.GetDeclineReason()}
	case cellpayv1.TransactionStatus_FAILED:
		return result{status: "FAILED", reason: txn.GetDeclineReason()}
	case cellpayv1.TransactionStatus_PENDING:
		return result{status: "PENDING"}
	}
	return result{status: "INTERNAL"}
}

// answerOf is the partner's view of res, as an entry records it.
func answerOf(id string, res result) *cellpayv1.Transaction {
	st := cellpayv1.TransactionStatus_value[res.status]
	return &cellpayv1.Transaction{TransactionId: id, PartnerId: partner, Status: cellpayv1.TransactionStatus(st),
		AuthCode: res.auth, DeclineReason: res.reason}
}

// runOf is the attempt x names if it still runs in its cell's process.
func (m *model) runOf(x msg) (*run, bool) {
	cl := m.cells[x.cell]
	r, ok := cl.runs[x.key()]
	if !ok || !cl.up || cl.epoch != r.x.epoch {
		return nil, false
	}
	return r, true
}

// busy is server.Busy: an attempt at id is in progress in cell i's process.
func (m *model) busy(i int, id string) bool {
	return slices.ContainsFunc(mapsValues(m.cells[i].runs), func(r *run) bool { return r.x.id == id })
}

func mapsValues[K comparable, V any](mp map[K]V) []V {
	out := make([]V, 0, len(mp))
	for _, v := range mp {
		out = append(out, v)
	}
	return out
}
