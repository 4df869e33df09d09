package model

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// A cell's store that loses its last commits: its database promoted from
// an asynchronous copy behind it, as when a site is lost
// (docs/design/sites.md, "A site lost" and "Step 4"), and the recovery
// the cell then does from the issuer's record of what it applied for the
// cell.
//
//   - The issuer keeps a journal of every effect it applied (issued), in
//     the order it applied them, each with the cell that sent it (its
//     terminal_id), as issuersim's journal does for ListEffects.
//   - Each cell's store keeps a bounded history of its images (storeImage,
//     the last maxImages), one after every step that changed it. A copy
//     behind holds a prefix of the store's commits; an image at a step's
//     end is one such prefix (a step's writes in order), so the loss
//     (loseCommits) restores one of them: the cell crashes (its attempts
//     in flight end as a crash's do), and its store becomes the image. The
//     issuer and the directory keep everything.
//   - The recovery (recoverCell) is issuercheck.Check with store.Recover
//     as its Recorder, which cmd/cell/internal makes unimportable here, so
//     its pure parts are mirrored: compareEffect is issuercheck.Compare,
//     recoveredRecord issuercheck.Recovered (loss_test.go holds them to
//     the code's on a table). It walks the issuer's journal of the cell's
//     effects in order and writes each the cell has no record of at all:
//     final, marked recovered, no fingerprint, and an approved capture's,
//     refund's or void's sums on its original, as store.Recover does.
//     Records the copy holds short of the issuer's outcome are left to the
//     reconciler (issuercheck's Unresolved).
//   - The invariant (effectsHeld): every effect the issuer applied is held
//     by the cell that sent it with its outcome (Compare's Agrees), once
//     healed, or by the owner that completed a retry of it (heldByOwner);
//     before, a record short of final may still be resolving, and in a
//     cell that lost commits a record may be missing until its recovery
//     covers it (a request sent before the loss may be applied after a
//     recovery), or abandoned by a retry served meanwhile.
//   - A decision the issuer never saw, lost with the store (lostUnseen),
//     is let go by the healed checks, as the design lets it go.
//
// The loss is limited (lossPoints): an image that holds a payment short
// of its point of no return (received, abandoned or deciding) where the
// store has since passed it is not restored, unless Rules.LossAnyPoint.
// Such a copy is as likely as any other (the sending write and the issuer
// call that follows it are milliseconds apart, a copy's lag seconds), but
// it breaks the invariants (restart abandons the received record of an
// effect the issuer applied, and neither the reconciler nor the recovery
// writes it); Rules.LossAnyPoint shows it.

// maxImages bounds each cell's history of store images: the loss goes
// back at most that many changes.
const maxImages = 64

// issued is one effect the issuer applied, as its journal records it
// (issuerproto.RecordedEffect): the transaction, the cell that sent it,
// its kind (an authorization, or an adjustment's kind) and original, and
// its outcome, with an approval's amount and currency (a void's: the
// authorization it released). payload and fu are no part of it: what the
// model knows the request held, for the model's own bookkeeping of a
// recovered record (its checks' payloads), never shown to the cell.
type issued struct {
	id       string
	cell     int
	kind     cellpayv1.PaymentType
	orig     string
	approved bool
	amount   int64
	currency string
	auth     string
	reason   string
	payload  payload
	fu       fuPayload
}

// storeImage is a cell's store at one point: its records by value (the
// follow-ups' cellside.Record is never changed in place, only replaced).
type storeImage struct {
	db  map[string]record
	fdb map[string]fuRecord
}

// losses is the model's part for lost commits.
type losses struct {
	// journal: the issuer's effects, in the order applied.
	journal []issued
	// track: images are kept (a mix with the loss on).
	track  bool
	images [numCells][]storeImage
	// lost: the cell lost commits and has not recovered since; everLost:
	// it lost some once; recoveredUpTo: the journal's length at its last
	// recovery.
	lost          [numCells]bool
	everLost      [numCells]bool
	recoveredUpTo [numCells]int
	// unwound: per cell, the IDs a loss dropped the record of, or took
	// back short of its point of no return.
	unwound [numCells]map[string]bool
}

