// Package model holds a property test of Cellpay's failover protocol: a
// compact, deterministic reimplementation of the decision rules of
//
//   - the GTR (payments.go): replicas, each coalescing concurrent
//     duplicates of one ID and payload and remembering, in a bounded FIFO
//     cache, the cell a re-routed transaction completed on; route by
//     ranking with that cell promoted; last_resort on the last attempt;
//     the PNR handshake: Proceed only for the live attempt whose timer has
//     not fired and whose caller is still there, then never a re-route,
//     and never a cancellation of that stream: a caller whose deadline
//     passes after Proceed is answered PENDING and the stream is read on;
//   - the cells (orchestrator machine and server driver): insert, or the
//     idempotency rules on an existing record (other payload:
//     ALREADY_EXISTS; final, or sending with no other attempt at the ID
//     running in the process: reply; received, or sending while another
//     attempt runs: wait until it settles, ABORTED on timeout; abandoned:
//     re-routable unless last_resort, then reclaim); nothing persisted
//     from received once the stream is cancelled; record sending, send the
//     PNR, call the issuer only after Proceed, revert to abandoned when the
//     stream ends without it; received becomes abandoned on restart;
//   - the reconciler: inquiry only, for sending records no attempt in
//     the process is working on; the issuer's outcome if it has one, FAILED
//     issuer_not_reached once no issuer request of the record's GTR call
//     can still arrive (the model's NotFoundAfter, 20 s in the code);
//   - the issuer: dedupe by ID, inquiry;
//
// driven by rapid through crashes, restarts, attempt timeouts, caller
// deadlines, issuer timeouts, lost issuer messages and reordering, with
// DESIGN.md's invariants checked after every step and after healing.
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
