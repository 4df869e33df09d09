// Package model holds a property test of Cellpay's failover protocol. It
// drives the real state machines of both sides of the protocol:
//
//   - the cell's cellside.Machine, one per attempt, with a driver
//     (cell_test.go) that performs its actions as the cell's server does
//     (perform, claim, settleEntry): against the model's records, its
//     transaction directory and its message pool. Every rule of the cell
//     is the machine's: the claim before any durable write and the
//     directory's rules (ALREADY_EXISTS, a final entry's answer, the
//     takeover of an abandoned entry or of an earlier attempt's of the
//     same call, re-routable to the owner, a record always its attempt's
//     claim, a PENDING from a leftover pinning the entry, a claim again
//     after a wait), the idempotency rules on an existing record, the
//     decline before the PNR, the PNR and the issuer only after Proceed,
//     the step back when the stream ends without it;
//   - the GTR's gtrside.Call, one per call, and gtrside.Machine, one per
//     attempt, with a driver (gtr_test.go) that performs their actions as
//     payments.go's submit and attempt do, on a fake clock per call that
//     the attempt timer moves: the call loop (the next cell of the
//     ranking, last_resort on the last attempt, a re-routable answer
//     naming the owner sending the next attempt to it once per call,
//     whatever its weight, the answer) and the handshake (Proceed only
//     for the live attempt, never a re-route after it, PENDING on a
//     caller's deadline after it, the stream read on). The model has no
//     admission limits and no retry budget.
//
// What stays hand-written, as model code mirroring the production code:
//
//   - the GTR's routing around the call machine (payments.go's route):
//     replicas, each coalescing concurrent duplicates of one ID and
//     payload and remembering, in a bounded FIFO cache, the cell a
//     re-routed transaction completed on; the ranking with that cell
//     promoted and a drained cell skipped;
//   - the transaction directory's store (directory.go): one entry per ID,
//     Claim (Create) and Take (Update at the revision read) atomic, and
//     the best-effort Finalize (the owner's answer, if the entry is the
//     owner's or missing and not final) and Abandon (if the entry is
//     still the stepping-back attempt's claim) as messages that may be
//     delayed, reordered, lost or never delivered;
//   - the records' store (Insert, Reclaim, conditional Persist, the wait
//     on a concurrent attempt) and restart's AbandonUnsent (received
//     becomes abandoned; the entry is not touched); a write to sending
//     may commit with its answer lost (the machine hears it failed), and
//     the step back that follows applies to the attempt's own row only;
//   - the reconciler: inquiry only, for sending records no attempt in the
//     process is working on; the issuer's outcome if it has one, unless
//     another cell holds the entry (it took it over: the outcome is its
//     effect, and the record is abandoned); once no
//     issuer request of the record's GTR call can still arrive (the
//     model's NotFoundAfter, 20 s in the code), FAILED issuer_not_reached,
//     written to the entry first, synchronously, if the entry is this
//     cell's, and the record abandoned if another cell holds the entry;
//   - the issuer: dedupe by ID, inquiry; the payload decides the outcome
//     (payload%3: 0 approved, 1 declined, 2 declined by the cell before
//     its PNR, through an amount over the policy's limit).
//
// Rapid drives it through crashes, restarts, attempt timeouts, caller
// deadlines, drains, issuer timeouts, lost issuer messages, lost
// directory updates and reordering, with docs/design/README.md's invariants checked
// after every step and after healing, and the directory's rules as they
// happen: a takeover only from an attempt without Proceed, the issuer
// called only by the owner, the reconciler abandoning only an
// unconfirmed record.
//
// NATS is always reachable in the model: a claim always gets an answer.
// The design note's fallback for a NATS outage (only a transaction's
// natural home goes on without a claim) and its residual window are not
// modelled; nor is the entries' expiry (MaxAge). Without that window, one
// attempt per ID calls the issuer, so the issuer's dedupe is only
// observable with the directory off (knob NoDirectory).
//
// An ID here stands for a transaction's whole key, (partner, transaction
// ID): the model has one partner, since every rule above applies per key
// and two partners' transactions with one ID never meet.
//
// With Rules.GroupCommit (TestProtocolGroupCommit) every persist waits in
// the process for a shared commit, a message of its own, as the cell's
// group commit does; Rules.AsyncInsert (TestProtocolAsyncInsert) queues
// the insert or reclaim too, which opens the window between a claim and
// its record's write to every other step.
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
// are never changed. The package has no non-test code.
package model
