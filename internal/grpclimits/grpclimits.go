// Package grpclimits holds the limits every gRPC listener of the platform
// serves with, so that none runs on gRPC's defaults (unbounded concurrent
// streams, 4 MB messages, 16 MB of headers per call, idle connections and
// connection age unbounded).
//
// Connections are aged out (MaxConnectionAge) so that clients re-resolve
// and find new instances behind a name; idle ones are closed; clients that
// ping too often are cut off (keepalive enforcement).
package grpclimits

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Limits of one listener.
type Limits struct {
	// MaxRecvMsg is the largest request message accepted, in bytes; a
	// larger one is refused with RESOURCE_EXHAUSTED before it is decoded.
	MaxRecvMsg int
	// MaxSendMsg is the largest response message sent, in bytes.
	MaxSendMsg int
	// MaxHeaderList is the largest header list a call may send, in bytes
	// as HTTP/2 counts it (each field's name and value plus 32); past it
	// the server stops reading the headers and cuts the connection, and
	// a gRPC client, told the limit in the server's SETTINGS, refuses to
	// send such a call at all, naming the limit. Zero is gRPC's 16 MB.
	MaxHeaderList uint32
	// MaxConcurrentStreams bounds the calls in flight on one connection.
	MaxConcurrentStreams uint32
	// MaxConnectionIdle closes a connection with no call for this long.
	MaxConnectionIdle time.Duration
	// MaxConnectionAge closes a connection this old (after a grace for the
	// calls in flight on it), so that clients reconnect and rebalance.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// KeepaliveMinTime: a client pinging more often is cut off.
	KeepaliveMinTime time.Duration
	// StreamWindow and ConnWindow are fixed HTTP/2 flow-control windows,
	// per call and per connection, in bytes (at least 64 KiB; 0 keeps
	// gRPC's dynamic window). Fixed, they turn off gRPC's bandwidth-delay
	// estimation, which answers data with a ping of its own whenever no
	// ping is out: with calls a few milliseconds apart that is nearly
	// every call, a write and a read more on each side, for windows that
	// messages this small never need to grow.
	StreamWindow, ConnWindow int32
}

// The listeners' limits. A transaction is well under 4 KiB on the wire.
var (
	// Partners is the GTR's partners' listener. A partner's call carries
	// its API key, a deadline and trace context: a few hundred bytes of
	// headers.
	Partners = Limits{
		MaxRecvMsg: 64 << 10, MaxSendMsg: 64 << 10, MaxHeaderList: 16 << 10, MaxConcurrentStreams: 1000,
		MaxConnectionIdle: 5 * time.Minute, MaxConnectionAge: 30 * time.Minute, MaxConnectionAgeGrace: time.Minute,
		KeepaliveMinTime: 10 * time.Second,
		StreamWindow:     256 << 10, ConnWindow: 4 << 20,
	}
	// Internal is a cell's and the issuer's listener: the GTR's (or a
	// cell's) calls only, but many at once on few connections.
	Internal = Limits{
		MaxRecvMsg: 256 << 10, MaxSendMsg: 256 << 10, MaxHeaderList: 64 << 10, MaxConcurrentStreams: 4000,
		MaxConnectionIdle: 15 * time.Minute, MaxConnectionAge: 30 * time.Minute, MaxConnectionAgeGrace: 2 * time.Minute,
		KeepaliveMinTime: 5 * time.Second,
		StreamWindow:     1 << 20, ConnWindow: 16 << 20,
	}
	// Admin is the GTR's admin listener: routing tables and registries
	// travel on it, bounded by their own caps.
	Admin = Limits{
		MaxRecvMsg: 8 << 20, MaxSendMsg: 16 << 20, MaxHeaderList: 16 << 10, MaxConcurrentStreams: 100,
		MaxConnectionIdle: 15 * time.Minute, MaxConnectionAge: 2 * time.Hour, MaxConnectionAgeGrace: 5 * time.Minute,
		KeepaliveMinTime: 10 * time.Second,
	}
)

// ServerOptions are the grpc.ServerOptions that enforce l.
func (l Limits) ServerOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(l.MaxRecvMsg),
		grpc.MaxSendMsgSize(l.MaxSendMsg),
		grpc.MaxConcurrentStreams(l.MaxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: l.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     l.MaxConnectionIdle,
			MaxConnectionAge:      l.MaxConnectionAge,
			MaxConnectionAgeGrace: l.MaxConnectionAgeGrace,
			Time:                  2 * time.Minute,
			Timeout:               20 * time.Second,
		}),
		// A connection must finish its TLS and HTTP/2 handshake quickly:
		// garbage or a silent client does not hold a slot.
		grpc.ConnectionTimeout(10 * time.Second),
	}
	if l.MaxHeaderList > 0 { // 0 would refuse every call
		opts = append(opts, grpc.MaxHeaderListSize(l.MaxHeaderList))
	}
	if l.StreamWindow > 0 {
		opts = append(opts, grpc.InitialWindowSize(l.StreamWindow), grpc.InitialConnWindowSize(l.ConnWindow))
	}
	return opts
}

// DialOptions are the windows of a client of a listener with limits l
// (the GTR's connections to the cells, a cell's to the issuer): fixed
// as the listener's are, so neither side pings to size them.
func (l Limits) DialOptions() []grpc.DialOption {
	if l.StreamWindow <= 0 {
		return nil
	}
	return []grpc.DialOption{grpc.WithInitialWindowSize(l.StreamWindow), grpc.WithInitialConnWindowSize(l.ConnWindow)}
}
