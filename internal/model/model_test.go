package model

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Rules are test-only knobs, each breaking one rule of the protocol. The
// zero value is the protocol as designed; the knob tests check that the
// invariants catch each break.
type Rules struct {
	// RerouteAfterPNR: the GTR restarts an attempt on the next cell when
	// its stream breaks, even after it observed the PNR.
	RerouteAfterPNR bool
	// IssuerNoDedupe: the issuer applies every request, not one per ID.
	IssuerNoDedupe bool
	// IgnorePayload: a cell answers a replay from its record without
	// comparing payloads.
	IgnorePayload bool
}

const numCells = 3

// payload is a request's content, reduced to what decides its outcome:
// payload%3 == 0 is approved by the issuer, 1 declined by the issuer, 2
// declined by the cell before its PNR (a risk limit).
type payload int

// result is what a partner is told, and what a record says.
type result struct {
	status string // APPROVED, DECLINED, FAILED, PENDING, or an error code
	auth   string
	reason string
}

func (r result) isError() bool {
	switch r.status {
	case "APPROVED", "DECLINED", "FAILED", "PENDING":
		return false
	}
	return true
}

func (r result) final() bool {
	return r.status == "APPROVED" || r.status == "DECLINED" || r.status == "FAILED"
}

type state string

const (
	received  state = "received"
	sending   state = "sending"
	approved  state = "approved"
	declined  state = "declined"
	abandoned state = "abandoned"
)

type record struct {
	state   state
	payload payload
	auth    string
	reason  string
}

func (r *record) result() result {
	switch r.state {
	case sending:
		return result{status: "PENDING"}
	case approved:
		return result{status: "APPROVED", auth: r.auth}
	case declined:
		return result{status: "DECLINED", reason: r.reason}
	}
	return result{status: "INTERNAL"}
}

func (r *record) pastPNR() bool {
	return r.state == sending || r.state == approved || r.state == declined
}

type cell struct {
	up    bool
	epoch int // bumped by a crash: in-memory work of older epochs is gone
	db    map[string]*record
	// cancelled are the attempts whose GTR stream was cancelled, as the
	// cell has seen (in memory).
	cancelled map[attemptKey]bool
}

type attemptKey struct {
	call    int
	attempt int
}

// call is one SubmitTransaction at the GTR.
type call struct {
	n       int
	id      string
	payload payload
	ranking []int
	attempt int // index into ranking
	pnr     bool
	done    bool
	answer  result
	joined  int // coalesced duplicates answered with this call
}

type msgKind int

const (
	mProcess    msgKind = iota // GTR -> cell: start an attempt
	mCancel                    // GTR -> cell: the attempt's stream is cancelled
	mMarkSend                  // cell, in memory: mark sending
	mAuthorize                 // cell, in memory: call the issuer
	mPNR                       // cell -> GTR on the attempt's stream
	mResult                    // cell -> GTR on the attempt's stream
	mReroutable                // cell -> GTR on the attempt's stream
	mIssuerReq                 // cell -> issuer
	mIssuerResp                // issuer -> cell
)

var kindNames = [...]string{"process", "cancel", "mark-sending", "authorize", "pnr", "result", "reroutable", "issuer-request", "issuer-response"}

type msg struct {
	kind    msgKind
	call    int // call number
	attempt int
	cell    int
	epoch   int // the cell's epoch, for messages that live in its memory or answer it
	id      string
	payload payload
	res     result
	// recPayload is the payload of the record a result was read from.
	recPayload payload
}

func (m msg) String() string {
	return fmt.Sprintf("%s(%s call %d attempt %d cell %d)", kindNames[m.kind], m.id, m.call, m.attempt, m.cell)
}

func (m msg) stream() bool { return m.kind == mPNR || m.kind == mResult || m.kind == mReroutable }

// answered is one answer a partner got.
type answered struct {
	payload payload
	res     result
}

