package routing

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// Explanation is why Route routes a transaction the way it does: for
// operators and tests, never the hot path.
type Explanation struct {
	Version   uint64
	Misses    []RuleMiss // the rules tried before the match, in order, and why each missed
	RuleIndex int        // position of the matched rule in Spec.Rules; -1 if none
	Rule      Rule       // a copy of the matched rule; zero if none
	HashOn    HashField
	Key       string        // the value hashed
	Cells     []CellVerdict // every cell of the pool, by descending rendezvous score
	// HomeSite is the partner's home site as asked (Attrs.HomeSite), and
	// Sites what routing made of it; zero without one.
	HomeSite string
	Sites    SiteVerdict
	Across   bool // as Result.Across
}

// SiteVerdict is how the home site's capacity in the pool decided the
// ranking's scope.
type SiteVerdict struct {
	// Cells is how many cells the home site has in the pool; 0 ranks the
	// pool as one group.
	Cells int
	// Healthy is the share of the home site's capacity that is healthy,
	// in percent (rounded down), and SpillBelow the pool's threshold.
	Healthy, SpillBelow int
	// Local is set when the ranking is over the home site's cells alone.
	Local bool
}

// RuleMiss is a rule that did not match, and the first attribute that
// kept it from matching.
type RuleMiss struct {
	Rule  string
	Field string // "PaymentTypes", "Markets" or "Partners"
	Value string // the transaction's value of that attribute
}

// CellVerdict is what one cell of the pool made of the key.
type CellVerdict struct {
	Cell    Cell
	Score   uint64 // rendezvous score
	Bucket  int    // drain bucket, 0..99: the cell accepts the key when Bucket < Cell.Weight
	Rank    int    // position in Route's ranking; -1 if the cell is not in it
	Verdict Verdict
	// MinRefdataVersion is the matched rule's requirement (0: none), so
	// that Why can say what a stale cell lacks.
	MinRefdataVersion uint64
}

// Verdict says why a cell is where it is in a key's ranking.
type Verdict uint8

const (
	// VerdictAccept: the cell is up and the key's bucket is below its weight.
	VerdictAccept Verdict = iota
	// VerdictFallback: the bucket is at or above the weight (the cell is being
	// drained for this key), so the cell ranks after every accepting cell.
	VerdictFallback
	// VerdictDown: the cell is down and not ranked at all.
	VerdictDown
	// VerdictZeroWeight: the cell has weight 0 and is not ranked at all.
	VerdictZeroWeight
	// VerdictStale: the cell is up with a weight, but serves reference data
	// older than the rule's MinRefdataVersion (or none known), so it is not
	// ranked at all for this rule.
	VerdictStale
	// VerdictOtherSite: the cell could take the key, but is not in the
	// partner's home site, which has enough healthy capacity to keep it.
	VerdictOtherSite
)

