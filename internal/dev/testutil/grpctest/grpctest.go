// Package grpctest serves a real gRPC server inside a test, on a loopback
// port, until the test ends. Like testutil, it must never be imported by
// non-test code.
package grpctest

import (
	"net"
	"testing"

	"google.golang.org/grpc"
)

// Serve serves register's services on a new gRPC server with opts, on a
// free port of 127.0.0.1, and returns its address. The test's cleanup
// stops the server (Stop, not graceful) and waits until it has stopped
// serving.
func Serve(t testing.TB, register func(*grpc.Server), opts ...grpc.ServerOption) string {
	t.Helper()
	gs := grpc.NewServer(opts...)
	register(gs)
	return ServeOn(t, gs)
}

// ServeOn is Serve for a server the test built itself, with its services
// registered.
func ServeOn(t testing.TB, gs *grpc.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("grpctest: listen: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return lis.Addr().String()
}
