// Package model holds a property test of Cellpay's failover protocol: a
// compact, deterministic reimplementation of the decision rules of
//
//   - the GTR (payments.go): replicas, each coalescing concurrent
//     duplicates of one ID and payload and remembering, in a bounded FIFO
//     cache, the cell a re-routed transaction completed on; route by
//     ranking with that cell promoted, and a drained cell skipped;
//     last_resort on the last attempt; a re-routable answer naming the
//     owner of the ID's directory entry sends the next attempt to that
//     owner, whatever its weight, or ends the call UNAVAILABLE if the
//     call already tried it; the PNR handshake: Proceed only for the live
//     attempt whose timer has not fired and whose caller is still there,
//     then never a re-route, and never a cancellation of that stream: a
//     caller whose deadline passes after Proceed is answered PENDING and
//     the stream is read on;
//   - the transaction directory (docs/design/transaction-directory.md):
//     one entry per ID shared by all cells (owner cell, the GTR call and
//     attempt that claimed it, payload, owned | abandoned | final, and
//     the final answer), each write a compare-and-set at the revision
//     read;
//   - the cells (orchestrator machine and server driver): first the
//     claim, before any durable write: no entry, create it; the entry
//     this cell's, go on; another cell's: other payload ALREADY_EXISTS,
//     final answered with the entry's answer, abandoned or held by an
//     earlier attempt of the same call taken over, otherwise re-routable
//     naming the owner. Then insert, or the idempotency rules on an
//     existing record (other payload: ALREADY_EXISTS; final, or sending
//     with no other attempt at the ID running in the process: reply, a
//     PENDING from such a leftover pinning the entry first, so that no
//     later attempt of its call takes it over; received, or sending while
//     another attempt runs: wait until it settles, ABORTED on timeout,
//     and claim again after the wait; abandoned: reclaimed, the entry
//     taken for the new attempt); nothing persisted from received once
//     the stream is cancelled; record sending, send the PNR, call the
//     issuer only after Proceed, revert to abandoned when the stream ends
//     without it; received becomes abandoned on restart (the entry is not
//     touched); best-effort entry updates to abandoned on a step back
//     and to final on a final state, each applying only at the revision
//     of the owner's claim, delayed, lost or never delivered;
//   - the reconciler: inquiry only, for sending records no attempt in
//     the process is working on; the issuer's outcome if it has one;
//     once no issuer request of the record's GTR call can still arrive
//     (the model's NotFoundAfter, 20 s in the code), FAILED
//     issuer_not_reached, written to the entry first, synchronously, if
//     the entry is this cell's, and the record abandoned if another cell
//     holds the entry;
//   - the issuer: dedupe by ID, inquiry;
//
// driven by rapid through crashes, restarts, attempt timeouts, caller
// deadlines, drains, issuer timeouts, lost issuer messages, lost
// directory updates and reordering, with DESIGN.md's invariants checked
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
// The model is not the production code (that lives under cmd/*/internal
// and cannot be imported here); it is the protocol the code must follow.
// When one changes, the other must be brought along. The package has no
// non-test code.
package model
