package model

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
)

// The instances model (docs/design/cell-instances.md): one cell of two
// instances sharing its store, each an cellside.Machine per attempt
// driven as cmd/cell/internal/server drives it, with crashes, lease
// expiry and restarts. The store keeps each row's owner (the instance
// whose attempt wrote it, cleared by a state other than sending and by a
// PENDING answer) and each instance's lease; Existing.Active is the
// durable "an attempt works on the row": the owner's lease is live. A
// restart abandons the received rows of its own and of instances whose
// lease ran out. The reconciler resolves sending rows no attempt works
// on: the issuer's outcome, or FAILED once no attempt can still send (the
// code's NotFoundAfter). The GTR side is reduced to its answers: Proceed
// or a refusal per PNR, in any order.
//
// Checked as they happen: a restart never abandons a row a live sibling's
// attempt works on. After healing: at most one issuer call per ID, every
// answer equals the final record, and a PENDING answer ends final.
//
// Knobs (instRules) break the two rules of issue #11 in the driver.
type instRules struct {
	// AbandonIgnoresLease: a restart abandons every received row, a
	// live sibling's included (the code before #11).
	AbandonIgnoresLease bool
	// ActiveFromMemory: Active is "another attempt in this process", the
	// process-local map of before #11.
	ActiveFromMemory bool
}

const numInstances = 2

type instRow struct {
	rec   cellside.Record
	owner int // -1: none
}

type instRun struct {
	inst, n int
	id      string
	m       *cellside.Machine
	next    cellside.Action
	owns    bool // wrote the row: an insert or a reclaim
	// step lets the next write from received go: it is parked until
	// then, so that faults reach an attempt short of its PNR.
	step bool
}

type instModel struct {
	rules   instRules
	db      map[string]*instRow
	up      [numInstances]bool
	lease   [numInstances]bool
	runs    []*instRun
	n       int
	sends   map[string]int
	applied map[string]bool
	answers map[string][]cellside.State
	log     []string
	broken  []string
}

func newInstModel(rules instRules) *instModel {
	m := &instModel{rules: rules, db: map[string]*instRow{}, sends: map[string]int{}, applied: map[string]bool{},
		answers: map[string][]cellside.State{}}
	for i := range m.up {
		m.up[i], m.lease[i] = true, true
	}
	return m
}

func (m *instModel) logf(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf(format, args...))
}

// submit starts an attempt at id on instance i.
func (m *instModel) submit(i int, id string) {
	if !m.up[i] {
		return
	}
	m.n++
	in := cellside.Input{Request: request(id, 0), Fingerprint: fingerprint(id, 0), Attempt: int32(m.n), CellID: "cell-0", Call: callName(m.n)}
	r := &instRun{inst: i, n: m.n, id: id, m: cellside.New(in, modelPolicy, modelRef{}, func() time.Time { return modelTime })}
	m.logf("instance %d: attempt %d at %s", i, r.n, id)
	r.next = r.m.Start()
	m.runs = append(m.runs, r)
	m.advance(r)
}

// active is the store's Active for id, as run r's driver asks it.
func (m *instModel) active(r *instRun, id string) bool {
	if m.rules.ActiveFromMemory {
		for _, o := range m.runs {
			if o != r && o.inst == r.inst && o.id == id {
				return true
			}
		}
		return false
	}
	row := m.db[id]
	return row != nil && row.owner >= 0 && m.lease[row.owner]
}

func (m *instModel) existing(r *instRun, row *instRow) cellside.Event {
	rec := row.rec
	return cellside.Existing{Record: &rec, Active: rec.State == cellside.StateSending && m.active(r, r.id)}
}

// advance performs r's actions that need no outside event, until one
// does (EmitPNR: the GTR's answer; Wait: the row to move) or it ends.
func (m *instModel) advance(r *instRun) {
	for {
		if cellside.Done(r.next) {
			m.finish(r)
			return
		}
		ev, ok := m.perform(r, r.next)
		if !ok {
			return
		}
		r.next = r.m.Step(ev)
	}
}