// model is the whole system. It is deterministic: every choice is made by
// the caller (rapid, or a scripted test).
type model struct {
	rules   Rules
	cells   [numCells]*cell
	calls   []*call
	pool    []msg
	effects map[string]int
	outcome map[string]result // the issuer's first outcome per ID
	answers map[string][]answered
	// violations are rule breaks seen as they happen (a re-route after a
	// PNR); check reports them.
	violations []string
	log        []string
	// strictReuse checks ALREADY_EXISTS across cells: no two payloads of
	// one ID ever both get a non-error answer. The protocol does not keep
	// it yet (TestKnownGaps); by default only a cell holding the record
	// must refuse another payload.
	strictReuse bool
}

func newModel(rules Rules) *model {
	m := &model{rules: rules, effects: map[string]int{}, outcome: map[string]result{}, answers: map[string][]answered{}}
	for i := range m.cells {
		m.cells[i] = &cell{up: true, db: map[string]*record{}, cancelled: map[attemptKey]bool{}}
	}
	return m
}

func (m *model) logf(format string, args ...any) { m.log = append(m.log, fmt.Sprintf(format, args...)) }

// ranking is the route for an ID: a fixed permutation of the cells, as
// rendezvous hashing gives one per key.
func ranking(id string) []int {
	h := 0
	for _, c := range id {
		h = h*31 + int(c)
	}
	first := h % numCells
	return []int{first, (first + 1) % numCells, (first + 2) % numCells}
}

// --- GTR ---

// submit is a partner's SubmitTransaction.
func (m *model) submit(id string, p payload) {
	for _, c := range m.calls {
		if c.id == id && !c.done {
			if c.payload == p {
				c.joined++ // coalesced: answered when c is
				m.logf("submit %s payload %d: coalesced into call %d", id, p, c.n)
			} else {
				m.answer(id, p, result{status: "ALREADY_EXISTS"})
				m.logf("submit %s payload %d: ALREADY_EXISTS (in flight with payload %d)", id, p, c.payload)
			}
			return
		}
	}
	c := &call{n: len(m.calls), id: id, payload: p, ranking: ranking(id)}
	m.calls = append(m.calls, c)
	m.logf("submit %s payload %d: call %d", id, p, c.n)
	m.send(msg{kind: mProcess, call: c.n, attempt: 0, cell: c.ranking[0], id: id, payload: p})
}

func (m *model) send(x msg) { m.pool = append(m.pool, x) }

func (m *model) answer(id string, p payload, r result) {
	m.answers[id] = append(m.answers[id], answered{payload: p, res: r})
}

func (m *model) finish(c *call, r result) {
	c.done, c.answer = true, r
	for range c.joined + 1 {
		m.answer(c.id, c.payload, r)
	}
	m.logf("call %d (%s) answered %v", c.n, c.id, r)
}

// current reports whether x is about the live attempt of a live call.
func (m *model) current(x msg) (*call, bool) {
	c := m.calls[x.call]
	return c, !c.done && c.attempt == x.attempt
}

// broken is the GTR's rule for an attempt that ended without an outcome.
func (m *model) broken(c *call, why string) {
	if c.pnr && !m.rules.RerouteAfterPNR {
		m.finish(c, result{status: "PENDING"})
		return
	}
	if c.pnr {
		m.violations = append(m.violations, fmt.Sprintf("no re-route after a PNR: call %d (%s) re-routed (%s)", c.n, c.id, why))
	}
	c.attempt++
	c.pnr = false
	if c.attempt == len(c.ranking) {
		m.finish(c, result{status: "UNAVAILABLE"})
		return
	}
	m.logf("call %d (%s) re-routed to cell %d: %s", c.n, c.id, c.ranking[c.attempt], why)
	m.send(msg{kind: mProcess, call: c.n, attempt: c.attempt, cell: c.ranking[c.attempt], id: c.id, payload: c.payload})
}

