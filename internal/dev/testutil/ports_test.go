package testutil

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestMain lets the test binary stand in for a second test process: with
// CELLPAY_PORTS_CHILD=n it claims n ports, prints them, and holds them
// until its stdin closes.
func TestMain(m *testing.M) {
	if s := os.Getenv("CELLPAY_PORTS_CHILD"); s != "" {
		n, _ := strconv.Atoi(s)
		ports, err := FreePorts(n)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(strings.Trim(fmt.Sprint(ports), "[]"))
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestPortsClaimedAcrossProcesses: a port another test process handed out
// is not handed out here while that process lives, though nothing listens
// on it yet, and is again once it has exited.
func TestPortsClaimedAcrossProcesses(t *testing.T) {
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "CELLPAY_PORTS_CHILD=20")
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var theirs []int
	for _, f := range strings.Fields(line) {
		p, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("child printed %q", line)
		}
		theirs = append(theirs, p)
	}
	if len(theirs) != 20 {
		t.Fatalf("child claimed %d ports, want 20: %q", len(theirs), line)
	}
	for _, p := range theirs {
		if !FreePort(p) {
			continue // bound since by some other process: claim would refuse it anyway
		}
		if claim(p) {
			t.Fatalf("port %d claimed here while the child holds it", p)
		}
	}
	stdin.Close()
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, p := range theirs {
		if FreePort(p) && !claim(p) {
			t.Fatalf("port %d still held after the child exited", p)
		}
	}
	if claim(theirs[0]) {
		t.Fatal("a port claimed twice by one process")
	}
}

// TestFreePortPairs: each pair's two ports are distinct from every other
// port handed out.
func TestFreePortPairs(t *testing.T) {
	ps, err := FreePortPairs(10, 2000)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ps {
		for _, q := range []int{p, p + 2000} {
			if seen[q] {
				t.Fatalf("port %d handed out twice in %v", q, ps)
			}
			seen[q] = true
		}
	}
}