// String is a short name for the verdict.
func (v Verdict) String() string {
	switch v {
	case VerdictAccept:
		return "accepts"
	case VerdictFallback:
		return "fallback"
	case VerdictDown:
		return "skipped: down"
	case VerdictZeroWeight:
		return "skipped: weight 0"
	case VerdictStale:
		return "skipped: stale reference data"
	case VerdictOtherSite:
		return "skipped: other site"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// Why is a one-line reason for the verdict.
func (cv CellVerdict) Why() string {
	switch cv.Verdict {
	case VerdictAccept:
		return fmt.Sprintf("accepts: bucket %d < weight %d", cv.Bucket, cv.Cell.Weight)
	case VerdictFallback:
		return fmt.Sprintf("fallback: bucket %d >= weight %d (drained for this key)", cv.Bucket, cv.Cell.Weight)
	case VerdictDown:
		return "skipped: cell is down"
	case VerdictZeroWeight:
		return "skipped: weight 0"
	case VerdictStale:
		if cv.Cell.RefdataVersion == 0 {
			return fmt.Sprintf("skipped: serves no known reference data version, rule needs v%d", cv.MinRefdataVersion)
		}
		return fmt.Sprintf("skipped: serves reference data v%d, rule needs v%d", cv.Cell.RefdataVersion, cv.MinRefdataVersion)
	case VerdictOtherSite:
		return fmt.Sprintf("skipped: site %q, and the home site keeps its keys", cv.Cell.Site)
	}
	return cv.Verdict.String()
}

// Explain computes what Route computes for a, and keeps the reasons. It
// returns ErrNoRule or ErrNoCell as Route does, with the Explanation
// filled in as far as it got.
func (t *Table) Explain(a *Attrs) (Explanation, error) {
	e := Explanation{Version: t.spec.Version, RuleIndex: -1}
	pay := paymentBit(a.PaymentType)
	var r *compiledRule
	for i := range t.rules {
		cr := &t.rules[i]
		if cr.matches(a, pay) {
			r, e.RuleIndex = cr, i
			break
		}
		e.Misses = append(e.Misses, cr.miss(a, pay))
	}
	if r == nil {
		return e, ErrNoRule
	}
	e.Rule = r.rule.clone()
	e.HashOn = r.rule.HashOn
	e.Key = r.rule.HashOn.key(a)
	kh := xxhash.Sum64String(e.Key)
	e.HomeSite = a.HomeSite
	site := t.siteIndex(a.HomeSite)
	if site >= 0 && r.sites[site].total > 0 {
		c := r.sites[site]
		e.Sites = SiteVerdict{Cells: int(c.total / 100), Healthy: int(c.healthy * 100 / c.total), SpillBelow: int(r.spill), Local: r.local(site)}
	}
	for i := range r.pool {
		pc := &r.pool[i]
		cv := CellVerdict{Cell: *pc.cell, Score: pc.score(kh), Bucket: int(pc.bucket(kh)), Rank: -1, MinRefdataVersion: r.minRef}
		// Down and weight 0 win over stale: they would skip the cell for
		// every rule, and are what an operator has to fix first.
		switch {
		case pc.cell.State != CellUp:
			cv.Verdict = VerdictDown
		case pc.weight == 0:
			cv.Verdict = VerdictZeroWeight
		case pc.refdata < r.minRef:
			cv.Verdict = VerdictStale
		case e.Sites.Local && pc.site != site:
			cv.Verdict = VerdictOtherSite
		case uint64(cv.Bucket) < pc.weight:
			cv.Verdict = VerdictAccept
		default:
			cv.Verdict = VerdictFallback
		}
		e.Cells = append(e.Cells, cv)
	}
	slices.SortFunc(e.Cells, func(x, y CellVerdict) int {
		if ranksBefore(x.Score, x.Cell.ID, y.Score, y.Cell.ID) {
			return -1
		}
		return 1
	})
	rank := 0
	for _, v := range []Verdict{VerdictAccept, VerdictFallback} {
		for i := range e.Cells {
			if e.Cells[i].Verdict == v {
				e.Cells[i].Rank = rank
				rank++
			}
		}
	}
	if rank == 0 {
		return e, ErrNoCell
	}
	for _, c := range e.Cells {
		if c.Rank == 0 {
			e.Across = a.HomeSite != "" && c.Cell.Site != a.HomeSite
		}
	}
	return e, nil
}

func (r *compiledRule) miss(a *Attrs, pay uint8) RuleMiss {
	m := RuleMiss{Rule: r.rule.Name}
	switch {
	case r.payments != 0 && r.payments&pay == 0:
		m.Field, m.Value = "PaymentTypes", a.PaymentType
	case !r.markets.has(a.Market):
		m.Field, m.Value = "Markets", a.Market
	default:
		m.Field, m.Value = "Partners", a.PartnerID
	}
	return m
}

// String renders the explanation for a person, one line per rule tried
// and per cell.
func (e Explanation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "table version %d\n", e.Version)
	for _, m := range e.Misses {
		fmt.Fprintf(&b, "rule %q: no match on %s (%q)\n", m.Rule, m.Field, m.Value)
	}
	if e.RuleIndex < 0 {
		b.WriteString("no rule matches\n")
		return b.String()
	}
	fmt.Fprintf(&b, "rule %q matches: pool %q, hash on %s = %q", e.Rule.Name, e.Rule.Pool, e.HashOn, e.Key)
	if m := e.Rule.MinRefdataVersion; m > 0 {
		fmt.Fprintf(&b, ", needs reference data v%d or newer", m)
	}
	b.WriteString("\n")
	switch s := e.Sites; {
	case e.HomeSite == "":
	case s.Cells == 0:
		fmt.Fprintf(&b, "home site %q has no cell in the pool: ranked over every site\n", e.HomeSite)
	case s.Local:
		fmt.Fprintf(&b, "home site %q: %d%% of its %d cells' capacity healthy, spill below %d%%: its cells only\n", e.HomeSite, s.Healthy, s.Cells, s.SpillBelow)
	default:
		fmt.Fprintf(&b, "home site %q: %d%% of its %d cells' capacity healthy, below spill %d%%: ranked over every site\n", e.HomeSite, s.Healthy, s.Cells, s.SpillBelow)
	}
	if e.Across {
		b.WriteString("across: the first cell is outside the home site\n")
	}
	for _, c := range e.Cells {
		rank := "-"
		if c.Rank >= 0 {
			rank = fmt.Sprint(c.Rank + 1)
		}
		fmt.Fprintf(&b, "  %2s %-12q score %016x bucket %2d weight %3d %-4s %s\n",
			rank, c.Cell.ID, c.Score, c.Bucket, c.Cell.Weight, c.Cell.State, c.Why())
	}
	return b.String()
}
