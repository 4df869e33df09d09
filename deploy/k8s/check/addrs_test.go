package check

import (
	"net/netip"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
)

func mustPrefixes(t *testing.T, ss ...string) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	for _, s := range ss {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func block(cidr string, except ...string) addrSet {
	return blockRange(&networkingv1.IPBlock{CIDR: cidr, Except: except})
}

// TestAddrSet pins the address sets the evaluator reads ipBlocks into:
// membership, splitting, and the exact pieces of an overlap or a gap, in
// both families.
func TestAddrSet(t *testing.T) {
	for _, tt := range []struct {
		p, lo, hi string
	}{
		{"0.0.0.0/0", "0.0.0.0/1", "128.0.0.0/1"},
		{"10.0.0.0/8", "10.0.0.0/9", "10.128.0.0/9"},
		{"172.16.0.0/15", "172.16.0.0/16", "172.17.0.0/16"},
		{"::/0", "::/1", "8000::/1"},
		{"fe80::/10", "fe80::/11", "fea0::/11"},
		{"::/127", "::/128", "::1/128"},
	} {
		lo, hi := split(netip.MustParsePrefix(tt.p))
		if lo.String() != tt.lo || hi.String() != tt.hi {
			t.Errorf("split(%s) = %s, %s, want %s, %s", tt.p, lo, hi, tt.lo, tt.hi)
		}
	}

	internet := block("0.0.0.0/0", "10.0.0.0/8", "169.254.0.0/16")
	for addr, want := range map[string]bool{
		"8.8.8.8": true, "9.255.255.255": true, "10.0.0.0": false, "10.255.255.255": false, "11.0.0.0": true,
		"169.254.169.254": false, "169.253.255.255": true, "2001:db8::1": false,
	} {
		if got := internet.has(netip.MustParseAddr(addr)); got != want {
			t.Errorf("internet has %s: %v, want %v", addr, got, want)
		}
	}

	for _, tt := range []struct {
		name      string
		a, b      addrSet
		overlap   []string
		aMissingB []string // pieces of a not in b; nil: not asked
	}{
		{"disjoint", prefixes(mustPrefixes(t, "10.0.0.0/8")...), prefixes(mustPrefixes(t, "192.168.0.0/16")...),
			nil, []string{"10.0.0.0/8"}},
		{"nested", prefixes(mustPrefixes(t, "10.0.0.0/8")...), prefixes(mustPrefixes(t, "10.1.0.0/16")...),
			[]string{"10.1.0.0/16"}, []string{"10.0.0.0/16", "10.2.0.0/15", "10.4.0.0/14", "10.8.0.0/13", "10.16.0.0/12", "10.32.0.0/11", "10.64.0.0/10", "10.128.0.0/9"}},
		{"excepts cover the other", block("0.0.0.0/0", "10.0.0.0/8", "172.16.0.0/12"), prefixes(mustPrefixes(t, "10.0.0.0/8", "172.16.0.0/12")...),
			nil, nil},
		{"an except too narrow", block("0.0.0.0/0", "172.16.0.0/16"), prefixes(mustPrefixes(t, "172.16.0.0/12")...),
			[]string{"172.17.0.0/16", "172.18.0.0/15", "172.20.0.0/14", "172.24.0.0/13"}, nil},
		{"families apart", block("0.0.0.0/0"), block("::/0", "fc00::/7"), nil, []string{"0.0.0.0/0"}},
		{"IPv6", block("::/0", "fc00::/7", "fe80::/10", "::1/128"), prefixes(mustPrefixes(t, "fd00:ec2::254/128", "fe80::/64", "2001:db8::/32")...),
			[]string{"2001:db8::/32"}, nil},
		{"everywhere", everywhere, prefixes(mustPrefixes(t, "0.0.0.0/0", "::/0")...), []string{"0.0.0.0/0", "::/0"}, nil},
		{"a cidr that does not parse is everywhere", block("10.0.0.0/33"), prefixes(mustPrefixes(t, "169.254.0.0/16")...),
			[]string{"169.254.0.0/16"}, nil},
		{"an except that does not parse excepts nothing", block("169.254.0.0/16", "169.254.0.0/33"), prefixes(mustPrefixes(t, "169.254.169.254/32")...),
			[]string{"169.254.169.254/32"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			str := func(ps []netip.Prefix) []string {
				var out []string
				for _, p := range ps {
					out = append(out, p.String())
				}
				return out
			}
			if got := str(overlap(tt.a, tt.b, 0)); !slices.Equal(got, tt.overlap) {
				t.Errorf("overlap = %v, want %v", got, tt.overlap)
			}
			if got := str(missing(tt.a, tt.b, 0)); tt.aMissingB != nil && !slices.Equal(got, tt.aMissingB) {
				t.Errorf("missing = %v, want %v", got, tt.aMissingB)
			}
		})
	}
	// max stops the walk.
	if got := missing(everywhere, nil, 1); len(got) != 1 || got[0].String() != "0.0.0.0/0" {
		t.Errorf("missing(everywhere, nothing, 1) = %v", got)
	}
}