// gtrTimeout is the attempt timer (before the PNR) or the caller's
// deadline (after it) firing for a live call.
func (m *model) gtrTimeout(c *call) {
	if c.pnr {
		m.finish(c, result{status: "PENDING"})
		return
	}
	m.send(msg{kind: mCancel, call: c.n, attempt: c.attempt, cell: c.ranking[c.attempt]})
	m.broken(c, "attempt timeout")
}

// --- delivery ---

// deliverable lists the pool indexes that may be delivered next: every
// message, except that a stream keeps its order.
func (m *model) deliverable() []int {
	var out []int
	seen := map[attemptKey]bool{}
	for i, x := range m.pool {
		if x.stream() {
			k := attemptKey{x.call, x.attempt}
			if seen[k] {
				continue
			}
			seen[k] = true
		}
		out = append(out, i)
	}
	return out
}

func (m *model) deliver(i int) {
	x := m.pool[i]
	m.pool = slices.Delete(m.pool, i, i+1)
	m.logf("deliver %v", x)
	switch x.kind {
	case mProcess:
		if !m.cells[x.cell].up {
			if c, ok := m.current(x); ok {
				m.broken(c, "cell down")
			}
			return
		}
		m.process(x)
	case mCancel:
		if m.cells[x.cell].up {
			m.cells[x.cell].cancelled[attemptKey{x.call, x.attempt}] = true
		}
	case mMarkSend, mAuthorize, mIssuerResp:
		cl := m.cells[x.cell]
		if !cl.up || cl.epoch != x.epoch {
			return // in the memory of a process that is gone
		}
		switch x.kind {
		case mMarkSend:
			m.markSending(x)
		case mAuthorize:
			m.send(msg{kind: mIssuerReq, call: x.call, attempt: x.attempt, cell: x.cell, epoch: x.epoch, id: x.id, payload: x.payload})
		default:
			m.persistOutcome(x)
		}
	case mIssuerReq:
		r := m.authorize(x.id, x.payload)
		m.send(msg{kind: mIssuerResp, call: x.call, attempt: x.attempt, cell: x.cell, epoch: x.epoch, id: x.id, res: r})
	case mPNR:
		if c, ok := m.current(x); ok {
			c.pnr = true
		}
	case mResult:
		if c, ok := m.current(x); ok {
			if !x.res.isError() && x.recPayload != c.payload {
				m.violations = append(m.violations, fmt.Sprintf(
					"same ID, other payload, ALREADY_EXISTS: cell %d answered %s payload %d from a record of payload %d",
					x.cell, c.id, c.payload, x.recPayload))
			}
			m.finish(c, x.res)
		}
	case mReroutable:
		if c, ok := m.current(x); ok {
			m.broken(c, "cell said re-routable")
		}
	}
}

// --- cell ---

func (m *model) process(x msg) {
	cl := m.cells[x.cell]
	reply := func(kind msgKind, r result) {
		m.send(msg{kind: kind, call: x.call, attempt: x.attempt, cell: x.cell, id: x.id, res: r, recPayload: x.payload})
	}
	if rec, ok := cl.db[x.id]; ok {
		switch {
		case rec.payload != x.payload && !m.rules.IgnorePayload:
			reply(mResult, result{status: "ALREADY_EXISTS"})
			return
		case rec.state == received:
			reply(mResult, result{status: "ABORTED"}) // in progress here
			return
		case rec.state != abandoned:
			m.send(msg{kind: mResult, call: x.call, attempt: x.attempt, cell: x.cell, id: x.id, res: rec.result(), recPayload: rec.payload})
			return
		}
		// Abandoned: restart, not resume.
	}
	rec := &record{state: received, payload: x.payload}
	cl.db[x.id] = rec
	if x.payload%3 == 2 {
		rec.state, rec.reason = declined, "amount_limit"
		reply(mResult, rec.result())
		return
	}
	m.send(msg{kind: mMarkSend, call: x.call, attempt: x.attempt, cell: x.cell, epoch: cl.epoch, id: x.id, payload: x.payload})
}

