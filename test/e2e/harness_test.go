// Package e2e starts the real binaries as separate processes (a private
// Postgres per cell, the issuer simulator, three cells and the GTR) and
// checks the platform from the outside, through gRPC and the cells' own
// databases.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// env is the platform every test in the package shares. Tests use their
// own transaction IDs, so they do not disturb each other.
var env struct {
	root    string // repository root
	bin     string // built binaries
	p       *platform.Platform
	gtrAddr string
	// backupAddr is the backup access point's partners' listener.
	backupAddr string
	// restAddr and backupRESTAddr are the access points' REST/JSON
	// listeners.
	restAddr, backupRESTAddr string
	cells                    []platform.CellSpec
	payments                 cellpayv1.PaymentsClient
	issuer                   issuerproto.IssuerClient
	// gtrOpts dial the GTR as the sample partners do: TLS trusting the
	// platform's CA, each call with its partner's API key.
	gtrOpts []grpc.DialOption
	// adminTLS dials a GTR's admin API: TLS trusting the platform's CA.
	adminTLS grpc.DialOption
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if err := selectShard(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 2
	}
	_, file, _, _ := runtime.Caller(0)
	env.root = filepath.Join(filepath.Dir(file), "..", "..")
	tmp, err := os.MkdirTemp("", "cellpay-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	// CELLPAY_E2E_KEEP=1 keeps the platform's directory (its processes'
	// logs under logs/) for reading a failure after the run.
	if os.Getenv("CELLPAY_E2E_KEEP") == "1" {
		defer fmt.Fprintln(os.Stderr, "e2e: kept", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // the postgres user must traverse it
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if env.bin = testutil.PrebuiltBin(); env.bin == "" {
		env.bin = filepath.Join(tmp, "bin")
		if err := buildBinaries(env.root, env.bin); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := startPlatform(ctx, tmp); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: starting the platform:", err)
		return 1
	}
	defer env.p.Stop()
	return m.Run()
}

// buildBinaries builds the platform's binaries and grpcurl into bin.
func buildBinaries(root, bin string) error {
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/gtr", "./cmd/cell", "./cmd/issuersim", "./cmd/loadgen", "./cmd/replicator", "./cmd/gtrctl", "./cmd/cellpay", "./cmd/natsmon")
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the binaries: %w", err)
	}
	grpcurl := exec.Command("go", "build", "-o", bin+"/grpcurl", "github.com/fullstorydev/grpcurl/cmd/grpcurl")
	grpcurl.Dir = filepath.Join(root, "tools", "grpcurl")
	grpcurl.Stdout, grpcurl.Stderr = os.Stderr, os.Stderr
	if err := grpcurl.Run(); err != nil {
		return fmt.Errorf("building grpcurl (tools/grpcurl): %w", err)
	}
	return nil
}

func startPlatform(ctx context.Context, tmp string) error {
	ports, err := testutil.FreePorts(7)
	if err != nil {
		return err
	}
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	env.cells = []platform.CellSpec{{ID: "cell-a", Addr: addr(ports[0])}, {ID: "cell-b", Addr: addr(ports[1])}, {ID: "cell-c", Addr: addr(ports[2])}}
	env.gtrAddr = addr(ports[3])
	issuerAddr := addr(ports[4])
	env.restAddr, env.backupRESTAddr = addr(ports[5]), addr(ports[6])
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
	adminPorts, err := testutil.FreePorts(3)
	if err != nil {
		return err
	}
	natsPort, err := testutil.FreePorts(1)
	if err != nil {
		return err
	}
	natsBase, err := testutil.FreePortRun(natsPorts)
	if err != nil {
		return err
	}
	env.p, err = platform.Start(ctx, platform.Config{
		// A benchmark measures the platform as it runs; the tests don't
		// need its disk flushes (platform.Config.NoFsync).
		NoFsync:    !benchmarking(),
		BinDir:     env.bin,
		DataDir:    filepath.Join(tmp, "data"),
		GTRConfig:  gtrConfig,
		RefData:    filepath.Join(env.root, "config", "refdata.json"),
		Cells:      env.cells,
		IssuerAddr: issuerAddr,
		GTRAddr:    env.gtrAddr,
		AdminAddr:  addr(adminPorts[0]),
		// The backup access point, a second GTR replica on the same NATS.
		BackupGTRAddr:   addr(adminPorts[1]),
		BackupAdminAddr: addr(adminPorts[2]),
		RESTAddr:        env.restAddr,
		BackupRESTAddr:  env.backupRESTAddr,
		PGBasePort:      pgBase,
		StandbyBasePort: pgBase + len(env.cells),
		// The whole platform, as make run starts it: NATS with JetStream
		// and the replicator's reference data, when nats-server is here.
		NATS:          platform.FindNATSServer(env.bin) != "",
		NATSAddr:      addr(natsBase),
		NATSServers:   natsServersHere(),
		RefDataSource: filepath.Join(env.root, "config", "refdata"),
		// The sample partners' callbacks go to the sample receiver; the
		// callbacks tests register partners of their own with receivers
		// of their own. A compressed schedule and a short timeout keep
		// retries and dead letters within a test's time.
		CallbackAddr: addr(natsPort[0]),
		Env:          []string{"CELL_CALLBACK_SCHEDULE=0s,250ms,500ms,1s,2s", "CELL_CALLBACK_TIMEOUT=1s"},
	})
	if err != nil {
		return err
	}
	env.backupAddr = addr(adminPorts[1])
	if env.gtrOpts, err = env.p.GTRDialOptions(); err != nil {
		return err
	}
	if env.adminTLS, err = client.TLS(env.p.CAFile()); err != nil {
		return err
	}
	env.payments = cellpayv1.NewPaymentsClient(dialGTR(env.gtrAddr))
	// The checker reads the issuer's effect counters as the tools'
	// identity, the only one the issuer serves them to.
	opsTLS, err := env.p.ClientTLS(platform.OpsCertName)
	if err != nil {
		return err
	}
	env.issuer = issuerproto.NewIssuerClient(dial(issuerAddr, opsTLS))
	return nil
}

// natsClusterShard runs the NATS cluster's tests (nats_cluster_test.go).
const natsClusterShard = "nats"

// natsServersHere is how many NATS servers this process's platform runs:
// three, as make run does, where the NATS cluster's tests run (their shard,
// or every test when no shard is named); one elsewhere. Two cores do not
// carry three platforms of three NATS servers each with every stream
// replicated three times beside the platform packages: in make test the
// host's load then failed Postgres starts and the drill's deadlines
// (2026-12-06), and the suite left its 10 minutes. A platform of one
// server runs the same code, with each stream on one server.
func natsServersHere() int {
	if s := os.Getenv(shardEnv); s != "" && s != natsClusterShard {
		return 1
	}
	return 3
}

// natsPorts is the run of ports a platform's NATS cluster takes: three
// servers' client and route ports (platform.Config.NATSServers).
const natsPorts = 6

// natsPortRun is the first of a run of natsPorts free ports.
func natsPortRun(t *testing.T) int {
	t.Helper()
	base, err := testutil.FreePortRun(natsPorts)
	if err != nil {
		t.Fatal(err)
	}
	return base
}

// benchmarking reports whether a benchmark of this package asked to run
// (CELLPAY_<NAME>_BENCH=1, as the make bench-* targets set).
func benchmarking() bool {
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "CELLPAY_") && strings.HasSuffix(k, "_BENCH") && v == "1" {
			return true
		}
	}
	return false
}

