package routing

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Caps on a spec. A table beyond any of them is refused whole, with the
// field named, before anything else is looked at: validating (the
// shadowing check compares every pair of rules) and compiling cost grows
// with the table, and every GTR replica pays it for every table it reads.
const (
	// MaxCells is the most cells a spec may list.
	MaxCells = 256
	// MaxRules is the most rules a spec may list.
	MaxRules = 1000
	// MaxListLen is the most entries of one rule's Partners, Markets or
	// PaymentTypes.
	MaxListLen = 256
	// MaxListEntries is the most list entries of all rules together; it
	// bounds the shadowing check's work.
	MaxListEntries = 8192
	// MaxNameLen is the longest cell ID, pool, rule name or list entry,
	// in bytes.
	MaxNameLen = 64
	// MaxAddrLen is the longest cell address: "dns:///", a DNS name of at
	// most 253 bytes, ":" and a port.
	MaxAddrLen = 7 + 253 + 6
	// MaxInstances is the most instance addresses one cell may list in
	// Addrs.
	MaxInstances = 16
	// MaxRefdataVersion is the highest MinRefdataVersion a rule may ask
	// for: the highest reference data version there is
	// (internal/refdata.MaxVersion, 2^53-1).
	MaxRefdataVersion = 1<<53 - 1
)

// CheckAddr reports whether addr is a cell address of the documented
// format: "host:port" or "dns:///host:port", where host is a DNS name, an
// IPv4 address or a bracketed IPv6 address, and port is 1 to 65535.
// Anything else (a scheme gRPC would resolve otherwise, a path, a user, a
// missing port) is refused.
func CheckAddr(addr string) error {
	if len(addr) > MaxAddrLen {
		return fmt.Errorf("longer than %d bytes", MaxAddrLen)
	}
	hostport := strings.TrimPrefix(addr, "dns:///")
	i := strings.LastIndexByte(hostport, ':')
	if i < 0 {
		return errors.New("not host:port or dns:///host:port")
	}
	host, port := hostport[:i], hostport[i+1:]
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || port[0] == '0' || port[0] == '+' {
		return fmt.Errorf("port %q is not 1 to 65535", port)
	}
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		if ip, err := netip.ParseAddr(host[1 : len(host)-1]); err != nil || !ip.Is6() || ip.Zone() != "" {
			return fmt.Errorf("%q is not an IPv6 address", host)
		}
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if !ip.Is4() {
			return errors.New("an IPv6 address must be in brackets")
		}
		return nil
	}
	if !isDNSName(host) {
		return fmt.Errorf("host %q is not a DNS name or an IP address", host)
	}
	return nil
}

// CompareBySite orders cells for operators, a site's together: by site,
// then cell ID, cells of no named site last. gtrctl cells and the console
// list cells in this order.
func CompareBySite(siteA, idA, siteB, idB string) int {
	if (siteA == "") != (siteB == "") {
		if siteA == "" {
			return 1
		}
		return -1
	}
	if c := strings.Compare(siteA, siteB); c != 0 {
		return c
	}
	return strings.Compare(idA, idB)
}

// MaxSiteLen is the longest site name, in bytes.
const MaxSiteLen = 32