func (m *model) markSending(x msg) {
	cl := m.cells[x.cell]
	rec := cl.db[x.id]
	if cl.cancelled[attemptKey{x.call, x.attempt}] || rec == nil || rec.state != received {
		// The GTR gave up on this attempt: stop short of the PNR. The
		// record stays received until a restart abandons it.
		m.send(msg{kind: mReroutable, call: x.call, attempt: x.attempt, cell: x.cell, id: x.id})
		return
	}
	rec.state = sending // durable: the point of no return
	m.send(msg{kind: mPNR, call: x.call, attempt: x.attempt, cell: x.cell, id: x.id})
	m.send(msg{kind: mAuthorize, call: x.call, attempt: x.attempt, cell: x.cell, epoch: x.epoch, id: x.id, payload: x.payload})
}

// persistOutcome records the issuer's answer (if the record is still
// sending: a reconciler may have got there first) and replies.
func (m *model) persistOutcome(x msg) {
	rec := m.cells[x.cell].db[x.id]
	m.settle(rec, x.res)
	m.send(msg{kind: mResult, call: x.call, attempt: x.attempt, cell: x.cell, id: x.id, res: rec.result(), recPayload: rec.payload})
}

func (m *model) settle(rec *record, r result) {
	if rec.state != sending {
		return
	}
	if r.status == "APPROVED" {
		rec.state, rec.auth = approved, r.auth
	} else {
		rec.state, rec.reason = declined, r.reason
	}
}

// issuerTimeout loses an issuer request or response: the cell learns
// nothing and answers PENDING.
func (m *model) issuerTimeout(i int) {
	x := m.pool[i]
	m.pool = slices.Delete(m.pool, i, i+1)
	m.logf("issuer timeout: lost %v", x)
	cl := m.cells[x.cell]
	if !cl.up || cl.epoch != x.epoch {
		return
	}
	rec := cl.db[x.id]
	m.send(msg{kind: mResult, call: x.call, attempt: x.attempt, cell: x.cell, id: x.id, res: result{status: "PENDING"}, recPayload: rec.payload})
}

func (m *model) crash(i int) {
	cl := m.cells[i]
	cl.up = false
	cl.epoch++
	cl.cancelled = map[attemptKey]bool{}
	// Whatever the cell had not yet put on the wire to the GTR is gone.
	m.pool = slices.DeleteFunc(m.pool, func(x msg) bool { return x.stream() && x.cell == i })
	m.logf("crash cell %d", i)
	for _, c := range m.calls {
		if !c.done && c.ranking[c.attempt] == i && !m.processPending(c) {
			m.broken(c, fmt.Sprintf("cell %d crashed", i))
		}
	}
}

// processPending reports whether c's current attempt has not reached its
// cell yet (its stream does not exist, so nothing breaks).
func (m *model) processPending(c *call) bool {
	return slices.ContainsFunc(m.pool, func(x msg) bool {
		return x.kind == mProcess && x.call == c.n && x.attempt == c.attempt
	})
}

func (m *model) restart(i int) {
	cl := m.cells[i]
	cl.up = true
	for _, rec := range cl.db {
		if rec.state == received {
			rec.state = abandoned // never resume work before the PNR
		}
	}
	m.logf("restart cell %d", i)
}

// reconcile resolves a cell's sending records by inquiry. An issuer that
// has no outcome gets the authorization (again): it dedupes by ID, so a
// late original is a duplicate, never a second effect.
func (m *model) reconcile(i int) {
	cl := m.cells[i]
	if !cl.up {
		return
	}
	for _, id := range slices.Sorted(maps.Keys(cl.db)) {
		rec := cl.db[id]
		if rec.state != sending {
			continue
		}
		r, ok := m.outcome[id]
		if !ok {
			r = m.authorize(id, rec.payload)
		}
		m.settle(rec, r)
		m.logf("reconcile cell %d: %s -> %s", i, id, rec.state)
	}
}

