package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// portRange is where the ports handed out here are picked: below the
// kernel's ephemeral range (ip_local_port_range), which outgoing
// connections take ports from. A port found free there could be taken by
// some test's outgoing connection before the component meant for it
// binds, which for a Postgres (initdb first) is seconds later: it was
// (TestPlatformFailureNamesComponent, "could not bind ... Address
// already in use" on 43782).
func portRange() (lo, hi int) {
	lo, hi = 10000, 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) == 2 {
		if n, err := strconv.Atoi(f[0]); err == nil && n > lo+1000 {
			hi = n
		}
	}
	return lo, hi
}

// randomPort is a port in portRange with room for n after it.
func randomPort(n int) int {
	lo, hi := portRange()
	return lo + rand.IntN(hi-lo-n)
}

// FreePort reports whether port is free on loopback at this moment.
func FreePort(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// FreePortRun finds n consecutive loopback ports that were free a moment
// ago and returns the first (a platform's private Postgres clusters take
// PGBasePort+i).
func FreePortRun(n int) (int, error) {
	for range 100 {
		base := randomPort(n)
		ok := true
		for i := range n {
			if !FreePort(base + i) {
				ok = false
				break
			}
		}
		if ok {
			return base, nil
		}
	}
	return 0, fmt.Errorf("testutil: no run of %d free ports", n)
}

// FreePortPairs returns n loopback ports that were free a moment ago, each
// with its port + offset free too (a platform process's metrics listener,
// platform.MetricsAddr).
func FreePortPairs(n, offset int) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for tries := 0; len(out) < n && tries < 1000; tries++ {
		p := randomPort(offset)
		if seen[p] || seen[p+offset] || seen[p-offset] || !FreePort(p) || !FreePort(p+offset) {
			continue
		}
		seen[p], seen[p+offset] = true, true
		out = append(out, p)
	}
	if len(out) < n {
		return nil, fmt.Errorf("testutil: found %d of %d free port pairs", len(out), n)
	}
	return out, nil
}
