package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// natsProc is a NATS server with JetStream for the drain test: the Debian
// nats-server binary as a separate process, or, when that is missing, the
// embedded server (so the test still runs on machines without the package).
type natsProc struct {
	URL  string
	cmd  *exec.Cmd
	srv  *natstest.Server
	done chan struct{}
}

func startNATS(t *testing.T, dir string) *natsProc {
	t.Helper()
	ports, err := testutil.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	n := &natsProc{URL: "nats://" + addr}
	bin := platform.FindNATSServer(env.bin)
	if bin == "" {
		t.Log("nats-server binary not found; using the embedded server")
		n.srv = natstest.StartWith(t, func(o *natsserver.Options) { o.Port, o.StoreDir = ports[0], dir })
		return n
	}
	logf, err := os.Create(filepath.Join(dir, "..", "nats.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	n.cmd = exec.Command(bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(ports[0]), "-sd", dir)
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.done = make(chan struct{})
	go func() { n.cmd.Wait(); close(n.done) }()
	t.Cleanup(n.Stop)
	waitTCP(t, addr, n.done)
	return n
}

// Stop stops the server; calling it again does nothing.
func (n *natsProc) Stop() {
	switch {
	case n.srv != nil:
		n.srv.Stop()
		n.srv = nil
	case n.cmd != nil:
		n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
			n.cmd.Process.Kill()
			<-n.done
		}
		n.cmd = nil
	}
}

func waitTCP(t *testing.T, addr string, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			t.Fatalf("process serving %s exited", addr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never accepted connections: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gtrProc is one extra GTR replica of the drain test, started from the
// built binary with its own ports, state file and replica id.
type gtrProc struct {
	ID, Addr, AdminAddr string
	args                []string
	env                 []string
	logPath             string
	cmd                 *exec.Cmd
	done                chan struct{}
	payments            cellpayv1.PaymentsClient
}

func newGTR(t *testing.T, dir, id, configFile, natsURL, token string) *gtrProc {
	t.Helper()
	ports, err := testutil.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	g := &gtrProc{
		ID:        id,
		Addr:      "127.0.0.1:" + strconv.Itoa(ports[0]),
		AdminAddr: "127.0.0.1:" + strconv.Itoa(ports[1]),
		logPath:   filepath.Join(dir, id+".log"),
	}
	g.args = []string{"-listen", g.Addr, "-admin-listen", g.AdminAddr, "-config", configFile,
		"-nats-url", natsURL, "-state-file", filepath.Join(dir, id+".state.json"), "-replica-id", id}
	cert, key := env.p.GTRCertFiles()
	g.args = append(g.args, "-tls-cert", cert, "-tls-key", key, "-cell-ca", env.p.CAFile(), "-partners", env.p.PartnersFile())
	if strings.HasPrefix(natsURL, "tls://") {
		g.args = append(g.args, "-nats-ca", env.p.CAFile())
	} else {
		// A plaintext NATS of the test's own, one server.
		g.args = append(g.args, "-insecure-plaintext", "-nats-replicas", "1")
	}
	g.env = append(os.Environ(), "GTR_ADMIN_TOKEN="+token)
	g.payments = cellpayv1.NewPaymentsClient(dialGTR(g.Addr))
	t.Cleanup(g.Stop)
	return g
}

// cellsOf makes g front the cells of p, a platform other than env.p: it
// trusts p's CA for them and presents p's GTR certificate.
func (g *gtrProc) cellsOf(p *platform.Platform) {
	f := p.TLSFiles(platform.GTR)
	g.args = append(g.args, "-cell-ca", f.CA, "-cell-tls-cert", f.Cert, "-cell-tls-key", f.Key)
}

// Start runs the binary and waits for its health check.
func (g *gtrProc) Start(t *testing.T) {
	t.Helper()
	g.startStderr(t, nil)
}

// startStderr is Start with the process's stderr (its log) on stderr, or
// in its log file with the rest when stderr is nil.
func (g *gtrProc) startStderr(t *testing.T, stderr *os.File) {
	t.Helper()
	logf, err := os.OpenFile(g.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(env.bin, "gtr"), g.args...)
	cmd.Env = g.env
	cmd.Stdout, cmd.Stderr = logf, logf
	if stderr != nil {
		cmd.Stderr = stderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	g.cmd, g.done = cmd, done
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		if err := platform.CheckHealth(ctx, g.AdminAddr, env.adminTLS); err == nil {
			return
		}
		select {
		case <-done:
			t.Fatalf("%s exited at start; log %s:\n%s", g.ID, g.logPath, tail(g.logPath))
		case <-ctx.Done():
			t.Fatalf("%s not healthy; log:\n%s", g.ID, tail(g.logPath))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop sends SIGTERM and waits for the exit.
func (g *gtrProc) Stop() {
	if g.cmd == nil {
		return
	}
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(15 * time.Second):
		g.cmd.Process.Kill()
		<-g.done
	}
	g.cmd = nil
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// tableConfig writes the routing table of the test replicas: every cell
// in one pool, one rule hashing on hashOn.
func tableConfig(t *testing.T, dir, hashOn string) string {
	t.Helper()
	table := "version: 1\ncells:\n"
	for _, c := range env.cells {
		table += fmt.Sprintf("  - {id: %s, addr: %q, pool: main}\n", c.ID, c.Addr)
	}
	table += "rules:\n  - {name: everything, pool: main, hash_on: " + hashOn + "}\n"
	path := filepath.Join(dir, "gtr-drain.yaml")
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// twoReplicas starts NATS and two GTR replicas of their own (IDs
// prefix-1 and prefix-2) over the shared cells, with the drain table
// (hashing on the merchant), and returns them with their admin clients.
func twoReplicas(t *testing.T, prefix string) (dir string, ns *natsProc, gtrs [2]*gtrProc, admins [2]adminproto.AdminClient) {
	t.Helper()
	return twoReplicasOn(t, prefix, "merchant")
}

// twoReplicasOn is twoReplicas with a table hashing on hashOn.
func twoReplicasOn(t *testing.T, prefix, hashOn string) (dir string, ns *natsProc, gtrs [2]*gtrProc, admins [2]adminproto.AdminClient) {
	t.Helper()
	dir = t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "nats"), 0o755); err != nil {
		t.Fatal(err)
	}
	ns = startNATS(t, filepath.Join(dir, "nats"))
	cfg := tableConfig(t, dir, hashOn)
	for i := range gtrs {
		gtrs[i] = newGTR(t, dir, fmt.Sprintf("%s-%d", prefix, i+1), cfg, ns.URL, drainToken)
		// The tests of these replicas check that each transaction lands
		// where the table says. The adaptive per-cell limit skips a cell
		// at its limit for the next one ranked (nothing sent, nothing
		// lost), which on a loaded host moved a few of 10,000 keys off
		// their home (TestDrain, 2026-12-06): admission has tests of its
		// own, so these replicas route by the table alone.
		gtrs[i].args = append(gtrs[i].args, "-no-admission")
		gtrs[i].Start(t)
		admins[i] = adminClient(t, gtrs[i].AdminAddr)
	}
	// An admin write (a drain) goes through NATS: wait for each replica's
	// connection to it, as an operator's gtrctl cells shows it, rather than
	// meet "config store unavailable" on a replica still connecting.
	ctx := ctxFor(t, 30*time.Second)
	for _, a := range admins {
		testutil.Eventually(t, 20*time.Second, "replica connected to NATS", func() bool {
			l, err := a.ListCells(ctx, &adminproto.ListCellsRequest{})
			return err == nil && l.ConfigStore == "connected"
		})
	}
	return dir, ns, gtrs, admins
}
