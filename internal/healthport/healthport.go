// Package healthport serves gRPC health alone, in plaintext, on a listener
// of its own: the port kubelet's gRPC probes ask, since they cannot present
// a client certificate to a mutual-TLS port (a cell's, the issuer's).
//
// It must never serve anything but grpc.health.v1 (no application service,
// no reflection): the port is open to the node without authentication, and
// all it may tell is whether the process is serving.
package healthport

import (
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cellpay/cellpay/internal/grpclimits"
)

// limits are a probe's: one small call at a time, a connection or two.
var limits = grpclimits.Limits{
	MaxRecvMsg: 4 << 10, MaxSendMsg: 4 << 10, MaxHeaderList: 8 << 10, MaxConcurrentStreams: 16,
	MaxConnectionIdle: time.Minute, MaxConnectionAge: 30 * time.Minute, MaxConnectionAgeGrace: 10 * time.Second,
	KeepaliveMinTime: 5 * time.Second,
}

// Server is a running health port.
type Server struct {
	gs   *grpc.Server
	lis  net.Listener
	done chan error
}

// Listen opens addr and serves hs on it, alone and in plaintext, until
// Stop. hs is the same health server the main port registers, so both
// ports answer alike, NOT_SERVING included from the moment of shutdown.
func Listen(addr string, hs healthpb.HealthServer) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("healthport: listen: %w", err)
	}
	gs := grpc.NewServer(limits.ServerOptions()...)
	healthpb.RegisterHealthServer(gs, hs)
	s := &Server{gs: gs, lis: lis, done: make(chan error, 1)}
	go func() { s.done <- gs.Serve(lis) }()
	return s, nil
}

// Addr is the address it listens on.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Stop closes the port at once (health calls are short and a probe
// retries) and waits for the server to return.
func (s *Server) Stop() {
	s.gs.Stop()
	<-s.done
}
