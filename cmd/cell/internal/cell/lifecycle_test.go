package cell

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cellpay/cellpay/internal/cardkeys"
	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// lifeConfig is a cell on a fresh database, with both listeners on ports
// the system chooses and an issuer that is never called.
func lifeConfig(t *testing.T) Config {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	issuerproto.RegisterIssuerServer(gs, issuerproto.UnimplementedIssuerServer{})
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	keys, err := cardkeys.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	return Config{ID: "cell-t", Instance: "i1", Listen: "127.0.0.1:0", HealthListen: "127.0.0.1:0",
		DatabaseURL: pgtest.NewDatabase(t), IssuerAddr: lis.Addr().String(), RefDataFile: "../../../../config/refdata.json",
		Keys: keys, Callbacks: Callbacks{Off: true}, ShutdownTimeout: 2 * time.Second, Log: slog.New(slog.DiscardHandler)}
}

// unusedAddr is an address nothing listens on, for the moment.
func unusedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// leakCheck fails t if goroutines started after it was called are still
// running when it is called again (deferred: before t's cleanups, so
// after lifeConfig, whose issuer runs until then).
func leakCheck(t *testing.T) func() {
	opts := []goleak.Option{goleak.IgnoreCurrent(), pgtest.IgnoreGoroutines()}
	return func() { goleak.VerifyNone(t, opts...) }
}

// TestLifeCycle: New starts nothing; once Start returns both listeners are
// bound and the cell comes to serve; Shutdown drains it, closes them and
// leaves no goroutine behind; a second Shutdown returns what the first
// did, and a second Start is refused.
func TestLifeCycle(t *testing.T) {
	cfg := lifeConfig(t)
	defer leakCheck(t)()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr() != nil || c.HealthAddr() != nil || testutil.Closed(c.Done()) {
		t.Fatal("New bound a listener or ended serving")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	addrs := []net.Addr{c.Addr(), c.HealthAddr()}
	for _, a := range addrs {
		conn, err := grpc.NewClient(a.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		hc := healthpb.NewHealthClient(conn)
		testutil.Eventually(t, 10*time.Second, a.String()+" serving", func() bool {
			r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
			return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
		})
		conn.Close()
	}
	if err := c.Start(ctx); !errors.Is(err, ErrStarted) {
		t.Fatalf("a second Start: %v, want ErrStarted", err)
	}
	if testutil.Closed(c.Done()) {
		t.Fatalf("Done while serving: %v", c.Err())
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if !testutil.Closed(c.Done()) || c.Err() != nil {
		t.Fatalf("after Shutdown: Done closed %v, Err %v", testutil.Closed(c.Done()), c.Err())
	}
	for _, a := range addrs {
		if conn, err := net.DialTimeout("tcp", a.String(), time.Second); err == nil {
			conn.Close()
			t.Errorf("%v still accepts after Shutdown", a)
		}
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatalf("a second Shutdown: %v", err)
	}
	if err := c.Start(ctx); !errors.Is(err, ErrStarted) {
		t.Fatalf("Start after Shutdown: %v, want ErrStarted", err)
	}
}

// TestStartFailsReleasesAll: a Start that fails, early (Postgres not
// there, TLS files not there) or late (the Cell API's address in use, or
// the health port's, once everything else has started), returns the
// error, ends Done with it, and leaves nothing behind: no goroutine, and
// the addresses it had bound free again.
func TestStartFailsReleasesAll(t *testing.T) {
	absent := filepath.Join(t.TempDir(), "absent.pem")
	for _, tc := range []struct {
		name string
		set  func(c *Config, busy string)
		want string
	}{
		{"no postgres", func(c *Config, _ string) {
			c.DatabaseURL, c.StartTimeout = "postgres://cell@"+unusedAddr(t)+"/cell?sslmode=disable", 300*time.Millisecond
		}, "postgres not reachable"},
		{"no TLS files", func(c *Config, _ string) { c.TLS = tlsconf.Files{Cert: absent, Key: absent, CA: absent} }, "issuer TLS"},
		{"Cell API address in use", func(c *Config, busy string) { c.Listen = busy }, "cell: listen"},
		{"health address in use", func(c *Config, busy string) { c.HealthListen = busy }, "healthport: listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := lifeConfig(t)
			defer leakCheck(t)()
			busy, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Close()
			cfg.Listen, cfg.HealthListen = unusedAddr(t), unusedAddr(t)
			tc.set(&cfg, busy.Addr().String())
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = c.Start(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v, want an error with %q", err, tc.want)
			}
			if !testutil.Closed(c.Done()) || c.Err() != err {
				t.Fatalf("after a failed Start: Done closed %v, Err %v", testutil.Closed(c.Done()), c.Err())
			}
			var free []string
			for _, a := range []string{cfg.Listen, cfg.HealthListen} {
				if a != busy.Addr().String() {
					free = append(free, a)
				}
			}
			testutil.Unbound(t, free...)
			if err := c.Shutdown(context.Background()); err != nil {
				t.Fatalf("Shutdown after a failed Start: %v", err)
			}
		})
	}
}

// TestServeFailureEndsServing: a listener that fails ends serving: Done
// is closed, Err says why, and Shutdown still drains and releases
// everything.
func TestServeFailureEndsServing(t *testing.T) {
	cfg := lifeConfig(t)
	defer leakCheck(t)()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	c.lis.Close() // the Cell API's listener fails under its server
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the listener failed")
	}
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), "cell: serve") {
		t.Fatalf("Err: %v, want the serve error", err)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Err() == nil {
		t.Fatal("Shutdown erased why serving had failed")
	}
}
