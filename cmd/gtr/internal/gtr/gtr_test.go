package gtr

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/cmd/gtr/internal/admin"
	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTLS provisions a CA and a GTR certificate for 127.0.0.1 and returns
// the certificate, key and CA files.
func testTLS(t *testing.T) (cert, key, ca string) {
	t.Helper()
	cert, key, ca, err := pki.Loopback(filepath.Join(t.TempDir(), "pki"), "gtr")
	if err != nil {
		t.Fatal(err)
	}
	return cert, key, ca
}

// startGTR starts the GTR of cfg, and shuts it down when the test ends,
// checking that Shutdown then returns, without error, within 10 s.
func startGTR(t *testing.T, cfg Config) *GTR {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, g) })
	return g
}

// shutdown shuts g down, and fails the test unless Shutdown returns nil
// within 10 s.
func shutdown(t *testing.T, g *GTR) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- g.Shutdown(context.Background()) }()
	select {
	case err := <-errc:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Shutdown did not return")
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestAdminOnlyOnAdminListener: the partners' port does not serve Admin,
// the admin port does, over TLS only, behind the token (naming the cells'
// sites and each replica's); the health port serves health alone, in
// plaintext.
func TestAdminOnlyOnAdminListener(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "gtr.yaml")
	if err := os.WriteFile(cfgFile, []byte("version: 1\ncells:\n  - {id: cell-a, addr: \"127.0.0.1:1\", pool: main, site: site-a}\n"+
		"  - {id: cell-b, addrs: [\"127.0.0.1:2\", \"127.0.0.1:3\"], pool: main}\npools: [{name: main, balancer: priority}]\nrules:\n  - {name: all, pool: main}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cert, key, ca := testTLS(t)
	cfg := Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", HealthListen: "127.0.0.1:0", ConfigFile: cfgFile, AdminToken: "tok",
		StateFile: filepath.Join(dir, "state.json"), ReplicaID: "r1", Site: "site-b", ShutdownTimeout: time.Second,
		TLSCertFile: cert, TLSKeyFile: key,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	g := startGTR(t, cfg)
	tlsOpt, err := client.TLS(ca)
	if err != nil {
		t.Fatal(err)
	}
	dial := func(addr string) *grpc.ClientConn {
		conn, err := grpc.NewClient(addr, tlsOpt, grpc.WithPerRPCCredentials(admin.TokenCredentials("tok")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	pub, adm := dial(g.Addr().String()), dial(g.AdminAddr().String())
	for _, c := range []*grpc.ClientConn{pub, adm} {
		if _, err := healthpb.NewHealthClient(c).Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
			t.Fatalf("health on %s: %v", c.Target(), err)
		}
	}
	if _, err := adminproto.NewAdminClient(pub).ListCells(cctx, &adminproto.ListCellsRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Admin on the partners' port: %v, want Unimplemented", err)
	}
	list, err := adminproto.NewAdminClient(adm).ListCells(cctx, &adminproto.ListCellsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if list.ReplicaId != "r1" || list.ConfigStore != "standalone" || len(list.Cells) != 2 {
		t.Fatalf("list: %v", list)
	}
	// The cells' sites come from the table; each replica's view of a cell
	// names the replica's own site (its -site).
	if a, b := list.Cells[0], list.Cells[1]; a.Site != "site-a" || b.Site != "" || len(a.Replicas) != 1 || a.Replicas[0].Replica != "r1" || a.Replicas[0].Site != "site-b" {
		t.Fatalf("sites: cell-a %q, cell-b %q, cell-a's replicas %v", a.Site, b.Site, a.Replicas)
	}
	// The table's instances reach the health monitor, which lists each.
	if b := list.Cells[1]; len(b.Instances) != 2 || b.Instances[1].Addr != "127.0.0.1:3" || b.Balancer != "priority" || len(list.Cells[0].Instances) != 1 {
		t.Fatalf("cell-b: %v", b)
	}

	plain := func(addr string) *grpc.ClientConn {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	short, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	if _, err := adminproto.NewAdminClient(plain(g.AdminAddr().String())).ListCells(short, &adminproto.ListCellsRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("plaintext Admin call: %v, want Unavailable (no TLS, no service)", err)
	}
	health := plain(g.HealthAddr().String())
	if r, err := healthpb.NewHealthClient(health).Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health port: %v, %v", r, err)
	}
	if _, err := adminproto.NewAdminClient(health).ListCells(cctx, &adminproto.ListCellsRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Admin on the health port: %v, want Unimplemented", err)
	}
	if _, err := cellpayv1.NewPaymentsClient(health).GetTransaction(cctx, &cellpayv1.GetTransactionRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Payments on the health port: %v, want Unimplemented", err)
	}
}

// TestAdmissionFlagsRefused: an admission tolerance or baseline that the
// limits cannot use is refused at start, naming the flag, rather than
// replaced by a default without a word.
func TestAdmissionFlagsRefused(t *testing.T) {
	base := Config{Listen: "127.0.0.1:0", ConfigFile: "gtr.yaml", TLSCertFile: "c", TLSKeyFile: "k"}
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"tolerance at 1", func(c *Config) { c.AdmissionTolerance = 1 }, "admission-tolerance"},
		{"tolerance negative", func(c *Config) { c.AdmissionTolerance = -2 }, "admission-tolerance"},
		{"tolerance huge", func(c *Config) { c.AdmissionTolerance = 1e9 }, "admission-tolerance"},
		{"baseline negative", func(c *Config) { c.AdmissionBaseline = -time.Second }, "admission-baseline"},
		{"shed baseline negative", func(c *Config) { c.AdmissionShedBaseline = -time.Second }, "admission-shed-baseline"},
		{"shed baseline 60 s", func(c *Config) { c.AdmissionShedBaseline = time.Minute }, ""},
		{"defaults", func(*Config) {}, ""},
		{"site", func(c *Config) { c.Site = "site-a" }, ""},
		{"site in capitals", func(c *Config) { c.Site = "Site-A" }, "site"},
		{"dial from an address", func(c *Config) { c.CellDialFrom = "127.0.1.1" }, ""},
		{"dial from a name", func(c *Config) { c.CellDialFrom = "site-a.example" }, "cell-dial-from"},
		{"tolerance 1.5, baseline 0", func(c *Config) { c.AdmissionTolerance, c.AdmissionBaseline = 1.5, 0 }, ""},
	} {
		c := base
		tc.set(&c)
		err := c.validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}