// CheckSite reports whether site is a site name: "" (none named), or 1 to
// MaxSiteLen lowercase letters, digits and hyphens that start with a
// letter and do not end with a hyphen, such as "site-a" (a lowercase DNS
// label, so a site can name hosts and Kubernetes objects as it is).
func CheckSite(site string) error {
	if site == "" {
		return nil
	}
	if len(site) > MaxSiteLen {
		return fmt.Errorf("site of %d bytes, longer than %d", len(site), MaxSiteLen)
	}
	ok := site[0] >= 'a' && site[0] <= 'z' && site[len(site)-1] != '-'
	for i := 0; ok && i < len(site); i++ {
		c := site[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
	}
	if !ok {
		return fmt.Errorf("site %.40q: want lowercase letters, digits and hyphens, starting with a letter and not ending with a hyphen (such as site-a)", site)
	}
	return nil
}

// isDNSName: labels of 1 to 63 letters, digits and hyphens, not starting
// or ending with a hyphen, separated by dots, at most 253 bytes.
func isDNSName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// SpecError is one problem Validate found. Validate joins several with
// errors.Join; use errors.As (or walk the joined errors) to read them.
type SpecError struct {
	Of     string // "spec", "cell", "pool" or "rule"
	Index  int    // position in Spec.Cells, Spec.Pools or Spec.Rules; -1 when Of is "spec"
	Name   string // the cell's ID, the pool's or the rule's Name, if it has one
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
// rule and field. It rejects a spec beyond the caps (MaxCells pools or
// cells, MaxInstances addresses of a cell, MaxRules, MaxListEntries)
// whole, naming the field (Cells, Pools, Addrs or Rules), without looking
// further. Otherwise it rejects: no cells; a cell with an empty or duplicate
// id, no addr, both addr and addrs, an addr not of CheckAddr's format, an
// addrs entry that is not host:port or is listed twice, an empty pool, a name
// longer than MaxNameLen, a weight outside 0..100, an unknown state or a
// site not of CheckSite's form; a
// pool entry with an empty or duplicate name, naming a pool no cell is
// in, or with an unknown balancer; a
// rule with an empty or duplicate name, an empty pool or one no cell is in,
// an unknown payment type or hash field, an empty list entry, a list
// longer than MaxListLen, a MinRefdataVersion above MaxRefdataVersion, or
// that is
// shadowed by an earlier rule (one whose lists are each empty or a
// superset of the later rule's, so the later rule can never match).
//
// A spec with no rules is valid: it routes nothing (ErrNoRule). A pool
// whose cells are all down or at weight 0 is valid too: that is an
// operator's drain, and Route answers ErrNoCell.
func Validate(s Spec) error {
	var v validator
	if v.caps(s); len(v.errs) > 0 {
		return errors.Join(v.errs...)
	}
	v.cells(s.Cells)
	v.pools(s.Pools, s.Cells)
	v.rules(s.Rules, s.Cells)
	return errors.Join(v.errs...)
}

type validator struct{ errs []error }

func (v *validator) add(of string, i int, name, field, format string, args ...any) {
	v.errs = append(v.errs, &SpecError{Of: of, Index: i, Name: name, Field: field, Reason: fmt.Sprintf(format, args...)})
}

// caps checks the sizes that bound the rest of the work.
func (v *validator) caps(s Spec) {
	if len(s.Cells) > MaxCells {
		v.add("spec", -1, "", "Cells", "%d cells, more than the %d allowed", len(s.Cells), MaxCells)
	}
	if len(s.Pools) > MaxCells {
		v.add("spec", -1, "", "Pools", "%d pools, more than the %d allowed", len(s.Pools), MaxCells)
	}
	for i, c := range s.Cells {
		if len(c.Addrs) > MaxInstances {
			v.add("cell", i, truncate(c.ID), "Addrs", "%d instance addresses, more than the %d allowed", len(c.Addrs), MaxInstances)
		}
	}
	if len(s.Rules) > MaxRules {
		v.add("spec", -1, "", "Rules", "%d rules, more than the %d allowed", len(s.Rules), MaxRules)
		return
	}
	n := 0
	for _, r := range s.Rules {
		n += len(r.Partners) + len(r.Markets) + len(r.PaymentTypes)
	}
	if n > MaxListEntries {
		v.add("spec", -1, "", "Rules", "%d list entries in all rules, more than the %d allowed", n, MaxListEntries)
	}
}

// name checks the length of a name or list entry.
func (v *validator) name(of string, i int, name, field, what, s string) {
	if len(s) > MaxNameLen {
		v.add(of, i, truncate(name), field, "%s of %d bytes, longer than %d", what, len(s), MaxNameLen)
	}
}

// truncate keeps an over-long name from filling an error message.
func truncate(s string) string {
	if len(s) > MaxNameLen {
		return s[:MaxNameLen] + "..."
	}
	return s
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
		v.name("cell", i, c.ID, "ID", "id", c.ID)
		v.name("cell", i, c.ID, "Pool", "pool", c.Pool)
		switch {
		case c.Addr == "" && len(c.Addrs) == 0:
			v.add("cell", i, truncate(c.ID), "Addr", "empty addr")
		case c.Addr != "" && len(c.Addrs) > 0:
			v.add("cell", i, truncate(c.ID), "Addrs", "both addr and addrs: set one")
		case c.Addr != "":
			if err := CheckAddr(c.Addr); err != nil {
				v.add("cell", i, truncate(c.ID), "Addr", "addr %.80q: %v", c.Addr, err)
			}
		default:
			v.instances(i, c)
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
		if err := CheckSite(c.Site); err != nil {
			v.add("cell", i, truncate(c.ID), "Site", "%v", err)
		}
	}
}

// instances checks a cell's Addrs: each a host:port (a DNS name resolves
// to instances on its own, so it goes in Addr), none twice.
func (v *validator) instances(i int, c Cell) {
	for j, a := range c.Addrs {
		switch err := CheckAddr(a); {
		case err != nil:
			v.add("cell", i, truncate(c.ID), "Addrs", "addrs[%d] %.80q: %v", j, a, err)
		case strings.HasPrefix(a, "dns:///"):
			v.add("cell", i, truncate(c.ID), "Addrs", "addrs[%d] %.80q: a dns:/// name goes in addr, alone", j, a)
		case slices.Contains(c.Addrs[:j], a):
			v.add("cell", i, truncate(c.ID), "Addrs", "addrs[%d] %.80q: listed twice", j, a)
		}
	}
}

// pools checks the pool entries: each names a pool some cell is in, once,
// with a known balancer.
func (v *validator) pools(pools []Pool, cells []Cell) {
	have := make(map[string]bool, len(cells))
	for _, c := range cells {
		have[c.Pool] = true
	}
	seen := make(map[string]int, len(pools))
	for i, p := range pools {
		switch j, dup := seen[p.Name]; {
		case p.Name == "":
			v.add("pool", i, "", "Name", "empty name")
		case dup:
			v.add("pool", i, truncate(p.Name), "Name", "duplicate pool (also pool #%d)", j)
		case !have[p.Name]:
			v.add("pool", i, truncate(p.Name), "Name", "pool %.80q has no cells", p.Name)
		default:
			seen[p.Name] = i
		}
		v.name("pool", i, p.Name, "Name", "name", p.Name)
		if int(p.Balancer) >= len(balancerNames) {
			v.add("pool", i, truncate(p.Name), "Balancer", "unknown balancer %v", p.Balancer)
		}
		if p.SpillBelow < 0 || p.SpillBelow > 100 {
			v.add("pool", i, truncate(p.Name), "SpillBelow", "spill_below %d outside 1..100 (0 or none: the default, %d)", p.SpillBelow, DefaultSpillBelow)
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
		v.name("rule", i, r.Name, "Name", "name", r.Name)
		v.name("rule", i, r.Name, "Pool", "pool", r.Pool)
		v.list(i, r.Name, "Partners", r.Partners)
		v.list(i, r.Name, "Markets", r.Markets)
		v.list(i, r.Name, "PaymentTypes", r.PaymentTypes)
		if r.MinRefdataVersion > MaxRefdataVersion {
			v.add("rule", i, truncate(r.Name), "MinRefdataVersion", "%d above the highest reference data version, %d", r.MinRefdataVersion, uint64(MaxRefdataVersion))
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

// list checks a rule's list length and entry lengths.
func (v *validator) list(i int, name, field string, l []string) {
	if len(l) > MaxListLen {
		v.add("rule", i, truncate(name), field, "%d entries, more than the %d allowed", len(l), MaxListLen)
		return
	}
	for _, e := range l {
		v.name("rule", i, name, field, "entry", e)
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
