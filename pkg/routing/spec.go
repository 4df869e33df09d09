package routing

import (
	"fmt"
	"strconv"
)

// Attrs are the transaction attributes routing looks at.
type Attrs struct {
	TransactionID string
	PartnerID     string
	Market        string // ISO 3166-1 alpha-2
	PaymentType   string // "CARD_AUTHORIZATION", "CARD_REFUND", "BANK_TRANSFER"
	MerchantID    string
	// HomeSite is the partner's home site (the partner registry's
	// home_site), "" for none. Route ranks the pool's cells of that site
	// first, and only them while the site has healthy capacity in the pool
	// (Pool.SpillBelow); a site no cell names counts as none.
	HomeSite string
}

// Payment types a rule may name.
const (
	PaymentCardAuthorization = "CARD_AUTHORIZATION"
	PaymentCardRefund        = "CARD_REFUND"
	PaymentBankTransfer      = "BANK_TRANSFER"
)

// paymentTypes is the closed set of payment types, in bit order for
// compiled rules.
var paymentTypes = [...]string{
	PaymentCardAuthorization,
	PaymentCardRefund,
	PaymentBankTransfer,
}

// paymentBit returns the bit of a known payment type, or 0 for an unknown one.
func paymentBit(s string) uint8 {
	for i, p := range paymentTypes {
		if s == p {
			return 1 << i
		}
	}
	return 0
}

// HashField names the attribute whose value is hashed to rank a pool's cells.
type HashField uint8

// The hashable attributes. HashPartner is the zero value and the default,
// keeping a partner's traffic on one cell.
const (
	HashPartner HashField = iota
	HashMarket
	HashMerchant
	HashTransaction
)

var hashFieldNames = [...]string{
	HashPartner:     "partner",
	HashMarket:      "market",
	HashMerchant:    "merchant",
	HashTransaction: "transaction",
}

// ParseHashField parses "partner", "market", "merchant" or "transaction".
// The empty string means HashPartner.
func ParseHashField(s string) (HashField, error) {
	if s == "" {
		return HashPartner, nil
	}
	for i, n := range hashFieldNames {
		if s == n {
			return HashField(i), nil
		}
	}
	return 0, fmt.Errorf("routing: unknown hash field %q", s)
}

// String returns the name ParseHashField accepts.
func (f HashField) String() string {
	if int(f) < len(hashFieldNames) {
		return hashFieldNames[f]
	}
	return "HashField(" + strconv.Itoa(int(f)) + ")"
}

// MarshalText encodes f as its name, so configuration reads "merchant", not 2.
func (f HashField) MarshalText() ([]byte, error) {
	if int(f) >= len(hashFieldNames) {
		return nil, fmt.Errorf("routing: unknown hash field %d", f)
	}
	return []byte(f.String()), nil
}

// UnmarshalText is the inverse of MarshalText; see ParseHashField.
func (f *HashField) UnmarshalText(b []byte) error {
	v, err := ParseHashField(string(b))
	if err != nil {
		return err
	}
	*f = v
	return nil
}

// key returns the value of a that f names.
func (f HashField) key(a *Attrs) string {
	switch f {
	case HashMarket:
		return a.Market
	case HashMerchant:
		return a.MerchantID
	case HashTransaction:
		return a.TransactionID
	default:
		return a.PartnerID
	}
}

// CellState is the operational state of a cell.
type CellState uint8

// CellUp is the zero value. Route skips CellDown cells entirely, whatever
// their weight.
const (
	CellUp CellState = iota
	CellDown
)

var cellStateNames = [...]string{CellUp: "up", CellDown: "down"}

