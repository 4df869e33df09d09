package routing

import (
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Table is a compiled, immutable routing table. It is safe for concurrent
// use; nothing mutates it after Compile returns. Pointers it hands out
// (Choice.Cell, Result.Rule) point into the table and must not be written.
type Table struct {
	spec    Spec // a private deep copy; the pointers above point into it
	byID    map[string]int
	rules   []compiledRule
	maxPool int
	// balancers holds the pools that name a balancer other than the
	// default; Balancer reads it.
	balancers map[string]Balancer
	// sites are the sites the cells name, sorted; poolCell.site and
	// compiledRule.sites index it.
	sites []string
}

// compiledRule is a Rule with its lists turned into sets and its pool
// resolved, so matching a transaction costs no allocation.
type compiledRule struct {
	rule     *Rule
	partners set
	markets  set
	payments uint8 // bits from paymentBit; 0 matches any payment type
	pool     []poolCell
	minRef   uint64 // Rule.MinRefdataVersion: cells below it are skipped
	spill    uint64 // the pool's SpillBelow, the default resolved
	// sites holds each site's capacity in the pool for this rule, by
	// site index.
	sites []siteCapacity
}

// siteCapacity is a site's capacity in a rule's pool: 100 per cell of the
// site in the pool (0: the site has none there), and the weights of those
// of them Route may rank (up, weight > 0, fresh enough for the rule).
type siteCapacity struct {
	total, healthy uint64
}

// local reports whether a key homed in site s ranks over s's cells alone:
// s has cells in the pool and at least the pool's SpillBelow share of
// their capacity is healthy.
func (r *compiledRule) local(s int) bool {
	c := r.sites[s]
	return c.total > 0 && c.healthy*100 >= r.spill*c.total
}

// siteIndex is the index of site in t.sites, or -1 for "" and a site no
// cell names. Sites are few: a scan, no allocation.
func (t *Table) siteIndex(site string) int {
	if site == "" {
		return -1
	}
	for i, s := range t.sites {
		if s == site {
			return i
		}
	}
	return -1
}

// poolCell holds what Route needs of a cell, with its hashes precomputed.
type poolCell struct {
	cell      *Cell
	scoreSeed uint64 // rendezvous seed
	drainSeed uint64 // seed of the independent drain-bucket hash
	weight    uint64
	refdata   uint64 // Cell.RefdataVersion
	eligible  bool   // up and weight > 0
	site      int    // index of Cell.Site in Table.sites; -1 for none
}

// Domain prefixes keep the two per-cell hashes independent. Changing them,
// mix or the key hash moves every key: TestGolden is there to notice.
const (
	scoreDomain = "cellpay/routing/score\x00"
	drainDomain = "cellpay/routing/drain\x00"
)

// mix is the 64-bit finalizer of MurmurHash3: a bijection with full
// avalanche, so mix(key ^ seedA) and mix(key ^ seedB) are unrelated.
func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// score is the rendezvous weight of key hash kh on the cell: the higher,
// the earlier the cell in the key's ranking.
func (pc *poolCell) score(kh uint64) uint64 { return mix(kh ^ pc.scoreSeed) }

// bucket is the drain bucket of key hash kh on the cell, 0..99.
func (pc *poolCell) bucket(kh uint64) uint64 { return mix(kh^pc.drainSeed) % 100 }

// set is a compiled rule list. Short lists are scanned, which beats a map
// for the handful of entries rules usually have.
type set struct {
	any  bool
	list []string
	m    map[string]struct{}
}

const setMapThreshold = 8

func newSet(list []string) set {
	if len(list) == 0 {
		return set{any: true}
	}
	if len(list) <= setMapThreshold {
		return set{list: list}
	}
	m := make(map[string]struct{}, len(list))
	for _, v := range list {
		m[v] = struct{}{}
	}
	return set{m: m}
}

func (s *set) has(v string) bool {
	if s.any {
		return true
	}
	if s.m != nil {
		_, ok := s.m[v]
		return ok
	}
	for _, e := range s.list {
		if e == v {
			return true
		}
	}
	return false
}

// Compile validates s and builds a Table from a deep copy of it, so later
// changes to s do not reach the table.
func Compile(s Spec) (*Table, error) {
	if err := Validate(s); err != nil {
		return nil, err
	}
	t := &Table{spec: s.clone(), byID: make(map[string]int, len(s.Cells))}
	for _, c := range t.spec.Cells {
		if c.Site != "" && !slices.Contains(t.sites, c.Site) {
			t.sites = append(t.sites, c.Site)
		}
	}
	slices.Sort(t.sites)
	pools := make(map[string][]poolCell)
	var order []string // pools in order of first appearance, for determinism
	for i := range t.spec.Cells {
		c := &t.spec.Cells[i]
		t.byID[c.ID] = i
		if _, ok := pools[c.Pool]; !ok {
			order = append(order, c.Pool)
		}
		pools[c.Pool] = append(pools[c.Pool], poolCell{
			cell:      c,
			scoreSeed: xxhash.Sum64String(scoreDomain + c.ID),
			drainSeed: xxhash.Sum64String(drainDomain + c.ID),
			weight:    uint64(c.Weight),
			refdata:   c.RefdataVersion,
			eligible:  c.State == CellUp && c.Weight > 0,
			site:      t.siteIndex(c.Site),
		})
	}
	for _, p := range order {
		t.maxPool = max(t.maxPool, len(pools[p]))
	}
	spill := make(map[string]uint64, len(t.spec.Pools))
	for _, p := range t.spec.Pools {
		if p.SpillBelow > 0 {
			spill[p.Name] = uint64(p.SpillBelow)
		}
		if p.Balancer != BalanceRoundRobin {
			if t.balancers == nil {
				t.balancers = make(map[string]Balancer, len(t.spec.Pools))
			}
			t.balancers[p.Name] = p.Balancer
		}
	}
	t.rules = make([]compiledRule, len(t.spec.Rules))
	for i := range t.spec.Rules {
		r := &t.spec.Rules[i]
		cr := compiledRule{
			rule:     r,
			partners: newSet(r.Partners),
			markets:  newSet(r.Markets),
			pool:     pools[r.Pool],
			minRef:   r.MinRefdataVersion,
			spill:    DefaultSpillBelow,
			sites:    make([]siteCapacity, len(t.sites)),
		}
		if v, ok := spill[r.Pool]; ok {
			cr.spill = v
		}
		for _, pc := range cr.pool {
			if pc.site < 0 {
				continue
			}
			cr.sites[pc.site].total += 100
			if pc.eligible && pc.refdata >= cr.minRef {
				cr.sites[pc.site].healthy += pc.weight
			}
		}
		for _, p := range r.PaymentTypes {
			cr.payments |= paymentBit(p)
		}
		t.rules[i] = cr
	}
	return t, nil
}

// Version is the Spec's version.
func (t *Table) Version() uint64 { return t.spec.Version }

// Spec returns a deep copy of the spec the table was compiled from.
func (t *Table) Spec() Spec { return t.spec.clone() }

// Cell returns the cell with the given id.
func (t *Table) Cell(id string) (Cell, bool) {
	i, ok := t.byID[id]
	if !ok {
		return Cell{}, false
	}
	return t.spec.Cells[i], true
}

// Balancer is how the cells of pool spread requests over their
// instances: the pool's configured balancer, BalanceRoundRobin by
// default. It does not allocate.
func (t *Table) Balancer(pool string) Balancer { return t.balancers[pool] }

// MaxPoolSize is the number of cells in the largest pool: a dst of at
// least this capacity keeps every Route call allocation-free.
func (t *Table) MaxPoolSize() int { return t.maxPool }

// match returns the first rule matching a, or nil.
func (t *Table) match(a *Attrs) *compiledRule {
	pay := paymentBit(a.PaymentType)
	for i := range t.rules {
		r := &t.rules[i]
		if r.matches(a, pay) {
			return r
		}
	}
	return nil
}

func (r *compiledRule) matches(a *Attrs, pay uint8) bool {
	return (r.payments == 0 || r.payments&pay != 0) &&
		r.markets.has(a.Market) &&
		r.partners.has(a.PartnerID)
}
