package state

import (
	"errors"
	"fmt"
	"time"

	"github.com/cellpay/cellpay/pkg/routing"
)

// MaxRamp bounds how long a weight ramp may run.
const MaxRamp = 24 * time.Hour

// Doc is the operator's table: what the operator applied (a table, and
// the weight changes, drains and ramps made since), and what every GTR
// replica must agree on. It is one value, stored whole, and it travels as
// JSON through the NATS KV bucket and the local state file. It holds
// configured weights only. Health is not in it (the health monitor of each
// replica owns that), nor is a compiled weight: the table a replica routes
// by is derived from a Doc, the clock (ramp positions), the monitor's
// health shares and the cells' reference data versions, and is the
// effective view, never a Doc. The admin API's GetTable returns the Doc;
// GetEffectiveTable returns the derived view, labelled as such.
type Doc struct {
	// Version rises with every change (a table apply or any weight change).
	Version uint64         `json:"version"`
	Cells   []CellConfig   `json:"cells"`
	Rules   []routing.Rule `json:"rules"`
	// Pools configure pools by name (their balancer); a pool without an
	// entry balances round robin.
	Pools []routing.Pool `json:"pools,omitempty"`
}

// CellConfig is a cell and its weights.
type CellConfig struct {
	ID string `json:"id"`
	// Addr or Addrs, as in routing.Cell: one address (an instance, or a
	// dns:/// name of them all), or the list of the cell's instances.
	Addr  string   `json:"addr"`
	Addrs []string `json:"addrs,omitempty"`
	Pool  string   `json:"pool"`
	// Site names the site the cell runs in, as in routing.Cell ("" when
	// unnamed); EvacuateSite and RestoreSite change a site's cells
	// together.
	Site string `json:"site,omitempty"`
	// TableWeight is the weight in the last applied table; Restore returns
	// the cell to it and Drain takes its percentage of it.
	TableWeight int `json:"table_weight"`
	// Weight is the weight in force once any ramp has ended.
	Weight int `json:"weight"`
	// Ramp, if set, moves the weight from Ramp.From to Weight over time.
	Ramp *Ramp `json:"ramp,omitempty"`
}