func newLosses() losses {
	var l losses
	for i := range l.unwound {
		l.unwound[i] = map[string]bool{}
	}
	return l
}

// lostUnseen reports whether cell i lost its record of id to a loss
// (dropped, or taken back short of its point of no return), holds none a
// read returns since, and the issuer applied nothing under id: a decision
// the issuer never saw (a decline before the point of no return, FAILED
// issuer_not_reached, or a PENDING whose send never reached it), which
// the recovery cannot write and the design lets go (docs/design/sites.md,
// "A site lost": a partner's retry decides it again; its directory entry,
// if final, answers it meanwhile).
func (m *model) lostUnseen(i int, id string) bool {
	if !m.unwound[i][id] || m.effects[id] > 0 {
		return false
	}
	if r, ok := m.cells[i].db[id]; ok && r.pastPNR() {
		return false
	}
	f, ok := m.cells[i].fdb[id]
	return !ok || f.rec.State == cellside.StateAbandoned
}

// heldAnywhere reports whether some cell holds a record of id that a
// read returns: a payment's past its point of no return, a follow-up's
// not abandoned.
func (m *model) heldAnywhere(id string) bool {
	for _, cl := range m.cells {
		if r, ok := cl.db[id]; ok && r.pastPNR() {
			return true
		}
		if f, ok := cl.fdb[id]; ok && f.rec.State != cellside.StateAbandoned {
			return true
		}
	}
	return false
}

// lostUnseenAnywhere is lostUnseen in some cell.
func (m *model) lostUnseenAnywhere(id string) bool {
	for i := range m.cells {
		if m.lostUnseen(i, id) {
			return true
		}
	}
	return false
}

// journalAuthorize records the issuer's outcome r of an authorization of
// id with payload p, sent by cell.
func (m *model) journalAuthorize(cell int, id string, p payload, r result) {
	e := issued{id: id, cell: cell, kind: cellpayv1.PaymentType_CARD_AUTHORIZATION, payload: p}
	m.journalOutcome(&e, r, amountOf(p))
}

// journalAdjust records the issuer's outcome r of adjustment id with
// payload p, sent by cell: an approval's amount is the one applied (a
// void's, its authorization's).
func (m *model) journalAdjust(cell int, id string, p fuPayload, r result) {
	e := issued{id: id, cell: cell, kind: p.kind, orig: p.orig, fu: p}
	m.journalOutcome(&e, r, m.applied[id].amount)
}

func (m *model) journalOutcome(e *issued, r result, amount int64) {
	if r.status == "APPROVED" {
		e.approved, e.auth, e.amount, e.currency = true, r.auth, amount, "EUR"
	} else {
		e.reason = r.reason
	}
	m.journal = append(m.journal, *e)
}

// effectKind is what compareEffect found (issuercheck.Kind).
type effectKind int

const (
	effectAgrees effectKind = iota
	effectMissing
	effectUnresolved
	effectDiffers
)

var effectKindNames = [...]string{"agrees", "missing", "unresolved", "differs"}

func (k effectKind) String() string { return effectKindNames[k] }

// compareEffect is issuercheck.Compare: effect e against the cell's
// record r of its transaction (nil: none).
func compareEffect(e issued, r *cellside.Record) effectKind {
	if r == nil {
		return effectMissing
	}
	switch {
	case !r.State.Terminal() && r.State != cellside.StateAbandoned:
		return effectUnresolved
	case r.PaymentType != e.kind || e.orig != r.Original:
		return effectDiffers
	case r.State == cellside.StateApproved && e.approved:
		if e.auth != r.AuthCode || e.kind != cellpayv1.PaymentType_VOID && (e.amount != r.Amount || e.currency != r.Currency) {
			return effectDiffers
		}
	case r.State == cellside.StateDeclined && !e.approved:
	default:
		return effectDiffers
	}
	return effectAgrees
}

