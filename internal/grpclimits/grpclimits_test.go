package grpclimits

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// tapConn keeps a copy of what the server writes on a connection.
type tapConn struct {
	net.Conn
	mu  *sync.Mutex
	out *bytes.Buffer
}

func (c tapConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.out.Write(b)
	c.mu.Unlock()
	return c.Conn.Write(b)
}

type tapListener struct {
	net.Listener
	mu  sync.Mutex
	out bytes.Buffer
}

func (l *tapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tapConn{Conn: c, mu: &l.mu, out: &l.out}, nil
}

// pings counts the PING frames (not acknowledgements) in what a server
// wrote on its one connection.
func (l *tapListener) pings(t *testing.T) int {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	fr := http2.NewFramer(nil, bytes.NewReader(l.out.Bytes()))
	n := 0
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return n
		}
		if err != nil {
			t.Fatalf("reading the server's frames: %v", err)
		}
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			n++
		}
	}
}

// serverPings makes calls unary calls, one after another, to a server
// with opts, from a client with dial, and returns the PING frames the
// server sent.
func serverPings(t *testing.T, calls int, opts []grpc.ServerOption, dial []grpc.DialOption) int {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &tapListener{Listener: inner}
	gs := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(lis)
	defer gs.Stop()
	conn, err := grpc.NewClient(inner.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)
	for range calls {
		if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	return lis.pings(t)
}

// TestFixedWindowsSendNoPings: with the listeners' fixed windows a server
// answers a run of calls without a ping of its own; with gRPC's dynamic
// window (the option left out) it pings to size the window as data
// comes in, a write and a read more per burst of calls.
func TestFixedWindowsSendNoPings(t *testing.T) {
	const calls = 200
	dynamic := Partners
	dynamic.StreamWindow, dynamic.ConnWindow = 0, 0
	if n := serverPings(t, calls, dynamic.ServerOptions(), nil); n == 0 {
		t.Fatalf("the dynamic window sent no pings over %d calls: the test cannot tell the options apart", calls)
	} else {
		t.Logf("dynamic window: %d pings over %d calls", n, calls)
	}
	for name, l := range map[string]Limits{"Partners": Partners, "Internal": Internal} {
		if n := serverPings(t, calls, l.ServerOptions(), l.DialOptions()); n != 0 {
			t.Errorf("%s: %d pings over %d calls with fixed windows", name, n, calls)
		}
	}
}