func dial(addr string, creds grpc.DialOption) *grpc.ClientConn {
	conn, err := grpc.NewClient(addr, creds)
	if err != nil {
		panic(err) // only on a malformed target, which is ours
	}
	return conn
}

// dialGTR connects to a GTR's partners' listener with env.gtrOpts.
func dialGTR(addr string) *grpc.ClientConn {
	conn, err := grpc.NewClient(addr, env.gtrOpts...)
	if err != nil {
		panic(err) // only on a malformed target, which is ours
	}
	return conn
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// cellDB connects to a cell's own Postgres.
func cellDB(t *testing.T, ctx context.Context, cellID string) *pgx.Conn {
	t.Helper()
	return sharedTarget().db(t, ctx, cellID)
}

// db connects to the database of target's cell cellID, closed with the
// test.
func (target faultTarget) db(t *testing.T, ctx context.Context, cellID string) *pgx.Conn {
	t.Helper()
	url := target.p.CellDatabaseURL(cellID)
	if url == "" {
		t.Fatalf("no database for cell %q", cellID)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// effects reads the issuer simulator's effect and request counters for
// partner's transaction id.
func effects(t *testing.T, ctx context.Context, partner, id string) (effects, requests int32) {
	t.Helper()
	return effectsOn(t, ctx, env.issuer, partner, id)
}

// effectsOn is effects at issuer.
func effectsOn(t *testing.T, ctx context.Context, issuer issuerproto.IssuerClient, partner, id string) (effects, requests int32) {
	t.Helper()
	resp, err := issuer.Effects(ctx, &issuerproto.EffectsRequest{
		Transactions: []*issuerproto.TransactionRef{{PartnerId: partner, TransactionId: id}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range resp.GetEffects() {
		if e.GetPartnerId() == partner && e.GetTransactionId() == id {
			return e.GetEffects(), e.GetRequests()
		}
	}
	return 0, 0
}

// recordedEffects is the issuer's record of every outcome it applied
// since since (ListEffects, every page, as the tools' identity).
func recordedEffects(t *testing.T, ctx context.Context, since time.Time) []*issuerproto.RecordedEffect {
	t.Helper()
	req := &issuerproto.ListEffectsRequest{From: timestamppb.New(since), To: timestamppb.New(time.Now().Add(time.Minute)), PageSize: 1000}
	var out []*issuerproto.RecordedEffect
	for pages := 0; ; pages++ {
		if pages == 1000 {
			t.Fatal("the issuer's record: more than 1,000 pages")
		}
		resp, err := env.issuer.ListEffects(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp.GetEffects()...)
		if resp.GetNextPageToken() == "" {
			return out
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

var runID = fmt.Sprintf("e2e%d", time.Now().UnixNano()%1_000_000_000)

// request returns a valid card authorization with a unique ID.
func request(suffix, pan string) *cellpayv1.SubmitTransactionRequest {
	return &cellpayv1.SubmitTransactionRequest{
		TransactionId: runID + "-" + suffix,
		PaymentType:   cellpayv1.PaymentType_CARD_AUTHORIZATION,
		PartnerId:     "p-001",
		Market:        "GB",
		Amount:        &cellpayv1.Money{MinorUnits: 1250, Currency: "GBP"},
		Merchant:      &cellpayv1.Merchant{Id: "m-1", Mcc: "5411", Country: "GB"},
		Card:          &cellpayv1.Card{Pan: pan, ExpiryMonth: 12, ExpiryYear: 2030},
	}
}

var panSeq struct {
	sync.Mutex
	n int
}

// freshPAN returns a Luhn-valid card number used by no other call of this
// run, so that a test's transactions never count against another's
// per-card velocity limit (approvedPAN is shared, and its budget is small).
func freshPAN() string {
	panSeq.Lock()
	panSeq.n++
	n := panSeq.n
	panSeq.Unlock()
	body := fmt.Sprintf("4921%011d", (time.Now().UnixNano()/1000%1_000_000)*10_000+int64(n))
	return body + string(card.CheckDigit(body))
}

// freeze stops proc (SIGSTOP) and returns its thaw (SIGCONT), which
// signals once however often it is called: deferred as well, so that a
// test that fails while proc is frozen leaves nothing stopped.
func freeze(t *testing.T, proc interface{ Signal(os.Signal) error }, what string) (thaw func()) {
	t.Helper()
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("freeze %s: %v", what, err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if err := proc.Signal(syscall.SIGCONT); err != nil {
				t.Errorf("thaw %s: %v", what, err)
			}
		})
	}
}
