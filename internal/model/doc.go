// Package model holds a property test of Cellpay's failover protocol: a
// compact, deterministic reimplementation of the decision rules of the GTR
// (route by ranking, re-route only before a PNR is observed, coalesce
// duplicates), the cells (insert, durable mark-sending, issuer, persist;
// received becomes abandoned on restart; a reconciler resolves sending
// records by inquiry) and the issuer (dedupe by ID), driven by rapid
// through crashes, restarts, timeouts and message reordering, with
// DESIGN.md's invariants checked after every step.
//
// The model is not the production code (that lives under cmd/*/internal
// and cannot be imported here); it is the protocol the code must follow.
// When one changes, the other must be brought along. The package has no
// non-test code.
package model
