package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
)

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
		base := 20000 + rand.IntN(40000)
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
		p := 20000 + rand.IntN(40000)
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
