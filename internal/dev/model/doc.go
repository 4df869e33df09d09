// Package model is Cellpay's deterministic simulation of its failover
// protocol and of the follow-ups of an authorization (captures, voids,
// refunds), and the property test over the same world. It drives the real
// state machines of both sides of the protocol, and the follow-ups' real
// pure rules:
//
//   - the cell's cellside.Machine, one per attempt, with a driver
//     (cell.go) that performs its actions as the cell's server does
//     (perform, claim, settleEntry): against the model's records, its
//     transaction directory and its message pool. Every rule of the cell
//     is the machine's: the claim before any durable write and the
//     directory's rules (ALREADY_EXISTS, a final entry's answer, the
//     takeover of an abandoned entry or of an earlier attempt's of the
//     same call, re-routable to the owner, a record always its attempt's
//     claim, a restart taking the entry again, a PENDING from a leftover
//     pinning the entry, a claim again after a wait, a decision before the
//     PNR written to the entry first), the idempotency rules on an
//     existing record, the PNR and the issuer only after Proceed (said
//     with Proceeding), the step back when Proceed does not come in time;
//   - the GTR's gtrside.Call, one per call, and gtrside.Machine, one per
//     attempt, with a driver (gtr.go) that performs their actions as
//     payments.go's submit and attempt do, on a fake clock per call that
//     the attempt timer moves: the call loop (the next cell of the
//     ranking, last_resort on the last attempt, a re-routable answer
//     naming the owner sending the next attempt to it once per call,
//     whatever its weight, the answer) and the handshake (Proceed only
//     for the live attempt, a re-route after it only on the cell's own
//     step back before Proceeding, PENDING only after Proceeding, an
//     unknown outcome answered UNAVAILABLE). The model has no admission
//     limits and no retry budget;
//   - the follow-ups' rules (followup.go), in a driver of the cell's
//     FollowUp (server/followup.go) that follows its order of steps: the
//     record cellside.FollowUpRecord builds and its fingerprint through
//     cellside.AsRequest, the hold decided by cellside.HoldFollowUp on the
//     original as the store reads it under its row lock, the outcome
//     cellside.FollowUpOutcome makes, and every sum an authorization's
//     internal/followup Ledger (Hold, Settle, Valid), in the cells' stores
//     as in the issuer's.
//
// sim.go runs that world on one seed (Run; cmd/cellpay-sim and make sim
// sweep many, RunQuiet, keeping the trace of a failing seed only): the
// seed first draws its fault mix (swarm testing: a weight per kind of
// step, some none, and whether the cells' stores group-commit; the kinds
// added once seeds had been kept, the reuse steps, from a second stream
// of the seed's, and the loss of a store's last commits and its recovery
// from a third, so that a mix that leaves them off runs as before) and
// the trace's first line prints it; a calm start approves the authorizations
// a0 to a2 with no fault (now and then while a replica drains the
// original's home, so that it is recorded on another cell), for the
// follow-ups to act on from the first step, since the safety phase's own
// payments are rarely approved before it heals; a safety phase of steps
// drawn from the mix, every invariant checked after each; then a liveness
// phase, the faults healed (cells restarted, stalls ended, every message
// delivered, every wait timed out, the reconcilers run, and then every
// cell that lost commits recovered), which must converge; and last the checker the end-to-end tests use
// (internal/dev/checker's Judge) over the partners' answers, payments'
// and follow-ups', what a read returns, every cell's records (an
// authorization's ledger and its approved follow-ups' sums, a
// follow-up's kind, original and amount) and the issuer's counters and
// applied amounts. The steps: partners' calls at either GTR replica
// (duplicates, other payloads, calls while a replica drains a cell), a
// partner's capture, void or refund at either replica of an
// authorization it knows approved (answered so, or read so), now and then
// of another, for amounts around the authorization's or the captures',
// now and then over them, and a follow-up ID used again (the same payload,
// or another); one kind's ID used by the other (reuse.go: a follow-up
// under its original's own ID or another payment's, a payment under a
// follow-up's, each sent again like any other); delivery in any order (delay, reordering), issuer messages
// (Authorize and Adjust) and directory updates lost or duplicated, a
// cell's connections stalled and then delivering everything late, an
// issuer request held in a send buffer with its deadline whole, crashes
// and restarts of cells (one between a follow-up's hold and its outcome
// included) and of GTR replicas, issuer, Proceed and attempt timeouts,
// callers' deadlines, and reconciler rounds (which resolve a follow-up
// left sending by inquiry, closing it at the issuer if it has no outcome);
// a payment's claim outlasting its bound, its write landed or not
// (slowclaim.go: the machine hears ClaimFailed, not an outage, and even
// the natural home re-routes; with SlowClaimIsOutage, the rule before
// 2026-12-07, the simulator finds the home deciding what another cell
// decided, testdata/sim/slow-claim-home.txt; and a decline recorded
// alone after its outcome's write was slow, decided again by a later
// attempt of the call, testdata/sim/slow-decision-write.txt);
// two sites, replica 0 with cells 0 and 1 and replica 1 with cell 2, and
// the line between them cut and mended (sites.go: every message between
// a replica and a cell of the other site held while it is cut; the
// directory and the issuer reachable from both, as on one host today);
// a cell's store losing its last commits (loss.go: the cell crashes and
// its store goes back to one of its last 64 images, as a database
// promoted from an asynchronous copy behind it; the issuer and the
// directory keep everything), and the recovery from the issuer's journal
// of the effects the cell sent (issuercheck.Check with store.Recover and
// store.CatchUp as its Recorder and the directory as its Owner: each
// effect the cell holds no record of written final, marked recovered,
// with no fingerprint, an approved follow-up's sum on its original under
// the sums' CHECK; each payment it holds received, or abandoned under its
// own directory entry, brought to the issuer's outcome in place, its
// payload kept, no sums moved; one abandoned under another cell's entry
// held elsewhere, and an abandoned follow-up differing, neither written;
// a replay of a recovered record compared by cellside.MatchesRecovered,
// and never filed in the directory), which runs when the cell restarts,
// before it serves, after a reconciler's round over its records sending
// or deciding (its -recover-at-start, cell.recoverFirst; a recovery that
// still fails stops the start, tried again at a later restart), and again
// as a routine check (the recover step) while it serves.
// A fault that payments and follow-ups share hits a payment's message or
// wait while there is one (paymentsFirst), so that follow-ups, whose
// messages outnumber the payments', do not starve the payments' rarer
// states. After every step, besides the protocol's invariants: every
// authorization's ledger Valid in the cells' stores and at the issuer
// (captured ≤ authorized, refunded ≤ captured, no capture with a void),
// what a ledger holds the sum of its follow-ups in flight (sending) in
// that cell, at most one issuer effect per follow-up ID, one final answer
// per follow-up ID and payload (ALREADY_EXISTS for another), and every
// final answer the issuer's outcome; and one transaction per ID (never a
// payment past its PNR and a follow-up held under one ID, every answer to
// the other kind ALREADY_EXISTS or one that says nothing, UNAVAILABLE,
// DEADLINE_EXCEEDED or a follow-up's original not found, and never
// ALREADY_EXISTS for the transaction's own payload); and every effect the
// issuer applied held by the cell that sent it (its terminal) with its
// outcome (issuercheck.Compare's agrees), or sending or deciding there,
// or, in a cell that lost commits, missing, received or abandoned for an
// effect applied since its last recovery, which the next covers. Once
// healed: every cell serving (none whose start its recovery stopped),
// every
// follow-up call answered and every follow-up resolved (none sending,
// nothing held), the directory's final entries equal to the records, and
// per authorization its approved captures, refunds and void as partners
// know them (their final answers, else what a read returns) equal to the
// issuer's applied adjustments, its ledger at the issuer and its ledger
// in its cell, to the minor unit; and every effect the issuer applied held
// by the cell that sent it with its outcome, or, where that cell lost
// commits and its record is abandoned under another cell's entry
// (issuercheck's elsewhere), by that cell (loss.go's heldByOwner). A
// decision the issuer never saw (a decline before the point of no return,
// FAILED issuer_not_reached, a PENDING whose send never reached it) lost
// with a store is let go, as the design lets it (docs/design/sites.md):
// its answer needs no record, and its final entry none. A run is a
// function of its seed (no goroutine, no clock, every map read whose
// order matters in sorted order; check looks in the maps' own order first
// and again sorted only once it finds a break): the same seed prints the
// same trace. Counters of interesting
// states (Summary.Coverage) show the runs are not vacuous; a state no
// seed reaches fails the sweep.
// TestSimulatorBites breaks rules on purpose (Rules' knobs) and requires
// a violation within 1,000 seeds; testdata/sim keeps the seeds that found
// bugs, replayed on every test run (claim-any-own-entry.txt among them,
// Rules.ClaimAnyOwnEntry: a follow-up's claim took its cell's entry as its
// own whoever claimed it;
// recover-sums-check.txt, with no knob, one of the loss's: the model's
// recovery moved a lost capture's sum onto an authorization holding a
// void, without the sums' CHECK store.Recover's statement is held to).
// The loss's sweep (make sim, and cellpay-sim -rules LossAnyPoint) found
// a gap of the code's, not the model's, at seeds 11614 and 41035: a
// follow-up's record in the copy sending (its settle lost, or its FAILED
// after the ID's close) and a later follow-up of the same original,
// approved by the issuer, lost whole; the recovery at restart left the
// first to the reconciler (Unresolved), which ran only once the cell
// served, and the second's sums broke the CHECK, so the cell never
// started. The start now runs a reconciler round before the check
// (cell.recoverFirst; the model's restart), and both pass; seeds 1 to
// 50,000, and 1 to 20,000 with LossAnyPoint, find nothing (loss.go;
// docs/design/sites.md, Step 4).
//
// rapid_test.go drives the same world through rapid's choice of steps
// (TestProtocol, with group commit and without): the payments' actions
// and faults of its own, and, with the simulator's calm start drawn by
// rapid, the simulator's follow-up steps (captures, voids, refunds, the
// same IDs again, IDs reused across the kinds) and its faults that reach
// the follow-ups, through a chooser over rapid's draws; each run ends
// with converged, the simulator's checks and the checker.
// TestInvariantsCatchBrokenRules searches for each knob's break, the
// payments' without follow-ups. TestScripted, TestReuseScripted,
// TestLossScripted and TestDirectory replay hand-written sequences. The
// loss's steps are the simulator's only: rapid does not draw them.
//
// What stays hand-written, as model code mirroring the production code,
// and why: the parts below are I/O in the real system (Postgres, NATS KV,
// the issuer's service) or live in packages a model outside cmd/cell and
// cmd/gtr cannot import (Go's internal rule: the reconciler is
// cmd/cell/internal/reconcile, the GTR's routing around the call machine
// cmd/gtr/internal/payments). Moving their decisions into pure machines
// under internal/ is how the next of them would be driven here too.
//
//   - the GTR's routing around the call machine (payments.go's route):
//     replicas, each coalescing concurrent duplicates of one ID and
//     payload and remembering, in a bounded FIFO cache, the cell a
//     re-routed transaction completed on; the ranking with that cell
//     promoted and a drained cell skipped;
//   - the transaction directory's store (directory.go): one entry per ID
//     (a payment's or a follow-up's: reuse.go), Claim (Create) and Take
//     (Update at the revision read) atomic, and the best-effort Finalize
//     (the owner's answer, if the entry is the owner's or missing and not
//     final) and Abandon (if the entry is still the stepping-back
//     attempt's claim) as messages that may be delayed, reordered,
//     duplicated, lost or never delivered;
//   - the records' store (one row per ID, a payment's or a follow-up's:
//     Insert, Reclaim, conditional Persist, the wait on a concurrent
//     attempt, group commit) and restart's AbandonUnsent
//     (received becomes abandoned; deciding and sending stay); a write to
//     sending may commit with its answer lost (the machine hears it
//     failed), and the step back that follows applies to the attempt's
//     own row only;
//   - the reconciler (reconcile.go's rules): for sending records no
//     attempt in the process works on, an inquiry: the issuer's outcome if
//     it has one, unless another cell holds the entry (it took it over:
//     the outcome is its effect, and the record is abandoned); none, and
//     the entry this cell's: the ID closed at the issuer and FAILED
//     issuer_not_reached, written to the entry first (the code waits 20 s
//     before closing, as a courtesy to a send on its way; the model closes
//     at any round, which safety must withstand); for deciding records,
//     the entry's answer, or the decision written to the entry, or
//     abandoned if another cell holds it;
//   - the issuer: dedupe by ID, inquiry, close on an inquiry that found
//     nothing (a later request refused); the payload decides the outcome
//     (payload%3: 0 approved, 1 declined, 2 declined by the cell before
//     its PNR, through an amount over the policy's limit); a payment is a
//     card authorization, with a card but no hash of it, so the machine
//     checks no velocity; Adjust as issuersim's: an adjustment of an
//     authorization it approved held and settled at once on its own
//     followup.Ledger, or declined for the rule it would break (and, the
//     model's own rule, for an amount that is a multiple of 13);
//   - the follow-ups' GTR side (payments/followup.go's sendFollowUp): the
//     original's natural home, its owner_cell answer followed once, a
//     fan-out when the home is out of reach or knows no such original,
//     UNAVAILABLE from the cell that holds it, never a re-route; each
//     replica coalescing copies of one ID and payload;
//   - the issuer's journal of its effects, each with the cell that sent
//     it (ListEffects by terminal_id), and the loss and the recovery
//     (loss.go): cmd/cell/internal/issuercheck's Compare, Check's finding
//     with an Owner (an abandoned record asked of the directory:
//     elsewhere for another cell's entry, behind for a payment's under
//     the cell's own), Recovered and CaughtUp, which the model cannot
//     import, mirrored as compareEffect, judgeEffect, recoveredRecord and
//     caughtUpRecord, held to the code's by loss_test.go's tables;
//     store.Recover's statement (the record unless its key exists, an
//     approved follow-up's sums on its original, the sums' CHECK failing
//     it whole) and store.CatchUp's (a payment's record only, from
//     received or abandoned: its state, auth code and decline reason, no
//     sums moved); the cell's start running a reconciler round and then
//     the recovery after AbandonUnsent and before it serves, a failed one
//     stopping the start until a later restart passes; a store's history as an
//     image after each step that changed it (a prefix of its commits at a
//     step's end, never inside one). The loss goes back only to an image
//     that holds no payment short of its point of no return that the store
//     has since passed (Rules.LossAnyPoint lifts it: such a copy, received
//     while the issuer applied it, is abandoned at restart, and the
//     recovery at restart catches it up, behind under its own entry);
//   - the follow-ups' cell side around the pure rules
//     (server/followup.go's FollowUp, store.HoldFollowUp and
//     settleFollowUp): the replay, the original's owner from the
//     directory, the follow-up's own claim, the hold as one step (whose
//     commit may land with its answer lost: UNAVAILABLE), the Adjust, the
//     outcome's write settling the hold only from sending (whose commit
//     may land with its answer lost: PENDING), the entry finalized in the
//     background, PENDING on an unknown outcome; and the reconciler's
//     resolve of a follow-up left sending.
//
// Not simulated, and why: a directory outage (NATS down for a second or
// more: only a transaction's natural home goes on without a claim, a
// window the design note states and TestNATSAllDown exercises over real
// processes; here a claim is answered, or slow, never in an outage);
// clock drift (no decision of the machines
// reads a clock: time reaches them as events, whose order the simulator
// already chooses freely); the cell's instances sharing a database, which
// instances_test.go models apart (below); entries' expiry (MaxAge); a
// follow-up's market or currency other than its original's
// (ORIGINAL_MISMATCH, a rule of HoldFollowUp's tested with it), or one
// whose original is another follow-up (ORIGINAL_NOT_APPROVED, the same);
// a recovered transaction's directory entry (not built in the cell: the
// entry keeps its first payload's answer, which the loss does not touch)
// and its callback (the model has no callbacks);
// the recovery's window (it reads the whole journal, as a check reaching
// back before the loss does); a follow-up's
// cancelled context in its cell (a caller gone, the cell's
// run goes on in the model: more than the code does).
//
// An ID here stands for a transaction's whole key, (partner, transaction
// ID): the model has one partner, since every rule above applies per key
// and two partners' transactions with one ID never meet.
//
// instances_test.go is a second, smaller model: one cell of two instances
// sharing its store (docs/design/cell-instances.md), each attempt the real
// cellside.Machine, with crashes, lease expiry and restarts under the
// same name; the durable owner and lease behind Existing.Active and the
// restart's abandon; its knobs (instRules) abandon without the lease check
// and take Active from the process's memory, and each is caught.
//
// The knobs (Rules) that break a rule of the machines do so in the
// drivers, by perturbing an action or an event; the machines themselves
// are never changed.
package model
