package routing

import (
	"errors"
	"fmt"
	"strconv"
)

// SpecError is one problem Validate found. Validate joins several with
// errors.Join; use errors.As (or walk the joined errors) to read them.
type SpecError struct {
	Of     string // "spec", "cell" or "rule"
	Index  int    // position in Spec.Cells or Spec.Rules; -1 when Of is "spec"
	Name   string // the cell's ID or the rule's Name, if it has one
	Field  string // the Cell or Rule field at fault, e.g. "Weight"; "" when it is the whole rule (shadowing)
	Reason string
}

// Error reads like `routing: rule "eu-cards": pool "eu" has no cells`.
func (e *SpecError) Error() string {
	switch {
	case e.Of == "spec":
		return "routing: " + e.Reason
	case e.Name != "":
		return "routing: " + e.Of + " " + strconv.Quote(e.Name) + ": " + e.Reason
	default:
		return "routing: " + e.Of + " #" + strconv.Itoa(e.Index) + ": " + e.Reason
	}
}

// Validate reports every problem in s, each naming the offending cell or
// rule and field. It rejects: no cells; a cell with an empty or duplicate
// id, an empty addr or pool, a weight outside 0..100 or an unknown state; a
// rule with an empty or duplicate name, an empty pool or one no cell is in,
// an unknown payment type or hash field, an empty list entry, or that is
// shadowed by an earlier rule (one whose lists are each empty or a
// superset of the later rule's, so the later rule can never match).
//
// A spec with no rules is valid: it routes nothing (ErrNoRule). A pool
// whose cells are all down or at weight 0 is valid too: that is an
// operator's drain, and Route answers ErrNoCell.
func Validate(s Spec) error {
	var v validator
	v.cells(s.Cells)
	v.rules(s.Rules, s.Cells)
	return errors.Join(v.errs...)
}

type validator struct{ errs []error }

func (v *validator) add(of string, i int, name, field, format string, args ...any) {
	v.errs = append(v.errs, &SpecError{Of: of, Index: i, Name: name, Field: field, Reason: fmt.Sprintf(format, args...)})
}

func (v *validator) cells(cells []Cell) {
	if len(cells) == 0 {
		v.add("spec", -1, "", "Cells", "no cells")
		return
	}
	seen := make(map[string]int, len(cells))
	for i, c := range cells {
		if c.ID == "" {
			v.add("cell", i, "", "ID", "empty id")
		} else if j, dup := seen[c.ID]; dup {
			v.add("cell", i, c.ID, "ID", "duplicate id (also cell #%d)", j)
		} else {
			seen[c.ID] = i
		}
		if c.Addr == "" {
			v.add("cell", i, c.ID, "Addr", "empty addr")
		}
		if c.Pool == "" {
			v.add("cell", i, c.ID, "Pool", "empty pool")
		}
		if c.Weight < 0 || c.Weight > 100 {
			v.add("cell", i, c.ID, "Weight", "weight %d outside 0..100", c.Weight)
		}
		if c.State > CellDown {
			v.add("cell", i, c.ID, "State", "unknown state %v", c.State)
		}
	}
}

func (v *validator) rules(rules []Rule, cells []Cell) {
	pools := make(map[string]bool)
	for _, c := range cells {
		pools[c.Pool] = true
	}
	seen := make(map[string]int, len(rules))
	for i, r := range rules {
		if r.Name == "" {
			v.add("rule", i, "", "Name", "empty name")
		} else if j, dup := seen[r.Name]; dup {
			v.add("rule", i, r.Name, "Name", "duplicate name (also rule #%d)", j)
		} else {
			seen[r.Name] = i
		}
		switch {
		case r.Pool == "":
			v.add("rule", i, r.Name, "Pool", "empty pool")
		case !pools[r.Pool]:
			v.add("rule", i, r.Name, "Pool", "pool %q has no cells", r.Pool)
		}
		if int(r.HashOn) >= len(hashFieldNames) {
			v.add("rule", i, r.Name, "HashOn", "unknown hash field %v", r.HashOn)
		}
		for _, p := range r.Partners {
			if p == "" {
				v.add("rule", i, r.Name, "Partners", "empty partner")
			}
		}
		for _, m := range r.Markets {
			if m == "" {
				v.add("rule", i, r.Name, "Markets", "empty market")
			}
		}
		for _, p := range r.PaymentTypes {
			if paymentBit(p) == 0 {
				v.add("rule", i, r.Name, "PaymentTypes", "unknown payment type %q", p)
			}
		}
		for j := range i {
			if covers(rules[j], r) {
				v.add("rule", i, r.Name, "", "shadowed by rule %s: it matches everything this rule does", ruleRef(rules[j], j))
				break
			}
		}
	}
}

func ruleRef(r Rule, i int) string {
	if r.Name != "" {
		return strconv.Quote(r.Name)
	}
	return "#" + strconv.Itoa(i)
}

// covers reports whether every transaction later matches also matches
// earlier. It looks at one earlier rule at a time; a rule covered only by
// the union of several earlier rules is not detected.
func covers(earlier, later Rule) bool {
	return coversList(earlier.Partners, later.Partners) &&
		coversList(earlier.Markets, later.Markets) &&
		coversList(earlier.PaymentTypes, later.PaymentTypes)
}

func coversList(earlier, later []string) bool {
	if len(earlier) == 0 {
		return true
	}
	if len(later) == 0 {
		return false
	}
	for _, l := range later {
		found := false
		for _, e := range earlier {
			if l == e {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