// Ramp moves a weight linearly from From to the cell's Weight between Start
// and End. The weight at a time is a pure function of the ramp and the
// clock, so every replica computes the same weight from the same KV value
// (replica clocks are assumed to agree to well within a ramp step).
type Ramp struct {
	From  int       `json:"from"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// WeightAt is the cell's weight at time t: the ramp's From before it
// starts, Weight after it ends, and in between the linear interpolation
// rounded toward From (so a ramp never overshoots).
func (c CellConfig) WeightAt(t time.Time) int {
	r := c.Ramp
	if r == nil || !t.Before(r.End) {
		return c.Weight
	}
	if !t.After(r.Start) {
		return r.From
	}
	total := r.End.Sub(r.Start)
	elapsed := t.Sub(r.Start)
	// |Weight-From| <= 100 and total <= MaxRamp: no overflow in int64 ns.
	return r.From + int(int64(c.Weight-r.From)*int64(elapsed)/int64(total))
}

// RampStalled is how long the routing table, last found to match the
// configuration at checked, has lagged the cell's ramp at now: 0 while
// the ramp's weight at now is the one at checked, else the time since the
// ramp's first step after checked, the one the table missed. A compiler
// that publishes each step within its tick (State.Run) reads 0 but for a
// tick; one that has stopped reads the time since the step it missed.
func (c CellConfig) RampStalled(checked, now time.Time) time.Duration {
	w := c.WeightAt(checked)
	if c.Ramp == nil || !now.After(checked) || c.WeightAt(now) == w {
		return 0
	}
	// WeightAt is monotone in t: the first t in (checked, now] whose
	// weight is not w, to the nanosecond.
	lo, hi := checked, now // WeightAt(lo) == w, WeightAt(hi) != w
	for hi.Sub(lo) > 1 {
		mid := lo.Add(hi.Sub(lo) / 2)
		if c.WeightAt(mid) == w {
			lo = mid
		} else {
			hi = mid
		}
	}
	return now.Sub(hi)
}

// Ramping reports whether the cell's weight is still moving at t.
func (c CellConfig) Ramping(t time.Time) bool { return c.Ramp != nil && t.Before(c.Ramp.End) }

// Clone returns a deep copy of d.
func (d Doc) Clone() Doc {
	c := Doc{Version: d.Version}
	if d.Cells != nil {
		c.Cells = make([]CellConfig, len(d.Cells))
		for i, cc := range d.Cells {
			if cc.Ramp != nil {
				r := *cc.Ramp
				cc.Ramp = &r
			}
			if cc.Addrs != nil {
				cc.Addrs = append([]string(nil), cc.Addrs...)
			}
			c.Cells[i] = cc
		}
	}
	if d.Pools != nil {
		c.Pools = append([]routing.Pool(nil), d.Pools...)
	}
	if d.Rules != nil {
		c.Rules = make([]routing.Rule, len(d.Rules))
		for i, r := range d.Rules {
			r.Partners = append([]string(nil), r.Partners...)
			r.Markets = append([]string(nil), r.Markets...)
			r.PaymentTypes = append([]string(nil), r.PaymentTypes...)
			c.Rules[i] = r
		}
	}
	return c
}

// Cell returns a pointer to the cell with the given id in d, or nil.
func (d *Doc) Cell(id string) *CellConfig {
	for i := range d.Cells {
		if d.Cells[i].ID == id {
			return &d.Cells[i]
		}
	}
	return nil
}

// Spec is the routing spec d describes at time t. health, if not nil,
// gives each cell's health share 0..100 on this replica: a cell at 0 is
// routing.CellDown, and any other share scales its weight (weight *
// share / 100, rounded down), so a re-admitted cell takes back the same
// keys it gave up, a bucket at a time.
func (d Doc) Spec(t time.Time, health func(cellID string) int) routing.Spec {
	s := routing.Spec{Version: d.Version, Rules: d.Rules, Pools: d.Pools}
	for _, c := range d.Cells {
		st, w := routing.CellUp, c.WeightAt(t)
		if health != nil {
			switch h := health(c.ID); {
			case h <= 0:
				st = routing.CellDown
			case h < 100:
				w = w * h / 100
			}
		}
		s.Cells = append(s.Cells, routing.Cell{ID: c.ID, Addr: c.Addr, Addrs: c.Addrs, Pool: c.Pool, Weight: w, State: st, Site: c.Site})
	}
	return s
}

// WithTable is the Doc that applying table s over d makes: s's version,
// cells (with their addresses and sites), pools and rules. A cell whose weight in s is its configured weight in d
// (Weight, where any ramp ends) keeps its table weight and ramp, so that
// applying exactly what GetTable returned, with the version raised,
// changes no configured weight, drained or ramping cells included. Any
// other cell takes s's weight as its table weight, with no ramp.
func (d Doc) WithTable(s routing.Spec) Doc {
	next := FromSpec(s)
	for i := range next.Cells {
		c := &next.Cells[i]
		if old := d.Cell(c.ID); old != nil && old.Weight == c.Weight {
			c.TableWeight = old.TableWeight
			if old.Ramp != nil {
				r := *old.Ramp
				c.Ramp = &r
			}
		}
	}
	return next
}

// FromSpec builds a Doc from a routing spec (the YAML config, an applied
// table): every cell at its spec weight with no ramp.
func FromSpec(s routing.Spec) Doc {
	d := Doc{Version: s.Version, Rules: s.Rules, Pools: s.Pools}
	for _, c := range s.Cells {
		d.Cells = append(d.Cells, CellConfig{ID: c.ID, Addr: c.Addr, Addrs: c.Addrs, Pool: c.Pool, Site: c.Site, TableWeight: c.Weight, Weight: c.Weight})
	}
	return d.Clone()
}

// Validate reports every problem in d: weights outside 0..100, ramps that
// end before they start or run longer than MaxRamp, and whatever
// routing.Validate finds in the spec.
func (d Doc) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if d.Version == 0 {
		bad("version", "must be 1 or more")
	}
	for i, c := range d.Cells {
		if c.TableWeight < 0 || c.TableWeight > 100 {
			bad(fmt.Sprintf("cells[%d].table_weight", i), "cell %q: %d outside 0..100", c.ID, c.TableWeight)
		}
		if c.Weight < 0 || c.Weight > 100 {
			bad(fmt.Sprintf("cells[%d].weight", i), "cell %q: weight %d outside 0..100", c.ID, c.Weight)
		}
		if r := c.Ramp; r != nil {
			if r.From < 0 || r.From > 100 {
				bad(fmt.Sprintf("cells[%d].ramp.from", i), "cell %q: %d outside 0..100", c.ID, r.From)
			}
			if !r.End.After(r.Start) {
				bad(fmt.Sprintf("cells[%d].ramp.end", i), "cell %q: end %v is not after start %v", c.ID, r.End, r.Start)
			} else if r.End.Sub(r.Start) > MaxRamp {
				bad(fmt.Sprintf("cells[%d].ramp.end", i), "cell %q: ramp longer than %v", c.ID, MaxRamp)
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Weights are in range, so the spec at any time validates alike.
	return routing.Validate(d.Spec(time.Time{}, nil))
}

// ErrUnknownCell is returned by the Doc's weight operations for a cell id
// the Doc does not have.
var ErrUnknownCell = errors.New("unknown cell")

// ErrUnknownSite is returned by EvacuateSite and RestoreSite for a site
// no cell of the Doc names.
var ErrUnknownSite = errors.New("unknown site")

// ErrSiteIsLast is returned by EvacuateSite when the site holds the last
// weight of a pool: evacuating it would leave the pool's rules without a
// cell to route to.
var ErrSiteIsLast = errors.New("cannot evacuate")

// FieldError is bad operator input: the field at fault and why.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// SetWeight moves cell id to weight w, now when over is 0, else ramped
// linearly from its weight at now over the duration. It raises Version.
func (d *Doc) SetWeight(id string, w int, now time.Time, over time.Duration) error {
	if err := checkWeight(w, over); err != nil {
		return err
	}
	c := d.Cell(id)
	if c == nil {
		return fmt.Errorf("cell_id: %w %q", ErrUnknownCell, id)
	}
	c.setWeight(w, now, over)
	d.Version++
	return nil
}

// checkWeight validates a weight change's inputs: w in 0..100, over in
// 0..MaxRamp.
func checkWeight(w int, over time.Duration) error {
	if w < 0 || w > 100 {
		return &FieldError{"weight", fmt.Sprintf("%d outside 0..100", w)}
	}
	if over < 0 {
		return &FieldError{"over", fmt.Sprintf("negative duration %v", over)}
	}
	if over > MaxRamp {
		return &FieldError{"over", fmt.Sprintf("%v is longer than %v", over, MaxRamp)}
	}
	return nil
}

// setWeight is SetWeight's change to one cell, its inputs checked
// (checkWeight): the weight becomes w, now when over is 0, else ramped
// from the weight at now. It does not raise the Doc's version, so that
// one operation may change several cells under one version.
func (c *CellConfig) setWeight(w int, now time.Time, over time.Duration) {
	from := c.WeightAt(now)
	c.Weight, c.Ramp = w, nil
	if over > 0 && from != w {
		c.Ramp = &Ramp{From: from, Start: now, End: now.Add(over)}
	}
}

// Drain moves percent of cell id's keys (of its TableWeight) away: its
// weight becomes TableWeight*(100-percent)/100, rounded down. Because a key
// stays while its bucket is below the weight, the same keys move every
// time, and with TableWeight 100 draining 30 leaves weight 70.
func (d *Doc) Drain(id string, percent int, now time.Time, over time.Duration) error {
	if percent < 0 || percent > 100 {
		return &FieldError{"percent", fmt.Sprintf("%d outside 0..100", percent)}
	}
	c := d.Cell(id)
	if c == nil {
		return fmt.Errorf("cell_id: %w %q", ErrUnknownCell, id)
	}
	return d.SetWeight(id, c.TableWeight*(100-percent)/100, now, over)
}

// Restore returns cell id to its TableWeight, now or ramped.
func (d *Doc) Restore(id string, now time.Time, over time.Duration) error {
	c := d.Cell(id)
	if c == nil {
		return fmt.Errorf("cell_id: %w %q", ErrUnknownCell, id)
	}
	return d.SetWeight(id, c.TableWeight, now, over)
}

// EvacuateSite moves every key of site's cells away: each cell whose
// Site is site goes to weight 0, now when over is 0, else ramped from its
// weight at now, as Drain of 100 would, all in one change (Version is
// raised once). A weight-0 cell takes no new keys; what it owns (work in
// flight, past its point of no return) still finishes there.
//
// It refuses (ErrSiteIsLast, naming the pool) when a pool with weight in
// the site (a cell of the site at a configured weight above 0) has no
// cell outside the site at a configured weight above 0: the pool's rules
// would be left without a cell. Configured weights only: whether the
// other cells are healthy is the health monitor's, not the Doc's. On any
// error d is unchanged.
func (d *Doc) EvacuateSite(site string, now time.Time, over time.Duration) error {
	cells, err := d.siteCells(site, over)
	if err != nil {
		return err
	}
	inSite, outside := map[string]bool{}, map[string]bool{}
	var pools []string // in the table's order, for a stable refusal
	for _, c := range d.Cells {
		if c.Weight <= 0 {
			continue
		}
		if c.Site == site {
			if !inSite[c.Pool] {
				pools = append(pools, c.Pool)
			}
			inSite[c.Pool] = true
		} else {
			outside[c.Pool] = true
		}
	}
	for _, p := range pools {
		if !outside[p] {
			return fmt.Errorf("site: %w: pool %q has no cell outside %s with weight above 0: evacuating would leave its rules without a cell", ErrSiteIsLast, p, site)
		}
	}
	for _, c := range cells {
		c.setWeight(0, now, over)
	}
	d.Version++
	return nil
}

// RestoreSite returns every cell whose Site is site to its TableWeight,
// now when over is 0, else ramped from its weight at now, as Restore
// does, all in one change (Version is raised once). On any error d is
// unchanged.
func (d *Doc) RestoreSite(site string, now time.Time, over time.Duration) error {
	cells, err := d.siteCells(site, over)
	if err != nil {
		return err
	}
	for _, c := range cells {
		if err := checkWeight(c.TableWeight, over); err != nil {
			return fmt.Errorf("cell %q: %w", c.ID, err)
		}
	}
	for _, c := range cells {
		c.setWeight(c.TableWeight, now, over)
	}
	d.Version++
	return nil
}

// siteCells checks a site operation's inputs (site of routing.CheckSite's
// form and not empty, over as SetWeight takes it) and returns the cells
// of d in site, in the table's order; ErrUnknownSite when there is none.
func (d *Doc) siteCells(site string, over time.Duration) ([]*CellConfig, error) {
	if site == "" {
		return nil, &FieldError{"site", "is required"}
	}
	if err := routing.CheckSite(site); err != nil {
		return nil, &FieldError{"site", err.Error()}
	}
	if err := checkWeight(0, over); err != nil {
		return nil, err
	}
	var cells []*CellConfig
	for i := range d.Cells {
		if d.Cells[i].Site == site {
			cells = append(cells, &d.Cells[i])
		}
	}
	if len(cells) == 0 {
		return nil, fmt.Errorf("site: %w %q: no cell of the table names it", ErrUnknownSite, site)
	}
	return cells, nil
}