// String returns "up" or "down".
func (s CellState) String() string {
	if int(s) < len(cellStateNames) {
		return cellStateNames[s]
	}
	return "CellState(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText encodes s as "up" or "down".
func (s CellState) MarshalText() ([]byte, error) {
	if int(s) >= len(cellStateNames) {
		return nil, fmt.Errorf("routing: unknown cell state %d", s)
	}
	return []byte(s.String()), nil
}

// UnmarshalText accepts "up" (or "") and "down".
func (s *CellState) UnmarshalText(b []byte) error {
	switch string(b) {
	case "", "up":
		*s = CellUp
	case "down":
		*s = CellDown
	default:
		return fmt.Errorf("routing: unknown cell state %q", b)
	}
	return nil
}

// Cell is one deployment of the payment stack.
type Cell struct {
	ID string // stable identity; the rendezvous hash is keyed on it
	// Addr is the address of a cell with one instance, "host:port", or a
	// DNS name resolved to all of its instances, "dns:///host:port" (a
	// headless Kubernetes Service has one A record per ready pod). Set
	// Addr or Addrs, not both.
	Addr string `json:",omitempty"`
	// Addrs lists a cell's instances, "host:port" each, in priority order
	// (the order the priority balancer tries them); at most MaxInstances.
	Addrs  []string `json:",omitempty"`
	Pool   string
	Weight int // 0..100: the share of its keys the cell keeps; 0 takes it out
	State  CellState
	// RefdataVersion is the reference data version the cell serves, as it
	// last reported it; 0 means unknown (never heard, or a bootstrap file).
	// Only rules with a MinRefdataVersion look at it.
	RefdataVersion uint64 `json:",omitempty"`
	// Site names the site (a city, a data centre: a failure domain) the
	// cell runs in, "" when unnamed; see CheckSite for its form. Route
	// keeps a partner's keys on the cells of its home site (Attrs.HomeSite)
	// while that site has healthy capacity (Pool.SpillBelow).
	Site string `json:",omitempty"`
}

// Instances is the cell's instance addresses: Addrs, or Addr alone. The
// slice is the cell's own; do not modify it.
func (c *Cell) Instances() []string {
	if len(c.Addrs) > 0 {
		return c.Addrs
	}
	if c.Addr == "" {
		return nil
	}
	return []string{c.Addr}
}

// Balancer is how a pool's cells spread requests over their instances.
type Balancer uint8

// The balancers. BalanceRoundRobin is the zero value and the default.
const (
	// BalanceRoundRobin takes the healthy instances in turn (gRPC's
	// round_robin).
	BalanceRoundRobin Balancer = iota
	// BalanceLeastRequest sends each request to the healthier-looking of
	// two random healthy instances: the one with fewer requests
	// outstanding (gRPC's least_request_experimental).
	BalanceLeastRequest
	// BalancePriority sends everything to the first healthy instance in
	// list order, and comes back to an earlier one as soon as it is
	// healthy again.
	BalancePriority
)

var balancerNames = [...]string{
	BalanceRoundRobin:   "round_robin",
	BalanceLeastRequest: "least_request",
	BalancePriority:     "priority",
}

// ParseBalancer parses "round_robin", "least_request" or "priority"; the
// empty string means BalanceRoundRobin.
func ParseBalancer(s string) (Balancer, error) {
	if s == "" {
		return BalanceRoundRobin, nil
	}
	for i, n := range balancerNames {
		if s == n {
			return Balancer(i), nil
		}
	}
	return 0, fmt.Errorf("routing: unknown balancer %q (round_robin, least_request or priority)", s)
}

// String returns the name ParseBalancer accepts.
func (b Balancer) String() string {
	if int(b) < len(balancerNames) {
		return balancerNames[b]
	}
	return "Balancer(" + strconv.Itoa(int(b)) + ")"
}

// MarshalText encodes b as its name.
func (b Balancer) MarshalText() ([]byte, error) {
	if int(b) >= len(balancerNames) {
		return nil, fmt.Errorf("routing: unknown balancer %d", b)
	}
	return []byte(b.String()), nil
}

// UnmarshalText is the inverse of MarshalText; see ParseBalancer.
func (b *Balancer) UnmarshalText(t []byte) error {
	v, err := ParseBalancer(string(t))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Pool is the configuration of a pool of cells, named by Cell.Pool. A pool
// needs no entry: without one it balances round robin and spills at
// DefaultSpillBelow.
type Pool struct {
	Name     string
	Balancer Balancer
	// SpillBelow (percent, 1..100; 0 means DefaultSpillBelow) is the
	// share of a site's capacity in the pool that must be healthy for the
	// keys of partners homed in that site to stay in it. A site's capacity
	// is 100 per cell it has in the pool; its healthy capacity is the sum
	// of the weights of those cells that are up (and fresh enough for the
	// rule). At or above the share, a home site's partners are ranked over
	// its cells alone; below it, over the whole pool as one group, so
	// their keys spread over every site (Result.Across says when a key's
	// first cell is elsewhere). 100 spills as soon as any home cell is
	// drained or down; 1 only once the home site has nothing left.
	SpillBelow int `json:",omitempty"`
}

// DefaultSpillBelow is the SpillBelow of a pool that sets none: a site
// keeps its partners' keys while at least half of its capacity is healthy.
const DefaultSpillBelow = 50

// Rule sends matching transactions to a pool. An empty list matches any
// value of that attribute.
type Rule struct {
	Name         string
	Partners     []string
	Markets      []string
	PaymentTypes []string
	Pool         string
	HashOn       HashField
	// MinRefdataVersion, when not 0, is the oldest reference data version a
	// cell may serve to take this rule's transactions: Route skips every
	// cell of the pool whose RefdataVersion is below it (an unknown
	// version, 0, included), as it skips a down cell, not even as a
	// fallback. Gating only removes cells: the others keep their order. A
	// rule whose cells are all stale answers ErrNoCell; it never falls
	// through to a later rule.
	MinRefdataVersion uint64 `json:",omitempty"`
}

// Spec is the source form of a routing table.
type Spec struct {
	Version uint64
	Cells   []Cell
	Rules   []Rule // first match wins
	// Pools configures pools by name; a pool without an entry takes the
	// defaults (round robin).
	Pools []Pool `json:",omitempty"`
}

// clone returns a deep copy of s.
func (s Spec) clone() Spec {
	c := Spec{Version: s.Version}
	if s.Cells != nil {
		c.Cells = append([]Cell(nil), s.Cells...)
		for i := range c.Cells {
			c.Cells[i].Addrs = cloneStrings(c.Cells[i].Addrs)
		}
	}
	if s.Pools != nil {
		c.Pools = append([]Pool(nil), s.Pools...)
	}
	if s.Rules != nil {
		c.Rules = make([]Rule, len(s.Rules))
		for i, r := range s.Rules {
			c.Rules[i] = r.clone()
		}
	}
	return c
}

// clone returns a deep copy of r.
func (r Rule) clone() Rule {
	r.Partners = cloneStrings(r.Partners)
	r.Markets = cloneStrings(r.Markets)
	r.PaymentTypes = cloneStrings(r.PaymentTypes)
	return r
}

func cloneStrings(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s...)
}
