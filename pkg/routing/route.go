package routing

import (
	"errors"

	"github.com/cespare/xxhash/v2"
)

// Errors Route and Explain return. Callers branch on these, never on text;
// Route returns them unwrapped.
var (
	// ErrNoRule means no rule matches the transaction's partner, market and
	// payment type.
	ErrNoRule = errors.New("routing: no rule matches")
	// ErrNoCell means a rule matched but every cell of its pool is down, at
	// weight 0 or serving reference data older than the rule requires.
	ErrNoCell = errors.New("routing: no cell available")
)

// Choice is one cell in a key's ranking.
type Choice struct {
	Cell  *Cell  // points into the Table; do not modify
	Score uint64 // rendezvous score of (key, cell); higher ranks earlier within a group
}

// Result is the outcome of Route.
type Result struct {
	Rule   *Rule    // the matched rule, pointing into the Table; nil on ErrNoRule
	Ranked []Choice // the cells to try, in order; Ranked[0] is the key's home
	// Home is the key's natural home: the first cell of its rendezvous
	// ranking over the whole pool, before weights, health and reference
	// data. It names the cell that may take a transaction without a
	// transaction directory claim (docs/design/transaction-directory.md);
	// it is not necessarily in Ranked. With a home site (Attrs.HomeSite)
	// that has cells in the pool, the ranking is over those cells only.
	// Nil on ErrNoRule.
	Home *Cell
	// Across says that Ranked[0] is not in the partner's home site: the
	// home site has no cells in the pool, or too little healthy capacity
	// there (Pool.SpillBelow), so the key ranked over every site. False
	// without a home site, and on an error.
	Across bool
}

// Route finds the first rule (in Spec order) matching a's partner, market
// and payment type and ranks that rule's pool for the value of the rule's
// hash field. Ranked holds, in order: the cells that accept the key (up,
// drain bucket below weight) by descending rendezvous score; then the
// cells with weight > 0 whose bucket refused the key, as fallbacks, in the
// same order. Cells that are down or at weight 0 never appear, nor, for a
// rule with a MinRefdataVersion, cells whose RefdataVersion is below it:
// removing them leaves the others in the order they would have without
// the requirement. While the partner's home site (a.HomeSite) has at
// least its pool's SpillBelow share of its capacity healthy, the cells of
// other sites do not appear either (local first); below it, or with no
// home site, the whole pool ranks as one group.
//
// Ranked is dst[:0] with the choices appended: with cap(dst) >= the pool
// size (MaxPoolSize covers every pool) Route does not allocate. It never
// blocks, locks, logs or does I/O, and it is safe for concurrent use. On
// ErrNoCell, Rule is set and Ranked is empty. a must not be nil.
func (t *Table) Route(a *Attrs, dst []Choice) (Result, error) {
	dst = dst[:0]
	r := t.match(a)
	if r == nil {
		return Result{Ranked: dst}, ErrNoRule
	}
	kh := xxhash.Sum64String(r.rule.HashOn.key(a))
	site := t.siteIndex(a.HomeSite)
	if site >= 0 && r.sites[site].total == 0 {
		site = -1 // no cell of the pool is there: the pool is one group
	}
	local := site >= 0 && r.local(site)
	accepted := 0 // dst[:accepted] accept the key, dst[accepted:] are fallbacks
	var home *Cell
	var homeScore uint64
	for i := range r.pool {
		pc := &r.pool[i]
		inSite := site < 0 || pc.site == site
		if sc := pc.score(kh); inSite && (home == nil || ranksBefore(sc, pc.cell.ID, homeScore, home.ID)) {
			home, homeScore = pc.cell, sc
		}
		if !pc.eligible || pc.refdata < r.minRef || local && !inSite {
			continue
		}
		c := Choice{Cell: pc.cell, Score: pc.score(kh)}
		if pc.bucket(kh) < pc.weight {
			dst = insert(dst, 0, accepted, c)
			accepted++
		} else {
			dst = insert(dst, accepted, len(dst), c)
		}
	}
	if len(dst) == 0 {
		return Result{Rule: r.rule, Ranked: dst, Home: home}, ErrNoCell
	}
	across := a.HomeSite != "" && dst[0].Cell.Site != a.HomeSite
	return Result{Rule: r.rule, Ranked: dst, Home: home, Across: across}, nil
}

// insert puts c into its place in dst[lo:hi], which is ordered best first,
// and shifts everything after it right by one. Pools are small, so an
// insertion sort beats anything cleverer and needs no closure.
func insert(dst []Choice, lo, hi int, c Choice) []Choice {
	i := lo
	for i < hi && !ranksBefore(c.Score, c.Cell.ID, dst[i].Score, dst[i].Cell.ID) {
		i++
	}
	dst = append(dst, Choice{})
	copy(dst[i+1:], dst[i:])
	dst[i] = c
	return dst
}

// ranksBefore orders by score, highest first. Equal 64-bit scores are
// vanishingly rare, but the tie still breaks on the cell id, never on
// input order, so that the ranking depends only on the key and the cells.
func ranksBefore(scoreA uint64, idA string, scoreB uint64, idB string) bool {
	if scoreA != scoreB {
		return scoreA > scoreB
	}
	return idA < idB
}
