// Package model is Cellpay's deterministic simulation of its failover
// protocol, and the property test over the same world. It drives the real
// state machines of both sides of the protocol:
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
//     limits and no retry budget.
//
// sim.go runs that world on one seed (Run; cmd/cellpay-sim and make sim
// sweep many): the seed first draws its fault mix (swarm testing: a weight
// per kind of step, some none, and whether the cells' stores group-commit)
// and the trace's first line prints it; a safety phase of steps drawn from
// the mix, every invariant checked after each; then a liveness phase, the
// faults healed (cells restarted, stalls ended, every message delivered,
// every wait timed out, the reconcilers run), which must converge; and
// last the checker the end-to-end tests use (internal/dev/checker's
// Judge) over the partners' answers, what a read returns, every cell's
// records and the issuer's counters. The steps: partners' calls at either
// GTR replica (duplicates, other payloads, calls while a replica drains a
// cell), delivery in any order (delay, reordering), issuer messages and
// directory updates lost or duplicated, a cell's connections stalled and
// then delivering everything late, an issuer request held in a send
// buffer with its deadline whole, crashes and restarts of cells and of GTR
// replicas, issuer, Proceed and attempt timeouts, callers' deadlines, and
// reconciler rounds. A run is a function of its seed (no goroutine, no
// clock, every map read in sorted order): the same seed prints the same
// trace. Counters of interesting states (Summary.Coverage) show the runs
// are not vacuous; a state no seed reaches fails the sweep.
// TestSimulatorBites breaks rules on purpose (Rules' knobs) and requires
// a violation within 1,000 seeds; testdata/sim keeps the seeds that found
// bugs, replayed on every test run.
//
// rapid_test.go drives the same world through rapid's choice of steps
// (TestProtocol, with group commit and without), and TestScripted and
// TestDirectory replay hand-written sequences.
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
//   - the transaction directory's store (directory.go): one entry per ID,
//     Claim (Create) and Take (Update at the revision read) atomic, and
//     the best-effort Finalize (the owner's answer, if the entry is the
//     owner's or missing and not final) and Abandon (if the entry is
//     still the stepping-back attempt's claim) as messages that may be
//     delayed, reordered, duplicated, lost or never delivered;
//   - the records' store (Insert, Reclaim, conditional Persist, the wait
//     on a concurrent attempt, group commit) and restart's AbandonUnsent
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
//     its PNR, through an amount over the policy's limit).
//
// Not simulated, and why: a directory that is unavailable (NATS down: only
// a transaction's natural home goes on without a claim, a window the
// design note states and TestNATSAllDown exercises over real processes;
// here every claim is answered); clock drift (no decision of the machines
// reads a clock: time reaches them as events, whose order the simulator
// already chooses freely); the cell's instances sharing a database, which
// instances_test.go models apart (below); entries' expiry (MaxAge).
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
