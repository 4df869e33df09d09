package console

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// handshakeTimeout bounds a connection's TLS handshake on the shared
// listener, as grpclimits' ConnectionTimeout bounds it on a gRPC one:
// garbage or a silent client does not hold a slot.
const handshakeTimeout = 10 * time.Second

// maxHandshakes bounds the connections in their TLS handshake at once: a
// connection beyond it is closed at once, so that a flood of silent
// connections costs at most this many goroutines.
const maxHandshakes = 256

// Split serves one TCP listener to two servers: it completes each
// connection's TLS handshake with cfg (the admin listener's certificate)
// and hands the connection to grpcL when the client asked for HTTP/2 alone
// (ALPN "h2", as every gRPC client does) and to webL otherwise (a browser
// offers "http/1.1", and is served it). The gRPC server must use
// Handshaken as its credentials, since the handshake is done. Closing both
// returned listeners closes l.
//
// Why not one http.Server routing application/grpc to grpc.Server's
// ServeHTTP: that handler runs on net/http's HTTP/2, not gRPC's own
// transport, so the admin listener's grpclimits (keepalive enforcement,
// connection age and idle limits, concurrent streams, the connection
// timeout) would no longer apply to gtrctl's connections. Here gRPC keeps
// its transport and options, and the console gets an http.Server of its
// own with its own limits.
func Split(l net.Listener, cfg *tls.Config) (grpcL, webL net.Listener) {
	cfg = cfg.Clone()
	base := cfg.GetConfigForClient
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		c := cfg
		if base != nil {
			bc, err := base(hello)
			if err != nil {
				return nil, err
			}
			if bc != nil {
				c = bc
			}
		}
		c = c.Clone()
		c.GetConfigForClient = nil
		if slices.Contains(hello.SupportedProtos, "http/1.1") || !slices.Contains(hello.SupportedProtos, "h2") {
			c.NextProtos = []string{"http/1.1"}
		} else {
			c.NextProtos = []string{"h2"}
		}
		return c, nil
	}
	s := &splitter{l: l, cfg: cfg, pending: make(chan struct{}, maxHandshakes)}
	s.grpc = newSub(s)
	s.web = newSub(s)
	go s.accept()
	return s.grpc, s.web
}

type splitter struct {
	l         net.Listener
	cfg       *tls.Config
	grpc, web *sub
	pending   chan struct{} // a slot per handshake in progress

	mu     sync.Mutex
	closed int // sub-listeners closed; at 2, l is closed
}

func (s *splitter) accept() {
	for {
		c, err := s.l.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			s.grpc.fail(err)
			s.web.fail(err)
			return
		}
		select {
		case s.pending <- struct{}{}:
			go s.handshake(c)
		default:
			c.Close()
		}
	}
}

func (s *splitter) handshake(c net.Conn) {
	defer func() { <-s.pending }()
	tc := tls.Server(c, s.cfg)
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return
	}
	to := s.web
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		to = s.grpc
	}
	if !to.deliver(tc) {
		tc.Close()
	}
}

func (s *splitter) subClosed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed++; s.closed == 2 {
		s.l.Close()
	}
}

// sub is one side of a splitter.
type sub struct {
	s     *splitter
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	err   error // the parent's Accept error, once it failed
}

func newSub(s *splitter) *sub {
	return &sub{s: s, conns: make(chan net.Conn), done: make(chan struct{})}
}

// deliver hands c to Accept, or reports false once the sub is closed.
func (l *sub) deliver(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *sub) fail(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
	l.Close()
}

func (l *sub) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

func (l *sub) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.s.subClosed()
	})
	return nil
}

func (l *sub) Addr() net.Addr { return l.s.l.Addr() }

// Handshaken are the gRPC server credentials of connections whose TLS
// handshake Split already did: they hand the connection on with its TLS
// state, and refuse any connection that is not TLS, so that a server
// using them cannot be put on a plaintext listener by mistake.
func Handshaken() credentials.TransportCredentials { return handshaken{} }

type handshaken struct{}

var errNotTLS = errors.New("console: connection is not TLS; serve the gRPC server on Split's listener")

func (handshaken) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return nil, nil, errNotTLS
	}
	return c, credentials.TLSInfo{State: tc.ConnectionState(),
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (handshaken) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("console: Handshaken is server credentials only")
}

func (handshaken) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (h handshaken) Clone() credentials.TransportCredentials { return h }

func (handshaken) OverrideServerName(string) error { return nil }
