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
//     and store.CatchUp as its Recorder and the directory as its Owner,
//     which cmd/cell/internal makes unimportable here, so its pure parts
//     are mirrored: compareEffect is issuercheck.Compare, judgeEffect
//     Check's finding with an Owner, recoveredRecord issuercheck.Recovered,
//     caughtUpRecord issuercheck.CaughtUp (loss_test.go holds them to the
//     code's on tables). It walks the issuer's journal of the cell's
//     effects in order and writes each the cell has no record of at all
//     (Missing): final, marked recovered, no fingerprint, and an approved
//     capture's, refund's or void's sums on its original, as store.Recover
//     does; and brings each payment's record the cell holds behind to the
//     issuer's outcome in place, its payload and fingerprint kept, no sums
//     moved, as store.CatchUp does: received (Compare's Behind: the state
//     never reaches the issuer, so only lost commits explain it), or
//     abandoned under the cell's own directory entry (the start abandons
//     its received rows, so a copy's received record reaches the check
//     abandoned). An abandoned record under another cell's entry is held
//     elsewhere (Elsewhere: a released cell's record, or a retry's whose
//     transaction another cell took over, that cell holding the effect),
//     and an abandoned follow-up under the cell's own entry is Differs
//     (its hold released: for a person); neither is written. Records the
//     copy holds sending or deciding are the reconciler's (Unresolved).
//   - It runs when the cell restarts after a loss, before it serves
//     (restart; the cell's -recover-at-start, with which the site-loss
//     procedure starts a promoted copy, cell.recoverFirst), after a
//     reconciler's round over the cell's records sending or deciding (so
//     that a follow-up held sending does not keep a later one the issuer
//     applied from being recorded over its hold: the sums' CHECK): a
//     recovery that still fails stops the start, and the cell stays down
//     until a later restart (a restart step, or heal's) passes both, as
//     recoverFirst tries them again every 2 s. It runs again as a routine
//     check (the recover step: issuercheck.Watcher, whose window reaches
//     back past what a request sent before the loss and applied after the
//     restart needs), and once healed.
//   - The invariant (effectsHeld): every effect the issuer applied is held
//     by the cell that sent it with its outcome (Compare's Agrees), once
//     healed, or, held elsewhere, by the owner that completed it
//     (heldByOwner); before, a record sending or deciding may still be
//     resolving, and in a cell that lost commits a record may be missing,
//     received or abandoned for an effect no recovery has walked past
//     since (a request sent before the loss, applied after the recovery at
//     restart). Once healed every cell serves (no start left stopped).
//   - A decision the issuer never saw, lost with the store (lostUnseen),
//     is let go by the healed checks, as the design lets it go.
//
// The loss is limited (lossPoints): an image that holds a payment short
// of its point of no return (received, abandoned or deciding) where the
// store has since passed it is not restored, unless Rules.LossAnyPoint.
// Such a copy is as likely as any other (the sending write and the issuer
// call that follows it are milliseconds apart, a copy's lag seconds). It
// broke the invariants while the recovery wrote only what was missing
// (restart abandons the received record of an effect the issuer applied);
// the recovery now catches such a record up (Behind, under the cell's own
// entry), and Rules.LossAnyPoint's sweep finds what the default's does.

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
	// requested and requestedCurrency: what the request asked for
	// (RecordedEffect's requested_amount_minor_units), approved or not.
	requested         int64
	requestedCurrency string
	auth              string
	reason            string
	payload           payload
	fu                fuPayload
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
	e := issued{id: id, cell: cell, kind: cellpayv1.PaymentType_CARD_AUTHORIZATION, payload: p, requested: amountOf(p), requestedCurrency: "EUR"}
	m.journalOutcome(&e, r, amountOf(p))
}

// journalAdjust records the issuer's outcome r of adjustment id with
// payload p, sent by cell: an approval's amount is the one applied (a
// void's, its authorization's).
func (m *model) journalAdjust(cell int, id string, p fuPayload, r result) {
	e := issued{id: id, cell: cell, kind: p.kind, orig: p.orig, fu: p, requested: p.amount, requestedCurrency: "EUR"}
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
	effectBehind
	effectElsewhere
)