// recoveredRecord is issuercheck.Recovered: the record of e for the cell
// that lost its own, final with the issuer's outcome, marked recovered
// with no fingerprint, created when the issuer applied it (the model's
// one time).
func recoveredRecord(e issued, now time.Time) *cellside.Record {
	r := &cellside.Record{
		TransactionID: e.id, PartnerID: partner, FingerprintKeyID: cellside.RecoveredKeyID,
		PaymentType: e.kind, Original: e.orig, CellID: cellName(e.cell), Attempt: 1,
		CreatedAt: modelTime.UTC().Truncate(time.Microsecond), UpdatedAt: now.UTC().Truncate(time.Microsecond),
	}
	if e.approved {
		r.State, r.AuthCode, r.Amount, r.Currency = cellside.StateApproved, e.auth, e.amount, e.currency
	} else {
		r.State, r.DeclineReason = cellside.StateDeclined, e.reason
	}
	return r
}

// recordOf is cell i's record of id as its store reads it, a payment's or
// a follow-up's (one key space); nil when it has none.
func (m *model) recordOf(i int, id string) *cellside.Record {
	cl := m.cells[i]
	if r, ok := cl.db[id]; ok {
		return orchestratorRecord(i, id, r)
	}
	if f, ok := cl.fdb[id]; ok {
		return f.rec
	}
	return nil
}

// --- the store's images ---

// image is cell i's store now.
func (m *model) image(i int) storeImage {
	cl := m.cells[i]
	img := storeImage{db: make(map[string]record, len(cl.db)), fdb: make(map[string]fuRecord, len(cl.fdb))}
	for id, r := range cl.db {
		img.db[id] = *r
	}
	for id, f := range cl.fdb {
		img.fdb[id] = *f
	}
	return img
}

// holdsImage reports whether cell i's store is img.
func (m *model) holdsImage(i int, img storeImage) bool {
	cl := m.cells[i]
	if len(cl.db) != len(img.db) || len(cl.fdb) != len(img.fdb) {
		return false
	}
	for id, r := range cl.db {
		if o, ok := img.db[id]; !ok || o != *r {
			return false
		}
	}
	for id, f := range cl.fdb {
		if o, ok := img.fdb[id]; !ok || o != *f {
			return false
		}
	}
	return true
}

// snapshot keeps each cell's store as an image if it changed since the
// last, the last maxImages of them.
func (m *model) snapshot() {
	if !m.track {
		return
	}
	for i := range m.cells {
		imgs := m.images[i]
		if len(imgs) > 0 && m.holdsImage(i, imgs[len(imgs)-1]) {
			continue
		}
		if len(imgs) == maxImages {
			imgs = slices.Delete(imgs, 0, 1)
		}
		m.images[i] = append(imgs, m.image(i))
	}
}

// lossPoints are the images of cell i's history its store may lose its
// commits back to (indexes, the last, its store now, excluded): every
// one with LossAnyPoint, else those that hold no payment short of its
// point of no return that the store has since passed (see the file's
// comment).
func (m *model) lossPoints(i int) []int {
	imgs := m.images[i]
	var out []int
	for j := range max(len(imgs)-1, 0) {
		if m.rules.LossAnyPoint || !m.shortOf(i, imgs[j]) {
			out = append(out, j)
		}
	}
	return out
}

// shortOf reports whether img holds a payment short of its point of no
// return that cell i's store has since passed.
func (m *model) shortOf(i int, img storeImage) bool {
	for id, r := range img.db {
		if cur := m.cells[i].db[id]; !r.pastPNR() && cur != nil && cur.pastPNR() {
			return true
		}
	}
	return false
}

// loseCommits is a cell's store losing its last commits: a cell with a
// loss point, one of them; the cell crashes (if up) and its store becomes
// that image. false when no cell has one.
func (m *model) loseCommits(r chooser) bool {
	var cells []int
	for i := range m.cells {
		if len(m.lossPoints(i)) > 0 {
			cells = append(cells, i)
		}
	}
	if len(cells) == 0 {
		return false
	}
	i := cells[r.IntN(len(cells))]
	points := m.lossPoints(i)
	m.loseCommitsTo(i, points[r.IntN(len(points))])
	return true
}

