package grpclimits

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
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

// rawCall sends one Health/Check call, its headers carrying junk bytes of
// padding, over a plain HTTP/2 connection to addr (no gRPC client, which
// would refuse to send headers over the server's limit itself), and
// reports how the server answered the stream: "headers" (an answer),
// "reset <code>", "goaway <code>" or "closed".
func rawCall(t *testing.T, addr string, junk int) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/grpc.health.v1.Health/Check"}, {Name: ":authority", Value: addr},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
		{Name: "x-padding", Value: strings.Repeat("j", junk)},
	} {
		_ = enc.WriteField(f)
	}
	const frame = 16 << 10 // HTTP/2's default largest frame
	b := block.Bytes()
	first := b[:min(len(b), frame)]
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndHeaders: len(b) <= frame}); err != nil {
		t.Fatal(err)
	}
	for b = b[len(first):]; len(b) > 0; {
		n := min(len(b), frame)
		if err := fr.WriteContinuation(1, n == len(b), b[:n]); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
	if err := fr.WriteData(1, true, []byte{0, 0, 0, 0, 0}); err != nil { // an empty request
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("no answer to %d bytes of headers in 10 s", junk)
		}
		if err != nil {
			return "closed" // the server cut the connection (x/net's framer does past the limit)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			if f.StreamID == 1 {
				return "headers"
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				return "reset " + f.ErrCode.String()
			}
		case *http2.GoAwayFrame:
			return "goaway " + f.ErrCode.String()
		}
	}
}

// TestOversizedHeadersRefused: on every listener's limits, a call whose
// headers are over MaxHeaderList is refused before it is served (its
// stream reset or its connection cut, never answered), a call
// just under it is answered, and the server goes on serving; without the
// limit (gRPC's default, 16 MB) the same oversized call was answered.
func TestOversizedHeadersRefused(t *testing.T) {
	serve := func(opts []grpc.ServerOption) string {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs := grpc.NewServer(opts...)
		healthpb.RegisterHealthServer(gs, health.NewServer())
		go gs.Serve(lis)
		t.Cleanup(gs.Stop)
		return lis.Addr().String()
	}
	over := 2 * int(Partners.MaxHeaderList)
	if got := rawCall(t, serve(nil), over); got != "headers" {
		t.Fatalf("gRPC's defaults: %s to %d bytes of headers; the test cannot tell the limit from its absence", got, over)
	}
	for name, l := range map[string]Limits{"Partners": Partners, "Internal": Internal, "Admin": Admin} {
		if l.MaxHeaderList == 0 {
			t.Errorf("%s: no MaxHeaderList", name)
			continue
		}
		addr := serve(l.ServerOptions())
		if got := rawCall(t, addr, int(l.MaxHeaderList)+1); got == "headers" {
			t.Errorf("%s: headers over %d bytes were answered", name, l.MaxHeaderList)
		} else {
			t.Logf("%s: headers over %d bytes: %s", name, l.MaxHeaderList, got)
		}
		if got := rawCall(t, addr, int(l.MaxHeaderList)/2); got != "headers" {
			t.Errorf("%s: headers of half the limit: %s, want an answer", name, got)
		}
	}
}
