package gtr

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/client"
)

// lifeConfig is a standalone GTR with every listener on a port the system
// chooses, and the CA its certificate chains to.
func lifeConfig(t *testing.T) (Config, string) {
	t.Helper()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "gtr.yaml")
	if err := os.WriteFile(cfgFile, []byte("version: 1\ncells:\n  - {id: cell-a, addr: \"127.0.0.1:1\", pool: main}\nrules:\n  - {name: all, pool: main}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cert, key, ca := testTLS(t)
	return Config{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", HealthListen: "127.0.0.1:0", ConfigFile: cfgFile,
		AdminToken: "tok", StateFile: filepath.Join(dir, "state.json"), ReplicaID: "r1", ShutdownTimeout: time.Second,
		TLSCertFile: cert, TLSKeyFile: key, Log: slog.New(slog.DiscardHandler)}, ca
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestLifeCycle: New starts nothing; once Start returns every listener is
// bound and serves health; Shutdown closes them all and leaves no
// goroutine behind; a second Shutdown returns what the first did, and a
// second Start is refused.
func TestLifeCycle(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg, ca := lifeConfig(t)
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if g.Addr() != nil || g.AdminAddr() != nil || g.HealthAddr() != nil || testutil.Closed(g.Done()) {
		t.Fatal("New bound a listener or ended serving")
	}
	ctx := ctxFor(t, 30*time.Second)
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	tlsOpt, err := client.TLS(ca)
	if err != nil {
		t.Fatal(err)
	}
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	addrs := map[string]net.Addr{"partners": g.Addr(), "admin": g.AdminAddr(), "health": g.HealthAddr()}
	for name, opt := range map[string]grpc.DialOption{"partners": tlsOpt, "admin": tlsOpt, "health": plain} {
		conn, err := grpc.NewClient(addrs[name].String(), opt)
		if err != nil {
			t.Fatal(err)
		}
		r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		conn.Close()
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health on the %s listener, %v: %v, %v", name, addrs[name], r, err)
		}
	}
	if err := g.Start(ctx); !errors.Is(err, ErrStarted) {
		t.Fatalf("a second Start: %v, want ErrStarted", err)
	}
	if testutil.Closed(g.Done()) {
		t.Fatalf("Done while serving: %v", g.Err())
	}
	if err := g.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if !testutil.Closed(g.Done()) || g.Err() != nil {
		t.Fatalf("after Shutdown: Done closed %v, Err %v", testutil.Closed(g.Done()), g.Err())
	}
	for name, a := range addrs {
		if c, err := net.DialTimeout("tcp", a.String(), time.Second); err == nil {
			c.Close()
			t.Errorf("the %s listener, %v, still accepts after Shutdown", name, a)
		}
	}
	if err := g.Shutdown(ctx); err != nil {
		t.Fatalf("a second Shutdown: %v", err)
	}
	if err := g.Start(ctx); !errors.Is(err, ErrStarted) {
		t.Fatalf("Start after Shutdown: %v, want ErrStarted", err)
	}
}

// TestStartFailsReleasesAll: a Start that fails, early (a certificate that
// is not there) or late (each listener's address in use, the health port's
// last of all, once the console serves), returns the error, ends Done with
// it, and leaves nothing behind: no goroutine, and every address it had
// bound free again.
func TestStartFailsReleasesAll(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(c *Config, busy string)
		want string
	}{
		{"no certificate", func(c *Config, _ string) { c.TLSCertFile = filepath.Join(t.TempDir(), "absent.pem") }, "absent.pem"},
		{"partners' address in use", func(c *Config, busy string) { c.Listen = busy }, "gtr: listen"},
		{"admin address in use", func(c *Config, busy string) { c.AdminListen = busy }, "gtr: admin listen"},
		{"health address in use", func(c *Config, busy string) { c.HealthListen = busy }, "healthport: listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			busy, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Close()
			cfg, _ := lifeConfig(t)
			cfg.Listen, cfg.AdminListen, cfg.HealthListen = freeAddr(t), freeAddr(t), freeAddr(t)
			tc.set(&cfg, busy.Addr().String())
			g, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = g.Start(ctxFor(t, 30*time.Second))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v, want an error with %q", err, tc.want)
			}
			if !testutil.Closed(g.Done()) || g.Err() != err {
				t.Fatalf("after a failed Start: Done closed %v, Err %v", testutil.Closed(g.Done()), g.Err())
			}
			var free []string
			for _, a := range []string{cfg.Listen, cfg.AdminListen, cfg.HealthListen} {
				if a != busy.Addr().String() {
					free = append(free, a)
				}
			}
			testutil.Unbound(t, free...)
			if err := g.Shutdown(context.Background()); err != nil {
				t.Fatalf("Shutdown after a failed Start: %v", err)
			}
		})
	}
}