// loseCommitsTo is cell i's store losing every commit after its image j:
// the cell crashes (if up), and its store becomes the image.
func (m *model) loseCommitsTo(i, j int) {
	img, back := m.images[i][j], len(m.images[i])-1-j
	if m.cells[i].up {
		m.crash(i)
	}
	cl := m.cells[i]
	var dropped, rolled []string
	for _, id := range slices.Sorted(maps.Keys(cl.db)) {
		if o, ok := img.db[id]; !ok {
			dropped = append(dropped, id)
			m.unwound[i][id] = true
		} else if o != *cl.db[id] {
			rolled = append(rolled, fmt.Sprintf("%s %s->%s", id, cl.db[id].state, o.state))
			if !o.pastPNR() {
				m.unwound[i][id] = true
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(cl.fdb)) {
		if o, ok := img.fdb[id]; !ok {
			dropped = append(dropped, id)
			m.unwound[i][id] = true
		} else if o != *cl.fdb[id] {
			rolled = append(rolled, fmt.Sprintf("%s %s->%s", id, cl.fdb[id].rec.State, o.rec.State))
		}
	}
	cl.db, cl.fdb = map[string]*record{}, map[string]*fuRecord{}
	for id, r := range img.db {
		cl.db[id] = &r
	}
	for id, f := range img.fdb {
		cl.fdb[id] = &f
	}
	m.images[i] = m.images[i][:j+1]
	m.lost[i], m.everLost[i] = true, true
	m.cover(covLostCommits)
	m.logf("cell %d: store lost its last commits (back %d changes): dropped [%s], rolled back [%s]",
		i, back, strings.Join(dropped, " "), strings.Join(rolled, ", "))
}

// --- the recovery ---

// recoverStep is a recovery step: a cell up that lost commits and has not
// recovered since recovers; false when there is none.
func (m *model) recoverStep(r chooser) bool {
	var cells []int
	for i, cl := range m.cells {
		if m.lost[i] && cl.up {
			cells = append(cells, i)
		}
	}
	if len(cells) == 0 {
		return false
	}
	m.recoverCell(cells[r.IntN(len(cells))])
	return true
}

// recoverLost is the recovery of every cell that ever lost commits, once
// healed: a routine check (issuercheck.Watcher) over a window reaching
// back before the loss finds what was applied since its last recovery
// too (a request sent before the loss, applied after it).
func (m *model) recoverLost() {
	for i := range m.cells {
		if m.everLost[i] {
			m.recoverCell(i)
		}
	}
}

// recoverCell is issuercheck.Check with store.Recover as its Recorder,
// for cell i: the issuer's journal of the effects i sent, in order, and
// for each that i holds no record of (effectMissing), the recovered
// record, with an approved follow-up's sums on its original in the same
// write. An ID applied twice (Rules.IssuerNoDedupe) finds its record
// written by the first.
//
// The sums' update is held to the table's CHECK on them
// (transactions_followup_sums, followup.Ledger.Valid): one that would
// break it (a follow-up of the original held meanwhile, which the copy's
// ledger allowed without the lost one: a void held on an authorization
// whose capture was lost) fails the statement, nothing is written, and
// the walk stops there with the error, as Check does; the cell stays
// unrecovered, and the next recovery tries again.
func (m *model) recoverCell(i int) {
	cl := m.cells[i]
	var wrote []string
	defer func() { m.logf("cell %d: recovered from the issuer's record: [%s]", i, strings.Join(wrote, ", ")) }()
	for _, e := range m.journal {
		if e.cell != i || compareEffect(e, m.recordOf(i, e.id)) != effectMissing {
			continue
		}
		rec := recoveredRecord(e, modelTime)
		if e.kind == cellpayv1.PaymentType_CARD_AUTHORIZATION {
			cl.db[e.id] = &record{state: state(rec.State), payload: e.payload, auth: rec.AuthCode, reason: rec.DeclineReason,
				attempt: noAttempt, recovered: rec}
		} else {
			if o := cl.db[e.orig]; o != nil && e.approved {
				l := orchestratorRecord(i, e.orig, o).Ledger
				switch e.kind {
				case cellpayv1.PaymentType_CAPTURE:
					l.Captured += e.amount
				case cellpayv1.PaymentType_REFUND:
					l.Refunded += e.amount
				case cellpayv1.PaymentType_VOID:
					l.Voided = true
				}
				if !l.Valid() {
					wrote = append(wrote, fmt.Sprintf("%s refused: %s's sums would break their check, %+v", e.id, e.orig, l))
					return
				}
				l.Authorized = 0
				o.ledger = l
			}
			cl.fdb[e.id] = &fuRecord{rec: rec, p: e.fu}
		}
		wrote = append(wrote, fmt.Sprintf("%s %s", e.id, rec.State))
		m.cover(covRecovered)
	}
	m.lost[i], m.recoveredUpTo[i] = false, len(m.journal)
}

// --- the invariant ---

// effectsHeld: every effect the issuer applied (the first per ID) is held
// by the cell that sent it, with its outcome (compareEffect's Agrees), or
// by the owner that completed a retry of it (heldByOwner). Before healed,
// a record short of final may still be resolving, one may be missing from
// a cell that lost commits until its recovery covers it, and one a retry
// abandoned in such a cell may yet be completed by another.
func (m *model) effectsHeld(healed bool) error {
	seen := make(map[string]bool, len(m.journal))
	for n, e := range m.journal {
		if seen[e.id] {
			continue
		}
		seen[e.id] = true
		r := m.recordOf(e.cell, e.id)
		k := compareEffect(e, r)
		switch {
		case k == effectAgrees:
			continue
		case m.heldByOwner(e, r, healed):
			continue
		case healed:
		case k == effectUnresolved:
			continue
		case k == effectMissing && m.everLost[e.cell] && (m.lost[e.cell] || n >= m.recoveredUpTo[e.cell]):
			continue
		case k == effectDiffers && r.State == cellside.StateAbandoned && m.everLost[e.cell]:
			// A retry served after the loss and before the recovery (the
			// record received, then abandoned); another cell may yet take
			// the entry over and complete it (heldByOwner), so it is
			// judged once healed.
			continue
		}
		return fmt.Errorf("every issuer effect is held by the cell that sent it: %s (%s) in cell %d is %s: %s",
			e.id, describeIssued(e), e.cell, k, describeHeld(r))
	}
	return nil
}

// heldByOwner reports whether effect e, whose sending cell lost commits
// and holds r, abandoned, is held by the cell its directory entry names
// (with its outcome; before healed, short of final too): the cell that
// lost its record served a retry before its recovery ran, from scratch
// (received, then abandoned before its point of no return), and another
// cell took the entry over and completed the transaction at the issuer,
// which answered it the outcome it had applied. One effect, held by its
// owner; the sender's issuer check reports its abandoned record as
// differing (issuercheck.Compare), and the recovery leaves it.
func (m *model) heldByOwner(e issued, r *cellside.Record, healed bool) bool {
	if r == nil || r.State != cellside.StateAbandoned || !m.everLost[e.cell] {
		return false
	}
	k := m.payKeyEntry(e.id)
	if e.kind != cellpayv1.PaymentType_CARD_AUTHORIZATION {
		k = m.fuKeyEntry(e.id)
	}
	if !k.found || k.owner == e.cell {
		return false
	}
	switch compareEffect(e, m.recordOf(k.owner, e.id)) {
	case effectAgrees:
		return true
	case effectUnresolved:
		return !healed
	}
	return false
}

func describeIssued(e issued) string {
	what := e.kind.String()
	if e.orig != "" {
		what += " of " + e.orig
	}
	if !e.approved {
		return fmt.Sprintf("declined %s: %s", what, e.reason)
	}
	return fmt.Sprintf("approved %s, %d %s, auth %s", what, e.amount, e.currency, e.auth)
}

func describeHeld(r *cellside.Record) string {
	if r == nil {
		return "no record"
	}
	return fmt.Sprintf("%s %s, %d %s, auth %q, reason %q, recovered %v", r.State, r.PaymentType, r.Amount, r.Currency, r.AuthCode, r.DeclineReason, r.Recovered())
}
