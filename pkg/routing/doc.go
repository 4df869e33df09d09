// Package routing decides which cell serves a transaction.
//
// A [Spec] lists the cells (id, address or instance addresses, pool,
// weight, state, site), the pools' balancers and spill shares, and an
// ordered list of rules.
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
// Local first: a partner's home site (Attrs.HomeSite, from the partner
// registry) keeps its keys on its own cells of the pool while at least the
// pool's SpillBelow share of its capacity there is healthy (weights of the
// cells up, over 100 per cell); below it, the pool ranks as one group over
// every site, and Result.Across says when a key's first cell is in another
// site. A partner with no home site ranks the whole pool, as before sites.
// Crossing is thus a rule of the table, never a timeout's guess.
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