// --- issuer ---

func (m *model) authorize(id string, p payload) result {
	if r, ok := m.outcome[id]; ok && !m.rules.IssuerNoDedupe {
		return r
	}
	m.effects[id]++
	r := result{status: "APPROVED", auth: "A-" + id}
	if p%3 == 1 {
		r = result{status: "DECLINED", reason: "do_not_honor"}
	}
	if _, ok := m.outcome[id]; !ok {
		m.outcome[id] = r
	}
	return r
}

// --- invariants ---

// check returns the first invariant broken so far, if any.
func (m *model) check() error {
	if len(m.violations) > 0 {
		return errors.New(m.violations[0])
	}
	for _, id := range slices.Sorted(maps.Keys(m.effects)) {
		if n := m.effects[id]; n > 1 {
			return fmt.Errorf("at most one issuer effect per ID: %s has %d", id, n)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(m.answers)) {
		as := m.answers[id]
		var first *answered
		for i := range as {
			a := &as[i]
			if a.res.isError() {
				continue
			}
			if first == nil {
				first = a
				continue
			}
			if a.payload != first.payload {
				if m.strictReuse {
					return fmt.Errorf("same ID, other payload, ALREADY_EXISTS: %s answered %v for payload %d and %v for payload %d",
						id, first.res, first.payload, a.res, a.payload)
				}
				continue
			}
			if first.res.final() && a.res.final() && a.res != first.res {
				return fmt.Errorf("same ID and payload, same answer: %s answered %v and %v", id, first.res, a.res)
			}
		}
	}
	return nil
}

// heal ends every fault: cells restart, every message is delivered in
// order, reconcilers run, and the GTR's calls all end.
func (m *model) heal() {
	for i, cl := range m.cells {
		if !cl.up {
			m.restart(i)
		}
	}
	for round := 0; ; round++ {
		for len(m.pool) > 0 {
			m.deliver(m.deliverable()[0])
		}
		for i := range m.cells {
			m.reconcile(i)
		}
		if len(m.pool) == 0 || round > 10 {
			return
		}
	}
}

// checkHealed checks what must hold once faults heal: every call
// answered, every accepted transaction final in every cell past its PNR,
// those cells agreeing, and every answer equal to the record (a PENDING
// answer having resolved).
func (m *model) checkHealed() error {
	if err := m.check(); err != nil {
		return err
	}
	for _, c := range m.calls {
		if !c.done {
			return fmt.Errorf("call %d (%s) never answered", c.n, c.id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(m.answers)) {
		for _, a := range m.answers[id] {
			if a.res.isError() {
				continue
			}
			// Records of the answered payload only: another payload's
			// record in another cell is the known gap of TestKnownGaps.
			rec, err := m.agreedRecord(id, a.payload)
			switch {
			case err != nil:
				return err
			case rec == nil:
				return fmt.Errorf("lost: %s answered %v, no record past its PNR", id, a.res)
			case a.res.final() && a.res != *rec:
				return fmt.Errorf("answer equals record: %s answered %v, record %v", id, a.res, *rec)
			}
		}
	}
	return nil
}

// agreedRecord is the outcome of id's records of payload p past their
// PNR, which must all be final and agree; nil when there are none.
func (m *model) agreedRecord(id string, p payload) (*result, error) {
	var rec *result
	for i, cl := range m.cells {
		r, ok := cl.db[id]
		if !ok || !r.pastPNR() || r.payload != p {
			continue
		}
		res := r.result()
		if !res.final() {
			return nil, fmt.Errorf("every accepted transaction is final: %s is %s in cell %d", id, r.state, i)
		}
		if rec != nil && *rec != res {
			return nil, fmt.Errorf("records agree: %s is %v in one cell and %v in cell %d", id, *rec, res, i)
		}
		rec = &res
	}
	return rec, nil
}
