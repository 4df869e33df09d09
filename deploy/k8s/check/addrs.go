package check

import (
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
)

// ipRange is the addresses of an ipBlock: those of cidr but those of
// except.
type ipRange struct {
	cidr   netip.Prefix
	except []netip.Prefix
}

// addrSet is a union of ipRanges, IPv4 and IPv6 alike. The zero value is
// empty.
type addrSet []ipRange

// everywhere is every address, of both families: what a rule with no peers
// (an empty to or from) reaches.
var everywhere = addrSet{{cidr: netip.MustParsePrefix("0.0.0.0/0")}, {cidr: netip.MustParsePrefix("::/0")}}

// prefixes is the set of the given ranges.
func prefixes(ps ...netip.Prefix) addrSet {
	s := make(addrSet, len(ps))
	for i, p := range ps {
		s[i] = ipRange{cidr: p.Masked()}
	}
	return s
}

// blockRange reads an ipBlock. A cidr that does not parse stands for every
// address, and an except that does not parse for none, so that a block the
// API server would refuse can only make a check fail.
func blockRange(b *networkingv1.IPBlock) addrSet {
	c, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return everywhere
	}
	r := ipRange{cidr: c.Masked()}
	for _, e := range b.Except {
		if p, err := netip.ParsePrefix(e); err == nil {
			r.except = append(r.except, p.Masked())
		}
	}
	return addrSet{r}
}

// has says whether addr is in s.
func (s addrSet) has(addr netip.Addr) bool {
	for _, r := range s {
		if !r.cidr.Contains(addr) {
			continue
		}
		excepted := false
		for _, e := range r.except {
			if e.Contains(addr) {
				excepted = true
				break
			}
		}
		if !excepted {
			return true
		}
	}
	return false
}

// bounds are the prefixes at whose edges membership of s can change.
func (s addrSet) bounds() []netip.Prefix {
	var out []netip.Prefix
	for _, r := range s {
		out = append(out, r.cidr)
		out = append(out, r.except...)
	}
	return out
}

// regions calls f, in address order, with the largest prefixes of
// 0.0.0.0/0 and ::/0 on which every set of sets is uniform (each of its
// addresses is in a set or none is), until f returns false. Membership of
// a whole region is then that of its first address.
func regions(sets []addrSet, f func(netip.Prefix) bool) {
	var bounds []netip.Prefix
	for _, s := range sets {
		bounds = append(bounds, s.bounds()...)
	}
	for _, root := range everywhere {
		if !walk(root.cidr, bounds, f) {
			return
		}
	}
}

// walk splits p until no bound lies strictly inside a piece, and calls f
// with each piece; false from f stops it.
func walk(p netip.Prefix, bounds []netip.Prefix, f func(netip.Prefix) bool) bool {
	for _, b := range bounds {
		if b.Bits() > p.Bits() && p.Contains(b.Addr()) {
			lo, hi := split(p)
			return walk(lo, bounds, f) && walk(hi, bounds, f)
		}
	}
	return f(p)
}

// split halves p.
func split(p netip.Prefix) (netip.Prefix, netip.Prefix) {
	bits := p.Bits()
	a := p.Addr().AsSlice()
	a[bits/8] |= 0x80 >> (bits % 8)
	hi, _ := netip.AddrFromSlice(a) // of p's family: 4 bytes or 16
	return netip.PrefixFrom(p.Addr(), bits+1), netip.PrefixFrom(hi, bits+1)
}

// overlap returns prefixes whose addresses are all in both a and b, and
// together are every such address, in address order (regions' pieces): at
// most max of them, 0 for all.
func overlap(a, b addrSet, max int) []netip.Prefix {
	var out []netip.Prefix
	regions([]addrSet{a, b}, func(p netip.Prefix) bool {
		if a.has(p.Addr()) && b.has(p.Addr()) {
			out = append(out, p)
		}
		return max == 0 || len(out) < max
	})
	return out
}

// missing returns prefixes whose addresses are all in want but not in
// have, and together are every such address, in address order (regions'
// pieces): at most max of them, 0 for all.
func missing(want, have addrSet, max int) []netip.Prefix {
	var out []netip.Prefix
	regions([]addrSet{want, have}, func(p netip.Prefix) bool {
		if want.has(p.Addr()) && !have.has(p.Addr()) {
			out = append(out, p)
		}
		return max == 0 || len(out) < max
	})
	return out
}
