// Package natstest runs a real NATS server with JetStream inside a test,
// on a loopback port and a temporary store, which a test can stop and
// start again on the same port and store to play an outage. Like
// testutil, it must never be imported by non-test code.
package natstest

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server is an in-process NATS server. Its methods are for the test's
// goroutine.
type Server struct {
	t    testing.TB
	port int
	dir  string
	srv  *server.Server
}

// Start starts a server on a free loopback port; the test's cleanup stops
// it.
func Start(t testing.TB) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &Server{t: t, port: port, dir: t.TempDir()}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's client URL; it stays the same across Stop and
// Restart.
func (s *Server) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

// Restart starts the server again after Stop, with the same port and
// JetStream store. It waits, with a bound, until the server takes
// connections.
func (s *Server) Restart() {
	s.t.Helper()
	if s.srv != nil {
		return
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: s.port, JetStream: true, StoreDir: s.dir, NoSigs: true, NoLog: true})
	if err != nil {
		s.t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		s.t.Fatal("natstest: server not ready within 10s")
	}
	s.srv = srv
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