func (m *instModel) perform(r *instRun, a cellside.Action) (cellside.Event, bool) {
	row := m.db[r.id]
	switch a := a.(type) {
	case cellside.Insert:
		if row != nil {
			return m.existing(r, row), true
		}
		m.db[r.id] = &instRow{rec: *a.Record, owner: r.inst}
		r.owns = true
		return cellside.Inserted{}, true
	case cellside.Reclaim:
		if row.rec.State != cellside.StateAbandoned {
			return m.existing(r, row), true
		}
		row.rec, row.owner, r.owns = *a.Record, r.inst, true
		return cellside.Inserted{}, true
	case cellside.Wait:
		if row.rec.State == cellside.StateReceived || row.rec.State == cellside.StateSending && m.active(r, r.id) {
			return nil, false // polled again by wake
		}
		return m.existing(r, row), true
	case cellside.CheckVelocity:
		return cellside.Velocity{}, true
	case cellside.Persist:
		if a.From == cellside.StateReceived && !r.step {
			return nil, false // parked: markSending
		}
		r.step = false
		from := row != nil && row.rec.State == a.From
		if a.OrFrom != "" { // this attempt's row only (store.AbandonOwn)
			from = row != nil && (row.rec.State == a.From || row.rec.State == a.OrFrom) &&
				row.owner == r.inst && row.rec.Attempt == a.Record.Attempt && row.rec.CreatedAt.Equal(a.Record.CreatedAt)
		}
		if !from {
			return cellside.StoreFailed{Err: errors.New("store: state changed")}, true
		}
		row.rec.State, row.rec.AuthCode, row.rec.DeclineReason = a.Record.State, a.Record.AuthCode, a.Record.DeclineReason
		if a.Record.State != cellside.StateSending {
			row.owner = -1
		}
		return cellside.Persisted{}, true
	case cellside.EmitPNR:
		return nil, false // the GTR answers: proceed or refuse
	case cellside.Authorize:
		m.sends[r.id]++
		m.applied[r.id] = true
		m.logf("instance %d: attempt %d sends %s to the issuer", r.inst, r.n, r.id)
		return cellside.IssuerAnswered{Approved: true, AuthCode: "A1"}, true
	}
	panic(fmt.Sprintf("no driver for %T", a))
}

// finish records r's answer, and ends its ownership of a row it leaves
// sending (server.release).
func (m *instModel) finish(r *instRun) {
	m.drop(r)
	if rep, ok := r.next.(cellside.Reply); ok {
		m.answers[r.id] = append(m.answers[r.id], rep.Record.State)
		m.logf("instance %d: attempt %d answers %s %s", r.inst, r.n, r.id, rep.Record.State.Status())
		if row := m.db[r.id]; r.owns && row.rec.State == cellside.StateSending && row.owner == r.inst {
			row.owner = -1
		}
		return
	}
	m.logf("instance %d: attempt %d ends %T", r.inst, r.n, r.next)
}

func (m *instModel) drop(r *instRun) {
	for i, o := range m.runs {
		if o == r {
			m.runs = append(m.runs[:i], m.runs[i+1:]...)
			return
		}
	}
}

// gtr answers the PNR of the k-th run waiting for one: Proceed or not.
func (m *instModel) gtr(k int, proceed bool) {
	var waiting []*instRun
	for _, r := range m.runs {
		if _, ok := r.next.(cellside.EmitPNR); ok {
			waiting = append(waiting, r)
		}
	}
	if len(waiting) == 0 {
		return
	}
	r := waiting[k%len(waiting)]
	m.logf("GTR: attempt %d proceed=%v", r.n, proceed)
	if proceed {
		r.next = r.m.Step(cellside.PNRConfirmed{})
	} else {
		r.next = r.m.Step(cellside.PNRRefused{Err: errors.New("refused")})
	}
	m.advance(r)
}

// markSending lets the k-th attempt parked at its write from received
// (to sending, or a decline) go on; all when k < 0.
func (m *instModel) markSending(k int) {
	var parked []*instRun
	for _, r := range m.runs {
		if p, ok := r.next.(cellside.Persist); ok && p.From == cellside.StateReceived {
			parked = append(parked, r)
		}
	}
	for i, r := range parked {
		if k < 0 || i == k%len(parked) {
			r.step = true
			m.advance(r)
		}
	}
}

// wake polls every waiting run; timeout ends the k-th one's wait instead.
func (m *instModel) wake() {
	for _, r := range append([]*instRun(nil), m.runs...) {
		if _, ok := r.next.(cellside.Wait); ok {
			m.advance(r)
		}
	}
}

