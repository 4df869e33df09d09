// Package routing decides which cell serves a transaction.
//
// A [Spec] lists the cells (id, address or instance addresses, pool,
// weight, state, and a site, a name for operators that routing does not
// read), the pools' balancers and an ordered list of rules.
// Routing picks a cell, never an instance: a cell's instances
// ([Cell.Instances]) and its pool's [Balancer] ([Table.Balancer]) tell the
// caller's connection how to spread the cell's requests over them. [Compile] validates it and builds an immutable [Table];
// callers rebuild tables off the hot path and publish them through an
// atomic pointer. [Table.Route] picks the first rule that matches the
// transaction's partner, market and payment type, then ranks that rule's
// pool by rendezvous (highest random weight) hashing of the field the rule
// hashes on. Weights drain deterministically: a key stays on a cell while a
// second, independent hash of (key, cell) mod 100 is below the cell's
// weight, so draining 30% of a cell moves the same 30% of its keys every
// time and the rest keep their home. The ranking is a pure function of the
// key and the table: no random seeds and no map iteration order, so every
// replica routes a key the same way.
//
// A rule may also require a minimum reference data version
// (Rule.MinRefdataVersion): cells serving an older one (Cell.RefdataVersion,
// as last reported; 0 when unknown) are skipped for that rule like down
// cells, and the others keep their ranking. The versions are an input of
// the table like weights: callers recompile when a cell reports a new one.
//
// Route is on the payment hot path. It must never block, lock, log, do I/O
// or allocate (given a destination slice with room for the pool); a
// benchmark and an allocation test hold it there. Everything that can be
// computed ahead of time is computed in Compile. [Table.Explain] is the
// allocating, human-facing twin of Route for operators and tests.
package routing
