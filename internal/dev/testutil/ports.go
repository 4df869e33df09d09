package testutil

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
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

// reserved is this process's claim on the ports it handed out. Free at the
// moment of asking is not enough: go test runs packages as parallel
// processes, and two that each pick ports for a platform started seconds
// later can pick the same one (CI: the monitoring test's GTR metrics
// listener "bind: address already in use"). So every port handed out is
// also claimed, for the life of the process, by a write lock on its byte
// of one file that all test processes share (fcntl record locks: the
// kernel drops them when the process exits, however it exits). A port
// another process holds is passed over.
var reserved struct {
	sync.Mutex
	f     *os.File // never closed: closing any descriptor drops the locks
	err   error
	mine  map[int]bool // record locks don't exclude their own process
	tried bool
}

// portLockFile is the file whose bytes stand for the ports.
func portLockFile() string { return filepath.Join(os.TempDir(), "cellpay-test-ports.lock") }

// reserve claims port for this process; false if this or another test
// process holds it already.
func reserve(port int) bool {
	reserved.Lock()
	defer reserved.Unlock()
	if !reserved.tried {
		reserved.tried = true
		reserved.mine = map[int]bool{}
		reserved.f, reserved.err = os.OpenFile(portLockFile(), os.O_RDWR|os.O_CREATE, 0o666)
	}
	if reserved.mine[port] {
		return false
	}
	if reserved.err == nil {
		lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart, Start: int64(port), Len: 1}
		if err := syscall.FcntlFlock(reserved.f.Fd(), syscall.F_SETLK, &lk); err != nil {
			return false
		}
	}
	// Without the file (unwritable temp dir) the bind check is all there is.
	reserved.mine[port] = true
	return true
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

// claim reports whether port is free now and is now this process's.
func claim(port int) bool { return FreePort(port) && reserve(port) }

// FreePorts returns n distinct loopback ports, each free a moment ago and
// claimed by no other test process.
func FreePorts(n int) ([]int, error) {
	var out []int
	for tries := 0; len(out) < n && tries < 1000; tries++ {
		if p := randomPort(0); claim(p) {
			out = append(out, p)
		}
	}
	if len(out) < n {
		return nil, fmt.Errorf("testutil: found %d of %d free ports", len(out), n)
	}
	return out, nil
}

// FreePortRun finds n consecutive loopback ports that were free a moment
// ago, claimed by no other test process, and returns the first (a
// platform's private Postgres clusters take PGBasePort+i). A run that
// fails part way keeps the ports it claimed out of later runs, harmlessly.
func FreePortRun(n int) (int, error) {
	for range 100 {
		base := randomPort(n)
		ok := true
		for i := range n {
			if !claim(base + i) {
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
// platform.MetricsAddr), all claimed by no other test process.
func FreePortPairs(n, offset int) ([]int, error) {
	var out []int
	for tries := 0; len(out) < n && tries < 1000; tries++ {
		p := randomPort(offset)
		if !claim(p) {
			continue
		}
		if !claim(p + offset) {
			continue // p stays claimed and unused
		}
		out = append(out, p)
	}
	if len(out) < n {
		return nil, fmt.Errorf("testutil: found %d of %d free port pairs", len(out), n)
	}
	return out, nil
}

// Unbound fails t for each of addrs that cannot be listened on: what a
// component had bound is free again (its Shutdown, or a Start that failed,
// released it).
func Unbound(t testing.TB, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Errorf("%s still bound: %v", a, err)
			continue
		}
		l.Close()
	}
}

// Closed reports whether ch is closed, without waiting.
func Closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