func (m *instModel) timeout(k int) {
	for _, r := range m.runs {
		if _, ok := r.next.(cellside.Wait); ok {
			if k--; k < 0 {
				m.logf("instance %d: attempt %d's wait times out", r.inst, r.n)
				r.next = r.m.Step(cellside.StoreFailed{Err: cellside.ErrInProgress})
				m.advance(r)
				return
			}
		}
	}
}

// crash stops instance i: its attempts are gone, its lease runs on.
func (m *instModel) crash(i int) {
	if !m.up[i] {
		return
	}
	m.up[i] = false
	m.logf("instance %d crashes", i)
	var kept []*instRun
	for _, r := range m.runs {
		if r.inst != i {
			kept = append(kept, r)
		}
	}
	m.runs = kept
}

func (m *instModel) expire(i int) {
	if !m.up[i] && m.lease[i] {
		m.lease[i] = false
		m.logf("instance %d's lease runs out", i)
	}
}

// restart starts instance i again under its name: lease, then
// AbandonUnsent (which releases its own sending rows too).
func (m *instModel) restart(i int) {
	if m.up[i] {
		return
	}
	m.up[i], m.lease[i] = true, true
	m.logf("instance %d restarts", i)
	for id, row := range m.db {
		if row.rec.State == cellside.StateSending && row.owner == i {
			row.owner = -1 // its previous life's: released
		}
		if row.rec.State != cellside.StateReceived {
			continue
		}
		if !m.rules.AbandonIgnoresLease && row.owner >= 0 && row.owner != i && m.lease[row.owner] {
			continue
		}
		for _, r := range m.runs {
			if r.id == id && r.owns && r.inst != i {
				m.broken = append(m.broken, fmt.Sprintf("a restart abandons only rows no live instance works on: instance %d abandoned %s of live instance %d's attempt %d", i, id, r.inst, r.n))
			}
		}
		row.rec.State, row.owner = cellside.StateAbandoned, -1
	}
}

// reconcile is one round of the cell's reconciler.
func (m *instModel) reconcile() {
	for id, row := range m.db {
		if row.rec.State != cellside.StateSending || row.owner >= 0 && m.lease[row.owner] {
			continue
		}
		if m.applied[id] {
			row.rec.State, row.rec.AuthCode = cellside.StateApproved, "A1"
		} else if !m.maySend(id) {
			row.rec.State, row.rec.DeclineReason = cellside.StateFailed, "issuer_not_reached"
		} else {
			continue
		}
		row.owner = -1
		m.logf("reconciler: %s %s", id, row.rec.State)
	}
}

// maySend reports whether an attempt could still call the issuer for id.
func (m *instModel) maySend(id string) bool {
	for _, r := range m.runs {
		if _, ok := r.next.(cellside.EmitPNR); ok && r.id == id {
			return true
		}
	}
	return false
}

// heal: every instance back, every PNR answered (refused: the GTR has
// given up by now), every wait ended, the reconciler run.
func (m *instModel) heal() {
	for i := range m.up {
		if !m.up[i] {
			m.expire(i)
			m.restart(i)
		}
	}
	for range 10 {
		for n := 0; len(m.runs) > 0 && n < 100; n++ {
			before := len(m.runs)
			for _, r := range append([]*instRun(nil), m.runs...) {
				m.advance(r) // a run parked mid-way by a script
			}
			m.markSending(-1)
			m.gtr(0, false)
			m.wake()
			if len(m.runs) == before {
				m.timeout(0)
			}
		}
		m.reconcile()
	}
}

func (m *instModel) check() error {
	if len(m.broken) > 0 {
		return errors.New(m.broken[0])
	}
	for id, n := range m.sends {
		if n > 1 {
			return fmt.Errorf("at most one issuer call per ID: %s sent %d times", id, n)
		}
	}
	for id, answers := range m.answers {
		row := m.db[id]
		for _, a := range answers {
			switch {
			case a == cellside.StateSending && !row.rec.State.Terminal():
				return fmt.Errorf("a PENDING answer ends final: %s answered PENDING, its record ended %s", id, row.rec.State)
			case a.Terminal() && a != row.rec.State:
				return fmt.Errorf("every answer equals the final record: %s answered %s, record %s", id, a, row.rec.State)
			}
		}
		if row.rec.State == cellside.StateApproved != m.applied[id] {
			return fmt.Errorf("the record agrees with the issuer: %s is %s, issuer applied %v", id, row.rec.State, m.applied[id])
		}
	}
	return nil
}

