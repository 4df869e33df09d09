// Package monitoring runs the platform as `make run` does (internal/dev/platform)
// under a real Prometheus loaded with the project's alert rules, and with
// its traces sent to an OTLP receiver in this process, and checks alerting
// and tracing from the outside: an alert fires and resolves over the real
// processes' metrics, and one transaction is one trace across the GTR, a
// cell and the issuer simulator with nothing of its payload in it.
package monitoring

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
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
	bin := testutil.PrebuiltBin()
	if bin == "" {
		bin = filepath.Join(tmp, "bin")
		build := exec.Command("go", "build", "-o", bin+"/", "./cmd/gtr", "./cmd/cell", "./cmd/issuersim", "./cmd/natsmon")
		build.Dir = env.root
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "monitoring: building the binaries:", err)
			return 1
		}
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
// synchronous standby), the issuer simulator, one GTR, and one NATS server
// (JetStream: the cells' transaction directory, a bucket of
// directoryMaxBytes) watched by natsmon, every process with its /metrics
// listener (port + 2000) and its traces sent to env.traces. One NATS
// server, not the three of make run: a three-server cluster beside the
// rest overloads two cores (test/e2e's NATS shard runs alone for that).
func startPlatform(ctx context.Context, tmp, bin string) error {
	// Each component's port and its port + 2000 (its metrics) free.
	ports, err := testutil.FreePortPairs(6, 2000)
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
	pgBase, err := testutil.FreePortRun(2 * len(env.cells))
	if err != nil {
		return err
	}
	natsBase, err := natsPorts()
	if err != nil {
		return err
	}
	env.p, err = platform.Start(ctx, platform.Config{
		NoFsync:         true, // tests: see platform.Config.NoFsync
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
		NATS:            true,
		NATSAddr:        addr(natsBase),
		NATSServers:     1,
		Env: []string{
			// A small directory, which TestAlertStreamFilling fills.
			"CELL_DIRECTORY_MAX_BYTES=" + strconv.Itoa(directoryMaxBytes),
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + env.traces.addr,
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=",
			"OTEL_EXPORTER_OTLP_INSECURE=true",
			// The batch processor's default 5 s delay, shortened.
			"OTEL_BSP_SCHEDULE_DELAY=100",
		},
	})
	return err
}

// directoryMaxBytes bounds the cells' transaction directory bucket: a few
// hundred transactions fill it.
const directoryMaxBytes = 128 << 10

// natsPorts finds the first of the ports one NATS server takes (client,
// route, HTTP monitoring: platform.Config.NATSAddr's port + 0, 1, 2) with
// natsmon's metrics port (+ 2000) free too.
func natsPorts() (int, error) {
	for range 20 {
		base, err := testutil.FreePortRun(3)
		if err != nil {
			return 0, err
		}
		if testutil.FreePort(base + 2000) {
			return base, nil
		}
	}
	return 0, fmt.Errorf("no run of NATS ports with its metrics port free")
}