var effectKindNames = [...]string{"agrees", "missing", "unresolved", "differs", "behind", "elsewhere"}

func (k effectKind) String() string { return effectKindNames[k] }

// compareEffect is issuercheck.Compare: effect e against the cell's
// record r of its transaction (nil: none). Behind: r is received (a state
// that never reaches the issuer) where the issuer applied e for this cell,
// judged after the payment type and original, whose mismatch stays
// Differs. An abandoned record is Differs here, whatever the issuer
// applied: judgeEffect (Check) asks the directory about it.
func compareEffect(e issued, r *cellside.Record) effectKind {
	if r == nil {
		return effectMissing
	}
	behind := r.State == cellside.StateReceived
	switch {
	case !r.State.Terminal() && !behind && r.State != cellside.StateAbandoned:
		return effectUnresolved
	case r.PaymentType != e.kind || e.orig != r.Original:
		return effectDiffers
	case behind:
		return effectBehind
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

// judgeEffect is issuercheck.Check's finding for effect e, which cell i
// sent, against i's record r of its transaction: compareEffect, and, with
// the directory (Check's Owner; none with Rules.NoDirectory), an abandoned
// record's Differs asked of the directory's owner of the key (keyOwner):
// Elsewhere when it names another cell (a released cell's record, the
// transaction taken over by a cell that holds the effect: not a
// discrepancy, never written); Behind when it names i and the record is a
// payment's (no original: a record the copy held short of its outcome,
// abandoned at the restart), which the recovery catches up. An abandoned
// follow-up under i's own entry stays Differs, for a person.
func (m *model) judgeEffect(i int, e issued, r *cellside.Record) effectKind {
	k := compareEffect(e, r)
	if k != effectDiffers || r.State != cellside.StateAbandoned || m.rules.NoDirectory {
		return k
	}
	switch o := m.keyOwner(i, e.id); {
	case o.found && o.owner != i:
		return effectElsewhere
	case o.found && r.Original == "":
		return effectBehind
	}
	return k
}

// keyOwner is the directory's entry of id's key as cell i's Check reads
// it (directory.Get: one entry per key), through the kind of the record
// i holds of it.
func (m *model) keyOwner(i int, id string) keyEntry {
	if _, ok := m.cells[i].db[id]; ok {
		return m.payKeyEntry(id)
	}
	return m.fuKeyEntry(id)
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
		r.Amount, r.Currency = e.requested, e.requestedCurrency
	}
	return r
}

// caughtUpRecord is issuercheck.CaughtUp: record r, which judgeEffect
// found behind effect e, brought to the issuer's outcome: final, with its
// authorization code or decline reason, updated now; everything else (its
// payload, its fingerprint, its amount) is the record's.
func caughtUpRecord(e issued, r *cellside.Record, now time.Time) *cellside.Record {
	out := *r
	out.UpdatedAt = now.UTC().Truncate(time.Microsecond)
	if e.approved {
		out.State, out.AuthCode, out.DeclineReason = cellside.StateApproved, e.auth, ""
	} else {
		out.State, out.AuthCode, out.DeclineReason = cellside.StateDeclined, "", e.reason
	}
	return &out
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

// recoverStep is a routine check (issuercheck.Watcher, with store.Recover
// and store.CatchUp as its Recorder) in a cell up that lost commits once
// and has something to find: an effect the issuer applied for it since
// its last recovery (a request sent before the loss, applied after the
// recovery at restart), or a recovery refused; false when there is none.
func (m *model) recoverStep(r chooser) bool {
	var cells []int
	for i, cl := range m.cells {
		if cl.up && m.everLost[i] && m.checkDue(i) {
			cells = append(cells, i)
		}
	}
	if len(cells) == 0 {
		return false
	}
	m.recoverCell(cells[r.IntN(len(cells))])
	return true
}

// checkDue reports whether cell i is unrecovered since it lost commits,
// or the issuer applied an effect for it since its last recovery.
func (m *model) checkDue(i int) bool {
	return m.lost[i] || slices.ContainsFunc(m.journal[m.recoveredUpTo[i]:], func(e issued) bool { return e.cell == i })
}

// recoverLost is the recovery of every cell that ever lost commits, once
// healed: a routine check (issuercheck.Watcher) over a window reaching
// back before the loss finds what was applied since its last recovery
// too (a request sent before the loss, applied after it); a cell whose
// start its recovery stopped tries the start again (restart: the
// reconciler's round, then the check).
func (m *model) recoverLost() {
	for i, cl := range m.cells {
		switch {
		case !m.everLost[i]:
		case cl.up:
			m.recoverCell(i)
		default:
			m.restart(i)
		}
	}
}

// recoverCell is issuercheck.Check with store.Recover and store.CatchUp as
// its Recorder and the directory as its Owner, for cell i: the issuer's
// journal of the effects i sent, in order, each judged (judgeEffect); for
// each that i holds no record of (effectMissing), the recovered record,
// with an approved follow-up's sums on its original in the same write;
// for each i holds behind (received; or abandoned under its own entry),
// the record brought to the issuer's outcome in place (caughtUpRecord), a
// payment's only, and no sums moved (store.CatchUp's statement: a
// follow-up is never received, and one abandoned had its hold released);
// one held elsewhere (abandoned, another cell's entry) is left as it is,
// held by that cell. An ID applied twice (Rules.IssuerNoDedupe) finds its
// record written by the first. It runs at the cell's restart after a
// loss, before the cell serves, after the reconciler's round (restart:
// -recover-at-start), as a routine check (recoverStep), and once healed
// (recoverLost).
//
// The sums' update is held to the table's CHECK on them
// (transactions_followup_sums, followup.Ledger.Valid): one that would
// break it (a follow-up of the original held meanwhile, which the copy's
// ledger allowed without the lost one: a void held on an authorization
// whose capture was lost) fails the statement, nothing is written, and
// the walk stops there with the error, as Check does; the cell stays
// unrecovered, and the next recovery tries again. It reports whether the
// walk went through.
func (m *model) recoverCell(i int) bool {
	cl := m.cells[i]
	var wrote []string
	defer func() { m.logf("cell %d: recovered from the issuer's record: [%s]", i, strings.Join(wrote, ", ")) }()
	for _, e := range m.journal {
		if e.cell != i {
			continue
		}
		held := m.recordOf(i, e.id)
		switch m.judgeEffect(i, e, held) {
		case effectMissing:
			rec := recoveredRecord(e, modelTime)
			if e.kind == cellpayv1.PaymentType_CARD_AUTHORIZATION {
				cl.db[e.id] = &record{state: state(rec.State), payload: e.payload, auth: rec.AuthCode, reason: rec.DeclineReason,
					attempt: noAttempt, recovered: rec}
			} else {
				if err := m.moveSums(i, e.orig, rec); err != nil {
					wrote = append(wrote, fmt.Sprintf("%s refused: %v", e.id, err))
					return false
				}
				cl.fdb[e.id] = &fuRecord{rec: rec, p: e.fu}
			}
			wrote = append(wrote, fmt.Sprintf("%s %s", e.id, rec.State))
			m.cover(covRecovered)
		case effectBehind:
			r := cl.db[e.id]
			if held.Original != "" || r == nil {
				// store.CatchUp writes a payment's record only.
				wrote = append(wrote, fmt.Sprintf("%s (%s) not caught up: a follow-up's", e.id, held.State))
				continue
			}
			out := caughtUpRecord(e, held, modelTime)
			r.state, r.auth, r.reason = state(out.State), out.AuthCode, out.DeclineReason
			wrote = append(wrote, fmt.Sprintf("%s %s->%s", e.id, held.State, out.State))
			m.cover(covRecovered)
		case effectElsewhere:
			wrote = append(wrote, fmt.Sprintf("%s (%s) held elsewhere", e.id, held.State))
		}
	}
	m.lost[i], m.recoveredUpTo[i] = false, len(m.journal)
	return true
}

// moveSums is the recovery's statements' update of original orig's sums
// in cell i for follow-up f written final (store.Recover's and
// store.CatchUp's): an approved one's amount on its kind's sum, whatever
// the original's state, under the sums' CHECK; an error, and nothing
// moved, when it would break it. An original the cell does not hold moves
// nothing.
func (m *model) moveSums(i int, orig string, f *cellside.Record) error {
	o := m.cells[i].db[orig]
	if o == nil || f.State != cellside.StateApproved {
		return nil
	}
	l := orchestratorRecord(i, orig, o).Ledger
	switch f.PaymentType {
	case cellpayv1.PaymentType_CAPTURE:
		l.Captured += f.Amount
	case cellpayv1.PaymentType_REFUND:
		l.Refunded += f.Amount
	case cellpayv1.PaymentType_VOID:
		l.Voided = true
	}
	if !l.Valid() {
		return fmt.Errorf("%s's sums would break their check, %+v", orig, l)
	}
	l.Authorized = 0
	o.ledger = l
	return nil
}

// --- the invariant ---

// effectsHeld: every effect the issuer applied (the first per ID) is held
// by the cell that sent it, with its outcome (compareEffect's Agrees), or,
// where that cell lost commits and its record is abandoned under another
// cell's entry (judgeEffect's Elsewhere), by that cell (heldByOwner).
// Before healed, a record sending or deciding may still be resolving, and
// in a cell that lost commits one may be missing, received, or abandoned
// (behind under its own entry, held elsewhere, or a follow-up's) for an
// effect no recovery has walked past since, until the next one covers it;
// one a retry abandoned there may yet be completed by another.
func (m *model) effectsHeld(healed bool) error {
	seen := make(map[string]bool, len(m.journal))
	for n, e := range m.journal {
		if seen[e.id] {
			continue
		}
		seen[e.id] = true
		r := m.recordOf(e.cell, e.id)
		k := m.judgeEffect(e.cell, e, r)
		switch {
		case k == effectAgrees:
			continue
		case k == effectElsewhere && m.heldByOwner(e, healed):
			continue
		case healed:
		case k == effectUnresolved:
			continue
		case k == effectMissing || k == effectBehind || r.State == cellside.StateAbandoned:
			// Missing, received (a copy behind), or abandoned (a copy
			// behind, abandoned at the restart; or a retry served before
			// a recovery covered it, whose entry another cell may yet take
			// over and complete), in a cell that lost commits, for an
			// effect no recovery has walked past since: the next one
			// records it, or finds it held elsewhere. Anywhere else it is
			// lost.
			if m.everLost[e.cell] && (m.lost[e.cell] || n >= m.recoveredUpTo[e.cell]) {
				continue
			}
		}
		return fmt.Errorf("every issuer effect is held by the cell that sent it: %s (%s) in cell %d is %s: %s",
			e.id, describeIssued(e), e.cell, k, describeHeld(r))
	}
	return nil
}

// heldByOwner reports whether effect e, whose sending cell lost commits
// and holds its record abandoned under another cell's entry (Elsewhere),
// is held by the cell the entry names (with its outcome; before healed,
// sending or deciding too): the cell that lost its record served a retry
// before a recovery covered it, from scratch (received, then abandoned
// before its point of no return), and another cell took the entry over
// and completed the transaction at the issuer, which answered it the
// outcome it had applied. One effect, held by its owner; the sender's
// recovery finds its abandoned record held elsewhere and leaves it
// (issuercheck.Check with an Owner), so once healed the owner alone holds
// it past its point of no return.
func (m *model) heldByOwner(e issued, healed bool) bool {
	if !m.everLost[e.cell] {
		return false
	}
	k := m.keyOwner(e.cell, e.id)
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
