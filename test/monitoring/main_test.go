// Package monitoring runs the platform as `make run` does (internal/platform)
// under a real Prometheus loaded with the project's alert rules, and with
// its traces sent to an OTLP receiver in this process, and checks alerting
// and tracing from the outside: an alert fires and resolves over the real
// processes' metrics, and one transaction is one trace across the GTR, a
// cell and the issuer simulator with nothing of its payload in it.
package monitoring

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/platform"
)

// env is what the package's tests share: one platform, one Prometheus,
// one trace receiver.
var env struct {
	root    string // repository root
	p       *platform.Platform
	cells   []platform.CellSpec
	gtrAddr string
	prom    *prometheus
	traces  *receiver
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	_, file, _, _ := runtime.Caller(0)
	env.root = filepath.Join(filepath.Dir(file), "..", "..")
	tmp, err := os.MkdirTemp("", "cellpay-monitoring-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "monitoring:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil { // the postgres user must traverse it
		fmt.Fprintln(os.Stderr, "monitoring:", err)
		return 1
	}
	bin := filepath.Join(tmp, "bin")
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/gtr", "./cmd/cell", "./cmd/issuersim")
	build.Dir = env.root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "monitoring: building the binaries:", err)
		return 1
	}
	env.traces, err = startReceiver()
	if err != nil {
		fmt.Fprintln(os.Stderr, "monitoring: trace receiver:", err)
		return 1
	}
	defer env.traces.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := startPlatform(ctx, tmp, bin); err != nil {
		fmt.Fprintln(os.Stderr, "monitoring: starting the platform:", err)
		return 1
	}
	defer env.p.Stop()
	return m.Run()
}

// startPlatform starts two cells (each with its Postgres primary and
// synchronous standby), the issuer simulator and one GTR, every process
// with its /metrics listener (port + 2000) and its traces sent to
// env.traces.
func startPlatform(ctx context.Context, tmp, bin string) error {
	// Each component's port and its port + 2000 (its metrics) free.
	ports, err := freePortPairs(6)
	if err != nil {
		return err
	}
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	env.cells = []platform.CellSpec{{ID: "cell-a", Addr: addr(ports[0])}, {ID: "cell-b", Addr: addr(ports[1])}}
	env.gtrAddr = addr(ports[2])
	gtrConfig := filepath.Join(tmp, "gtr.yaml")
	table := "version: 1\ncells:\n"
	for _, c := range env.cells {
		table += fmt.Sprintf("  - {id: %s, addr: %q, pool: main}\n", c.ID, c.Addr)
	}
	table += "rules:\n  - {name: everything, pool: main, hash_on: partner}\n"
	if err := os.WriteFile(gtrConfig, []byte(table), 0o644); err != nil {
		return err
	}
	pgBase, err := freePortRun(2 * len(env.cells))
	if err != nil {
		return err
	}
	env.p, err = platform.Start(ctx, platform.Config{
		BinDir:          bin,
		DataDir:         filepath.Join(tmp, "data"),
		GTRConfig:       gtrConfig,
		RefData:         filepath.Join(env.root, "config", "refdata.json"),
		Cells:           env.cells,
		IssuerAddr:      addr(ports[3]),
		GTRAddr:         env.gtrAddr,
		AdminAddr:       addr(ports[4]),
		NoBackupGTR:     true,
		PGBasePort:      pgBase,
		StandbyBasePort: pgBase + len(env.cells),
		Metrics:         true,
		Env: []string{
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + env.traces.addr,
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=",
			"OTEL_EXPORTER_OTLP_INSECURE=true",
			// The batch processor's default 5 s delay, shortened.
			"OTEL_BSP_SCHEDULE_DELAY=100",
		},
	})
	return err
}

// freePortPairs returns n loopback ports that were free a moment ago, each
// with its port + 2000 (platform.MetricsAddr) free too.
func freePortPairs(n int) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for tries := 0; len(out) < n && tries < 1000; tries++ {
		p := 20000 + rand.IntN(40000)
		if seen[p] || seen[p+2000] || seen[p-2000] || !free(p) || !free(p+2000) {
			continue
		}
		seen[p], seen[p+2000] = true, true
		out = append(out, p)
	}
	if len(out) < n {
		return nil, fmt.Errorf("found %d of %d free port pairs", len(out), n)
	}
	return out, nil
}

// freePortRun finds n consecutive free ports (the private Postgres clusters
// take PGBasePort+i).
func freePortRun(n int) (int, error) {
	for range 100 {
		base := 20000 + rand.IntN(40000)
		ok := true
		for i := range n {
			if !free(base + i) {
				ok = false
				break
			}
		}
		if ok {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no run of %d free ports", n)
}

func free(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
