package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"

	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/internal/refdata/refnats"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// natsBinary is the nats-server the reference data tests run as a
// process: the platform's (make build's bin/nats-server).
func natsBinary() string { return platform.FindNATSServer(env.bin) }

// refEnv is a platform of its own (three cells, issuer, GTR) whose cells
// take reference data from a real nats-server process. The shared platform
// of harness_test.go runs without NATS.
type refEnv struct {
	t        *testing.T
	dir      string
	natsURL  string
	nats     *exec.Cmd
	p        *platform.Platform
	cells    []platform.CellSpec
	payments cellpayv1.PaymentsClient
	gtrAddr  string
	nc       *nats.Conn
	js       jetstream.JetStream
}

var buildReplicator = sync.OnceValue(func() error {
	if testutil.PrebuiltBin() != "" {
		return nil // make build built it
	}
	build := exec.Command("go", "build", "-o", env.bin+"/", "./cmd/replicator")
	build.Dir = env.root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	return build.Run()
})

func startRefEnv(t *testing.T, ctx context.Context, cells int) *refEnv {
	t.Helper()
	if _, err := os.Stat(natsBinary()); err != nil {
		t.Fatalf("nats-server %q is required: %v", natsBinary(), err)
	}
	if err := buildReplicator(); err != nil {
		t.Fatal(err)
	}
	dir := platformDir(t, "cellpay-refdata-")
	e := &refEnv{t: t, dir: dir}
	ports, err := testutil.FreePorts(cells + 4)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	e.natsURL = "nats://" + addr(ports[0])
	e.startNATS(ctx)
	t.Cleanup(e.killNATS)

	for i := range cells {
		e.cells = append(e.cells, platform.CellSpec{ID: fmt.Sprintf("cell-%c", 'a'+i), Addr: addr(ports[4+i])})
	}
	gtrConfig := filepath.Join(dir, "gtr.yaml")
	table := "version: 1\ncells:\n"
	for _, c := range e.cells {
		table += fmt.Sprintf("  - {id: %s, addr: %q, pool: main}\n", c.ID, c.Addr)
	}
	table += "rules:\n  - {name: everything, pool: main, hash_on: partner}\n"
	if err := os.WriteFile(gtrConfig, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	pgBase, err := testutil.FreePortRun(2 * cells) // primaries, then standbys
	if err != nil {
		t.Fatal(err)
	}
	e.p, err = platform.Start(ctx, platform.Config{
		NoFsync:         true, // tests: see platform.Config.NoFsync
		BinDir:          env.bin,
		DataDir:         filepath.Join(dir, "data"),
		GTRConfig:       gtrConfig,
		RefData:         filepath.Join(env.root, "config", "refdata.json"), // bootstrap only
		Cells:           e.cells,
		IssuerAddr:      addr(ports[1]),
		GTRAddr:         addr(ports[2]),
		AdminAddr:       addr(ports[3]),
		PGBasePort:      pgBase,
		StandbyBasePort: pgBase + cells,
		// One access point: these tests look at one GTR.
		NoBackupGTR: true,
		// This NATS of its own is plaintext and open: the cells must be
		// told that is meant.
		// One server: what a cell creates there has one replica.
		Env: []string{"CELL_NATS_URL=" + e.natsURL, "CELL_INSECURE_PLAINTEXT=1", "CELL_NATS_REPLICAS=1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.p.Stop() })
	e.gtrAddr = addr(ports[2])
	e.payments = cellpayv1.NewPaymentsClient(dialPlatformGTR(t, e.p, e.gtrAddr))
	e.nc, err = nats.Connect(e.natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.nc.Close)
	e.js, _ = jetstream.New(e.nc)
	return e
}

func (e *refEnv) startNATS(ctx context.Context) {
	e.t.Helper()
	u := e.natsURL[len("nats://"):]
	host, port, _ := net.SplitHostPort(u)
	cmd := exec.Command(natsBinary(), "-js", "-sd", filepath.Join(e.dir, "nats"), "-a", host, "-p", port)
	logf, err := os.Create(filepath.Join(e.dir, "nats.log"))
	if err != nil {
		e.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.nats = cmd
	for {
		c, err := net.DialTimeout("tcp", u, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("nats-server did not start: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (e *refEnv) killNATS() {
	if e.nats != nil && e.nats.Process != nil {
		_ = e.nats.Process.Kill()
		_ = e.nats.Wait()
		e.nats = nil
	}
}

// replicator runs the replicator binary and returns its stdout; the exit
// error, if any, is returned too.
func (e *refEnv) replicator(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(env.bin, "replicator"), append([]string{"-nats-url", e.natsURL, "-replicas", "1"}, args...)...)
	cmd.Dir = env.root
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		err = fmt.Errorf("%w: %s", err, ee.Stderr)
	}
	return out, err
}

func (e *refEnv) publish(ctx context.Context, args ...string) refnats.Result {
	e.t.Helper()
	out, err := e.replicator(ctx, append(args, "-json")...)
	if err != nil {
		e.t.Fatalf("replicator %v: %v", args, err)
	}
	var res refnats.Result
	if err := json.Unmarshal(out, &res); err != nil {
		e.t.Fatalf("replicator %v: %q: %v", args, out, err)
	}
	return res
}

// waitCells waits until every cell reports a status that ok accepts, and
// returns the reports.
func (e *refEnv) waitCells(ctx context.Context, what string, ok func(refdata.Status) bool) map[string]refdata.Status {
	e.t.Helper()
	var last map[string]refdata.Status
	for ctx.Err() == nil {
		st, _ := refnats.CollectStatus(ctx, e.nc, 300*time.Millisecond)
		for id, s := range st {
			if last == nil {
				last = map[string]refdata.Status{}
			}
			last[id] = s
		}
		all := len(last) == len(e.cells)
		for _, s := range last {
			all = all && ok(s)
		}
		if all {
			return last
		}
	}
	e.t.Fatalf("cells never reported %s: %+v", what, last)
	return nil
}

func (e *refEnv) streamMsgs(ctx context.Context) uint64 {
	e.t.Helper()
	s, err := e.js.Stream(ctx, refdata.Stream)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Msgs
}

// refCellDB connects to a cell's own Postgres in e's platform.
func refCellDB(t *testing.T, ctx context.Context, e *refEnv, cellID string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, e.p.CellDatabaseURL(cellID))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// dialPlatformGTR connects to the GTR of platform p with p's own CA and
// partner keys.
func dialPlatformGTR(t *testing.T, p *platform.Platform, addr string) *grpc.ClientConn {
	t.Helper()
	opts, err := p.GTRDialOptions()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
