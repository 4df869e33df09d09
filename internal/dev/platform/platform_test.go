package platform_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cellpay/cellpay/internal/dev/pgcluster"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/operators"
	"github.com/cellpay/cellpay/pkg/client"
)

// fakesConfig is a local platform whose gtr, cell and issuersim are the
// stand-in binary testdata/fakecomponent, with empty config files.
func fakesConfig(t *testing.T, ctx context.Context) platform.Config {
	t.Helper()
	root := moduleRoot(t)
	bin := t.TempDir()
	goBuild(t, ctx, root, filepath.Join(bin, "fake"), "./internal/dev/platform/testdata/fakecomponent")
	for _, name := range []string{"gtr", "cell", "issuersim"} {
		if err := os.Link(filepath.Join(bin, "fake"), filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	conf := t.TempDir()
	for _, f := range []string{"gtr.yaml", "refdata.json"} {
		if err := os.WriteFile(filepath.Join(conf, f), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := localConfig(t, bin, filepath.Join(conf, "gtr.yaml"), filepath.Join(conf, "refdata.json"))
	return cfg
}

// TestPlatformWithFakes runs the launcher against a stand-in binary for
// every component, so it is tested whatever state the real ones are in.
func TestPlatformWithFakes(t *testing.T) {
	defer goleak.VerifyNone(t)
	// Two starts of three Postgres pairs: 204 s on a slow 2-core host
	// beside the e2e shards (2026-12-06), where 3 minutes ran out.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	cfg := fakesConfig(t, ctx)
	var out testutil.Buffer
	cfg.Stdout, cfg.Stderr = &out, &out

	// cell-a's data dir was made before the database roles existed.
	makeLegacyDatabase(t, ctx, cfg, 0)
	p := exercise(t, ctx, cfg, cfg.Cells[0].ID)

	if !strings.Contains(out.String(), "[cell-a] serving on "+cfg.Cells[0].Addr) {
		t.Errorf("children's output is not prefixed with their names:\n%s", out.String())
	}
	log, err := os.ReadFile(p.Process("gtr").LogPath())
	if err != nil || !bytes.Contains(log, []byte("serving on")) {
		t.Errorf("gtr log %s: %q, %v", p.Process("gtr").LogPath(), log, err)
	}
	if fi, err := os.Stat(filepath.Join(cfg.DataDir, "pan.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("pan.key: %v, %v", fi, err)
	}
	checkTrust(t, p)

	// A restart keeps the roles' passwords.
	p2, err := platform.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("second Start: %v", err)
	}
	for _, c := range cfg.Cells {
		if p2.CellDatabaseURL(c.ID) != p.CellDatabaseURL(c.ID) || p2.CellMigrateDatabaseURL(c.ID) != p.CellMigrateDatabaseURL(c.ID) {
			t.Errorf("%s: the database URLs changed on a restart", c.ID)
		}
	}
	if err := p2.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// checkTrust: the platform provisioned a CA, a key file (0600) for every
// sample partner, and a registry that holds no key, only hashes; a second
// provisioning keeps the keys.
func checkTrust(t *testing.T, p *platform.Platform) {
	t.Helper()
	if _, err := os.Stat(p.CAFile()); err != nil {
		t.Errorf("CA: %v", err)
	}
	keys, err := p.PartnerKeys()
	if err != nil || len(keys) != len(platform.SamplePartners) {
		t.Fatalf("partner keys: %d, %v; want %d", len(keys), err, len(platform.SamplePartners))
	}
	for id := range keys {
		fi, err := os.Stat(filepath.Join(p.PartnerKeyDir(), id+".key"))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s.key: %v, %v", id, fi, err)
		}
	}
	reg, err := os.ReadFile(filepath.Join(p.Config().DataDir, "partners.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for id, k := range keys {
		if bytes.Contains(reg, []byte(k)) || bytes.Contains(reg, []byte(k[len(k)-20:])) {
			t.Errorf("the registry file holds %s's API key", id)
		}
	}
	// An operator token per role (0600), authenticating with its role by
	// the operators file, which holds only hashes.
	f, err := operators.Load(p.OperatorsFile())
	if err != nil {
		t.Fatal(err)
	}
	ix, err := operators.Compile(f, "")
	if err != nil {
		t.Fatal(err)
	}
	opsFile, _ := os.ReadFile(p.OperatorsFile())
	for _, role := range platform.SampleOperators {
		path := p.OperatorTokenFile(role)
		tok, err := operators.ReadTokenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v", path, fi, err)
		}
		if op, err := ix.Authenticate(tok); err != nil || op.Role != role {
			t.Errorf("%s token: %+v, %v", role, op, err)
		}
		if bytes.Contains(opsFile, []byte(tok[len(tok)-20:])) {
			t.Errorf("the operators file holds the %s token", role)
		}
	}
	if p.AdminTokenFile() != p.OperatorTokenFile(operators.RoleAdmin) {
		t.Errorf("AdminTokenFile %s", p.AdminTokenFile())
	}
}

// checkPinned: the tools' credentials pinned to a cell's identity reach
// its health service; pinned to another identity, the handshake refuses
// the cell, naming what it presented.
func checkPinned(t *testing.T, ctx context.Context, p *platform.Platform, cell platform.CellSpec) {
	t.Helper()
	check := func(peer string) error {
		opt, err := platform.ClientTLSTo(p.Config().DataDir, platform.OpsCertName, peer)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(cell.Addr, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err = healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
		return err
	}
	if err := check(hop.Cell(cell.ID)); err != nil {
		t.Errorf("pinned to %s: %v", cell.ID, err)
	}
	if err := check(hop.Issuer); err == nil || !strings.Contains(err.Error(), "not the peer dialled") {
		t.Errorf("pinned to the issuer, dialling %s: %v, want the handshake refused", cell.ID, err)
	}
}

// TestPlatformFailureNamesComponent checks that a component that never
// becomes healthy fails Start with its name and log, and nothing is left.
func TestPlatformFailureNamesComponent(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := t.TempDir()
	script := "#!/bin/sh\necho \"broken component $*\" >&2\nexit 3\n"
	for _, name := range []string{"gtr", "cell", "issuersim"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(t.TempDir(), "conf")
	if err := os.WriteFile(conf, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := localConfig(t, bin, conf, conf)
	_, err := platform.Start(ctx, cfg)
	if err == nil {
		t.Fatal("Start succeeded with broken components")
	}
	if msg := err.Error(); !strings.Contains(msg, "issuersim") || !strings.Contains(msg, "broken component -listen") {
		t.Errorf("error does not name the component and quote its log: %v", err)
	}
	for i := range cfg.Cells {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", cfg.PGBasePort+i), time.Second); err == nil {
			c.Close()
			t.Errorf("postgres on port %d still running after a failed Start", cfg.PGBasePort+i)
		}
	}
}

// TestPlatformEndToEnd runs the real binaries with the sample configs.
func TestPlatformEndToEnd(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	root := moduleRoot(t)
	cmds := []string{"issuersim", "cell", "gtr"}
	for _, c := range cmds {
		if _, err := os.Stat(filepath.Join(root, "cmd", c, "main.go")); err != nil {
			t.Skipf("cmd/%s does not exist yet", c)
		}
	}
	bin := testutil.PrebuiltBin()
	if bin == "" {
		bin = t.TempDir()
		goBuild(t, ctx, root, bin+"/", "./cmd/issuersim", "./cmd/cell", "./cmd/gtr")
	}

	cfg := localConfig(t, bin, "", filepath.Join(root, "config", "refdata.json"))
	cfg.GTRConfig = rewriteAddrs(t, filepath.Join(root, "config", "gtr.yaml"), cfg)
	exercise(t, ctx, cfg, "")
}

// exercise starts the platform, checks every component and database
// (legacyCell's made by makeLegacyDatabase, or ""), kills and restarts a
// cell, pauses another, stops everything and checks nothing is left.
func exercise(t *testing.T, ctx context.Context, cfg platform.Config, legacyCell string) *platform.Platform {
	t.Helper()
	p, err := platform.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			p.Stop()
		}
	}()

	names := []string{"gtr", "gtr-backup", "issuersim"}
	for _, c := range cfg.Cells {
		names = append(names, c.ID)
	}
	for _, name := range names {
		proc := p.Process(name)
		if proc == nil || !proc.Running() || proc.Pid() == 0 {
			t.Fatalf("Process(%q) = %+v, not running", name, proc)
		}
		// Healthy, within a bound: a cell's health follows its database
		// (a ping every few seconds), and on a loaded host one ping may
		// time out and say NOT_SERVING until the next (make test,
		// 2026-12-06).
		var last error
		if !testutil.Within(15*time.Second, func() bool {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			last = proc.CheckHealth(cctx)
			return last == nil
		}) {
			t.Errorf("%s health: %v", name, last)
		}
	}
	adminTLS, err := client.TLS(p.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	if err := platform.CheckHealth(ctx, cfg.AdminAddr, adminTLS); err != nil {
		t.Logf("admin API at %s has no gRPC health service over TLS: %v", cfg.AdminAddr, err)
	}
	for i, c := range cfg.Cells {
		pg := p.Postgres(c.ID)
		if pg == nil || pg.Port() != cfg.PGBasePort+i {
			t.Fatalf("Postgres(%s) = %v, want a cluster on port %d", c.ID, pg, cfg.PGBasePort+i)
		}
	}
	checkDatabases(t, ctx, p, legacyCell)
	checkPinned(t, ctx, p, cfg.Cells[0])

	// A crash, then a restart with the same arguments.
	cell := p.Process(cfg.Cells[1].ID)
	oldPid := cell.Pid()
	if err := cell.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if cell.Running() {
		t.Fatal("cell still running after Kill")
	}
	testutil.Eventually(t, 10*time.Second, "the killed cell stops answering its health check", func() bool {
		return !answers(ctx, cell, 300*time.Millisecond)
	})
	if err := cell.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if cell.Pid() == oldPid || cell.CheckHealth(ctx) != nil {
		t.Fatalf("cell not back after Restart (pid %d, was %d)", cell.Pid(), oldPid)
	}

	// A pause: a stopped process does not answer, and does again on SIGCONT.
	paused := p.Process(cfg.Cells[0].ID)
	if err := paused.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the cell stopped after SIGSTOP", func() bool { return testutil.Stopped(paused.Pid()) })
	if answers(ctx, paused, 300*time.Millisecond) {
		t.Error("a paused cell answered its health check")
	}
	if err := paused.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := paused.CheckHealth(ctx); err != nil {
		t.Errorf("cell after SIGCONT: %v", err)
	}

	var pids []int
	for _, name := range names {
		pids = append(pids, p.Process(name).Pid())
	}
	// Each Postgres backend runs in a session of its own: the
	// postmaster's process group holds the postmaster alone, so every
	// server process is checked by its own pid.
	var pgPids []int
	for _, c := range cfg.Cells {
		for role, cl := range map[string]*pgcluster.Cluster{"primary": p.Postgres(c.ID), "standby": p.Standby(c.ID)} {
			if cl == nil {
				t.Fatalf("%s has no %s Postgres", c.ID, role)
			}
			server := cl.Pids()
			if len(server) < 2 {
				t.Fatalf("%s's %s Postgres: processes %v, want the postmaster and its children", c.ID, role, server)
			}
			pgPids = append(pgPids, server...)
		}
	}
	stopped = true
	if err := p.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	for _, pid := range pids {
		var err error
		if !testutil.Within(10*time.Second, func() bool { err = syscall.Kill(-pid, 0); return errors.Is(err, syscall.ESRCH) }) {
			t.Errorf("process group %d still has processes 10 s after Stop (kill: %v)", pid, err)
		}
	}
	for _, pid := range pgPids {
		gone := func() bool { s, err := testutil.ProcState(pid); return err != nil || s == 'Z' }
		if !testutil.Within(10*time.Second, gone) {
			t.Errorf("Postgres process %d still running 10 s after Stop", pid)
		}
	}
	for _, name := range names {
		if p.Process(name).Running() {
			t.Errorf("%s running after Stop", name)
		}
	}
	return p
}

// localConfig is a platform on free loopback ports with its data in a
// temporary directory.
func localConfig(t *testing.T, bin, gtrConfig, refData string) platform.Config {
	t.Helper()
	ports := freePorts(t, 8)
	pgBase, err := testutil.FreePortRun(6) // below the ephemeral range
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	return platform.Config{
		NoFsync:    true, // tests: see Config.NoFsync
		BinDir:     bin,
		DataDir:    filepath.Join(t.TempDir(), "cellpay"),
		GTRConfig:  gtrConfig,
		RefData:    refData,
		GTRAddr:    addr(0),
		AdminAddr:  addr(1),
		IssuerAddr: addr(2),
		Cells: []platform.CellSpec{
			{ID: "cell-a", Addr: addr(3)},
			{ID: "cell-b", Addr: addr(4)},
			{ID: "cell-c", Addr: addr(5)},
		},
		PGBasePort:      pgBase,
		StandbyBasePort: pgBase + 3,
		BackupGTRAddr:   addr(6),
		BackupAdminAddr: addr(7),
	}
}

// rewriteAddrs copies the GTR config with the default local addresses
// replaced by cfg's, so the GTR finds the cells on their test ports.
func rewriteAddrs(t *testing.T, path string, cfg platform.Config) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("sample GTR config: %v", err)
	}
	s := string(b)
	repl := []string{platform.DefaultGTRAddr, cfg.GTRAddr, platform.DefaultAdminAddr, cfg.AdminAddr, platform.DefaultIssuerAddr, cfg.IssuerAddr}
	for i, c := range platform.DefaultCells {
		repl = append(repl, c.Addr, cfg.Cells[i].Addr)
	}
	s = strings.NewReplacer(repl...).Replace(s)
	out := filepath.Join(t.TempDir(), "gtr.yaml")
	if err := os.WriteFile(out, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("runtime.Caller failed")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func goBuild(t *testing.T, ctx context.Context, dir, out string, pkgs ...string) {
	t.Helper()
	args := append([]string{"build", "-o", out}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
}

// freePorts returns n distinct loopback ports that were free a moment ago,
// claimed by no other test process (testutil.FreePorts).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports, err := testutil.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// answers reports whether proc answers a gRPC health check within d.
func answers(ctx context.Context, proc *platform.Proc, d time.Duration) bool {
	short, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return proc.CheckHealth(short) == nil
}
