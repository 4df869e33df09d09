// Package natstest runs a real NATS server inside a test, on a loopback
// port and (with JetStream, unless the test turns it off) a temporary
// store, which a test can stop and start again on the same port and store
// to play an outage. A test may change the server's options (StartWith)
// or take them from a nats-server configuration file (StartFile). Like
// testutil, it must never be imported by non-test code.
package natstest

import (
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server is an in-process NATS server. Its methods are for the test's
// goroutine.
type Server struct {
	t         testing.TB
	configure func(*server.Options)
	dir       string
	port      int  // the port the first start listened on; 0 before it
	tls       bool // whether the options require TLS of clients
	srv       *server.Server
}

// Start starts a server with JetStream on a free loopback port and a
// temporary store; the test's cleanup stops it.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, nil)
}

// StartWith is Start with the server's options changed by configure
// before each start (the first and every Restart). configure gets
// natstest's options (Host 127.0.0.1, a free port, JetStream on the
// temporary store, no signal handling, no log) and may change any of them:
// turn JetStream off, set a fixed port or another store, add TLS or
// authorization, or replace them all. The server must listen on
// 127.0.0.1; the port the first start listens on (a free one when Port is
// -1) is kept across Restart whatever configure sets. A nil configure is
// Start.
func StartWith(t testing.TB, configure func(*server.Options)) *Server {
	t.Helper()
	s := &Server{t: t, configure: configure, dir: t.TempDir()}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// StartFile is StartWith with the options of the nats-server
// configuration file file (its port, store, TLS and authorization) in
// place of natstest's, with signal handling and logging off. The file
// must have the server listen on 127.0.0.1 (host: 127.0.0.1); port: -1
// there is a free port.
func StartFile(t testing.TB, file string) *Server {
	t.Helper()
	return StartWith(t, func(o *server.Options) {
		t.Helper()
		opts, err := server.ProcessConfigFile(file)
		if err != nil {
			t.Fatalf("natstest: %s: %v", file, err)
		}
		*o = *opts
		o.NoSigs, o.NoLog = true, true
	})
}

// URL is the server's client URL, tls:// when its options require TLS;
// it stays the same across Stop and Restart.
func (s *Server) URL() string {
	u := url.URL{Scheme: "nats", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))}
	if s.tls {
		u.Scheme = "tls"
	}
	return u.String()
}

// Port is the server's client port; it stays the same across Stop and
// Restart.
func (s *Server) Port() int { return s.port }

// NATS is the running nats-server, for what a test asks of it directly
// (its connections: Connz); nil while the server is stopped.
func (s *Server) NATS() *server.Server { return s.srv }

// Restart starts the server again after Stop, with the same port and
// JetStream store. It waits, with a bound, until the server takes
// connections.
func (s *Server) Restart() {
	s.t.Helper()
	if s.srv != nil {
		return
	}
	o := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: s.dir, NoSigs: true, NoLog: true}
	if s.configure != nil {
		s.configure(o)
	}
	if o.Host != "127.0.0.1" {
		s.t.Fatalf("natstest: the server must listen on 127.0.0.1, not %q", o.Host)
	}
	if s.port != 0 {
		o.Port = s.port
	}
	srv, err := server.NewServer(o)
	if err != nil {
		s.t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		s.t.Fatal("natstest: server not ready within 10s")
	}
	s.srv = srv
	s.port = srv.Addr().(*net.TCPAddr).Port
	s.tls = o.TLSConfig != nil
}

// Stop shuts the server down and waits until it has; a stopped server
// stays stopped until Restart.
func (s *Server) Stop() {
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		s.srv = nil
	}
}