func instProperty(rules instRules) func(*rapid.T) {
	return func(t *rapid.T) {
		m := newInstModel(rules)
		inst := func(t *rapid.T) int { return rapid.IntRange(0, numInstances-1).Draw(t, "instance") }
		t.Repeat(map[string]func(*rapid.T){
			"submit":    func(t *rapid.T) { m.submit(inst(t), rapid.SampledFrom(ids[:2]).Draw(t, "id")) },
			"proceed":   func(t *rapid.T) { m.gtr(rapid.IntRange(0, 3).Draw(t, "k"), true) },
			"refuse":    func(t *rapid.T) { m.gtr(rapid.IntRange(0, 3).Draw(t, "k"), false) },
			"wake":      func(*rapid.T) { m.wake() },
			"timeout":   func(t *rapid.T) { m.timeout(rapid.IntRange(0, 3).Draw(t, "k")) },
			"crash":     func(t *rapid.T) { m.crash(inst(t)) },
			"expire":    func(t *rapid.T) { m.expire(inst(t)) },
			"restart":   func(t *rapid.T) { m.restart(inst(t)) },
			"reconcile": func(*rapid.T) { m.reconcile() },
			"": func(t *rapid.T) {
				if len(m.broken) > 0 {
					t.Fatalf("%s\ntrace:\n  %s", m.broken[0], strings.Join(m.log, "\n  "))
				}
			},
		})
		m.heal()
		if err := m.check(); err != nil {
			t.Fatalf("%v\ntrace:\n  %s", err, strings.Join(m.log, "\n  "))
		}
	}
}

// TestInstances: two instances of a cell, with crashes, lease expiry and
// restarts, keep the invariants.
func TestInstances(t *testing.T) {
	pinSearch(t, protocolChecks)
	done := withTimeout(t)
	defer done()
	rapid.Check(t, instProperty(instRules{}))
}

// TestInstancesCatchBrokenRules: each knob's break is found.
func TestInstancesCatchBrokenRules(t *testing.T) {
	tests := []struct {
		name  string
		rules instRules
		want  string
	}{
		{"restart abandons without the lease check", instRules{AbandonIgnoresLease: true}, "a restart abandons only rows no live instance works on"},
		{"Active from the process's memory", instRules{ActiveFromMemory: true}, "a PENDING answer ends final"},
	}
	noFailFile(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := withTimeout(t)
			defer done()
			rec := &recorder{TB: t}
			rapid.Check(rec, instProperty(tt.rules))
			if !rec.failed {
				t.Fatalf("rapid found no counterexample with %+v", tt.rules)
			}
			t.Log(firstLines(rec.out.String(), 1))
			if !regexp.MustCompile(tt.want).MatchString(rec.out.String()) {
				t.Errorf("counterexample does not break %q:\n%s", tt.want, rec.out.String())
			}
		})
	}
}

// TestInstancesScripted pins the two traces of issue #11.
func TestInstancesScripted(t *testing.T) {
	// A duplicate at the sibling while the first attempt's PNR is open;
	// the GTR refuses it.
	dup := func(m *instModel) {
		m.submit(0, "t0")
		m.markSending(0)
		m.submit(1, "t0")
		m.gtr(0, false)
		m.heal()
	}
	// A sibling restarts while an attempt is short of its PNR.
	restart := func(m *instModel) {
		m.crash(1)
		m.submit(0, "t0") // parked short of its PNR: the row is received, owned by 0
		m.restart(1)
		m.heal()
	}
	for _, tt := range []struct {
		name   string
		rules  instRules
		script func(*instModel)
		want   string // "" for no violation
	}{
		{"duplicate at a sibling waits", instRules{}, dup, ""},
		{"duplicate at a sibling, Active from memory", instRules{ActiveFromMemory: true}, dup, "a PENDING answer ends final"},
		{"restart leaves a live sibling's row", instRules{}, restart, ""},
		{"restart without the lease check", instRules{AbandonIgnoresLease: true}, restart, "a restart abandons only rows no live instance works on"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := newInstModel(tt.rules)
			tt.script(m)
			err := m.check()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("%v\ntrace:\n  %s", err, strings.Join(m.log, "\n  "))
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("got %v, want %q\ntrace:\n  %s", err, tt.want, strings.Join(m.log, "\n  "))
			}
		})
	}
}