// TestServeFailureEndsServing: a listener that fails ends serving: Done
// is closed, Err says why, and Shutdown still releases everything.
func TestServeFailureEndsServing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg, _ := lifeConfig(t)
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(ctxFor(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	g.lis.Close() // the partners' listener fails under its server
	select {
	case <-g.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the partners' listener failed")
	}
	if err := g.Err(); err == nil || !strings.Contains(err.Error(), "gtr: serve") {
		t.Fatalf("Err: %v, want the serve error", err)
	}
	if err := g.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := g.Err(); err == nil {
		t.Fatal("Shutdown erased why serving had failed")
	}
}

// TestShutdownBounds: a stream that does not end (a health Watch) holds
// the graceful stop until ShutdownTimeout, when the servers stop hard
// (nil: the configured bound), or until Shutdown's context ends, which
// Shutdown then returns.
func TestShutdownBounds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		ctx     time.Duration
		want    error
	}{
		{"ShutdownTimeout", 300 * time.Millisecond, time.Minute, nil},
		{"context", time.Minute, 300 * time.Millisecond, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			cfg, ca := lifeConfig(t)
			cfg.ShutdownTimeout = tc.timeout
			g, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxFor(t, 30*time.Second)
			if err := g.Start(ctx); err != nil {
				t.Fatal(err)
			}
			tlsOpt, err := client.TLS(ca)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := grpc.NewClient(g.Addr().String(), tlsOpt)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Recv(); err != nil { // the stream is open at the server
				t.Fatal(err)
			}
			begin := time.Now()
			err = g.Shutdown(ctxFor(t, tc.ctx))
			if took := time.Since(begin); took > 10*time.Second {
				t.Errorf("Shutdown took %v", took)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Shutdown: %v, want %v", err, tc.want)
			}
			for {
				if _, err := w.Recv(); err != nil {
					break // NOT_SERVING first, then the hard stop's end
				}
			}
		})
	}
}

// TestListenersOfTheirOwn: the admin and health listeners may not share
// the partners' address (or each other's), but any may be port 0, which
// gives each a port of its own.
func TestListenersOfTheirOwn(t *testing.T) {
	for _, tc := range []struct {
		listen, admin, health string
		ok                    bool
	}{
		{"127.0.0.1:7070", "127.0.0.1:7071", "127.0.0.1:7072", true},
		{"127.0.0.1:7070", "127.0.0.1:7070", "", false},
		{"127.0.0.1:7070", "127.0.0.1:7071", "127.0.0.1:7071", false},
		{"127.0.0.1:7070", "", "127.0.0.1:7070", false},
		{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", true},
		{":0", ":0", "", true},
	} {
		c := Config{Listen: tc.listen, AdminListen: tc.admin, HealthListen: tc.health, ConfigFile: "gtr.yaml", TLSCertFile: "c", TLSKeyFile: "k"}
		if err := c.validate(); (err == nil) != tc.ok {
			t.Errorf("listen %q, admin %q, health %q: %v, want ok %v", tc.listen, tc.admin, tc.health, err, tc.ok)
		}
	}
}
