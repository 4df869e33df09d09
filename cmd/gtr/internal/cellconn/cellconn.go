// Package cellconn keeps one gRPC client connection per cell, created on
// first use and reused by every request after it, and balances each
// connection's requests over the cell's instances with gRPC's own
// machinery: a resolver names the instances (a manual one for a listed
// Cell.Addrs, gRPC's DNS resolver for a dns:/// address, whose headless
// Service has one A record per ready pod), the service config names the
// pool's balancer and turns on client-side health checking, so that a
// subchannel whose instance answers NOT_SERVING (grpc.health.v1 Watch) or
// is gone takes no requests until it serves again. Connections are lazy
// (grpc.NewClient) and reconnect by themselves; a cell whose addresses or
// balancer change gets a new connection.
//
// It never decides whether a cell is healthy: the health monitor does,
// per cell, and routing skips an ejected cell before a connection here is
// asked for it. What is here is the instances of one cell.
package cellconn

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/grpc"
	_ "google.golang.org/grpc/balancer/leastrequest" // least_request_experimental
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/health" // client-side health checking of each subchannel
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/cellpay/cellpay/internal/grpclimits"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/routing"
)

// Pool holds the connections. It is safe for concurrent use.
type Pool struct {
	mu    sync.RWMutex
	conns map[string]entry // by cell ID; at most one per cell of the table
	opts  []grpc.DialOption
	creds func(cellID string) grpc.DialOption // nil: opts' (or plaintext)
}

type entry struct {
	addr     string
	addrs    []string
	balancer routing.Balancer
	conn     *grpc.ClientConn
	client   cellproto.CellClient
}

// dials reports whether e is the connection for c balanced by b.
func (e *entry) dials(c *routing.Cell, b routing.Balancer) bool {
	return e.addr == c.Addr && e.balancer == b && slices.Equal(e.addrs, c.Addrs)
}

// New returns an empty pool whose connections get opts besides the pool's
// own (telemetry's stats handler, say). Connections are plaintext unless
// opts carry transport credentials (the GTR's mutual TLS, package hop).
func New(opts ...grpc.DialOption) *Pool { return &Pool{conns: map[string]entry{}, opts: opts} }

// NewPinned is New whose connection to each cell gets the transport
// creds(cell ID): the GTR's mutual TLS pinning that cell's identity
// (hop.Dialer.To), so that no other certificate of the CA can answer for
// it.
func NewPinned(creds func(cellID string) grpc.DialOption, opts ...grpc.DialOption) *Pool {
	return &Pool{conns: map[string]entry{}, opts: opts, creds: creds}
}

// Client returns the client of cell c, balanced over its instances by b
// (its pool's balancer, routing.Table.Balancer). Once the connection
// exists it takes a read lock and compares the cell's addresses: no
// allocation, no I/O, so the payment path may call it.
func (p *Pool) Client(c *routing.Cell, b routing.Balancer) (cellproto.CellClient, error) {
	p.mu.RLock()
	e, ok := p.conns[c.ID]
	p.mu.RUnlock()
	if ok && e.dials(c, b) {
		return e.client, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.conns[c.ID]; ok {
		if e.dials(c, b) {
			return e.client, nil
		}
		_ = e.conn.Close()
		delete(p.conns, c.ID)
	}
	opts := p.opts
	if p.creds != nil {
		opts = append(slices.Clip(opts), p.creds(c.ID))
	}
	conn, err := Dial(c, b, opts...)
	if err != nil {
		return nil, err
	}
	e = entry{addr: c.Addr, addrs: slices.Clone(c.Addrs), balancer: b, conn: conn, client: cellproto.NewCellClient(conn)}
	p.conns[c.ID] = e
	return e.client, nil
}

// Connect has the connection of every cell of t connect now, opening the
// connections it lacks, rather than on its first request: the first
// payment routed to a cell after a start or a table change does not pay
// for the connection's handshakes (mutual TLS, and the health check of
// each instance), which on a loaded host can outlast the attempt's bound
// and re-route it. It does no I/O itself and does not wait.
func (p *Pool) Connect(t *routing.Table) {
	for _, c := range t.Spec().Cells {
		if _, err := p.Client(&c, t.Balancer(c.Pool)); err != nil {
			continue // a bad address: the first request reports it
		}
		p.mu.RLock()
		if e, ok := p.conns[c.ID]; ok {
			e.conn.Connect()
		}
		p.mu.RUnlock()
	}
}

// WaitConnected waits until every connection has tried to connect once:
// it is ready, or its attempt failed (a cell that is down is the health
// monitor's to judge, not a reason to wait), or ctx ends. It reports the
// cells still connecting when ctx ended.
func (p *Pool) WaitConnected(ctx context.Context) []string {
	p.mu.RLock()
	conns := make(map[string]*grpc.ClientConn, len(p.conns))
	for id, e := range p.conns {
		conns[id] = e.conn
	}
	p.mu.RUnlock()
	var waiting []string
	for id, conn := range conns {
		for {
			st := conn.GetState()
			if st == connectivity.Ready || st == connectivity.TransientFailure || st == connectivity.Shutdown {
				break
			}
			if !conn.WaitForStateChange(ctx, st) {
				waiting = append(waiting, id)
				break
			}
		}
	}
	slices.Sort(waiting)
	return waiting
}

// Forget closes the connections of cells not in keep (the cells of the
// table in force), so that the pool holds no more connections than the
// table has cells.
func (p *Pool) Forget(keep func(cellID string) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, e := range p.conns {
		if !keep(id) {
			_ = e.conn.Close()
			delete(p.conns, id)
		}
	}
}

// Close closes every connection.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, e := range p.conns {
		_ = e.conn.Close()
		delete(p.conns, id)
	}
}

// resolverScheme names the manual resolvers of listed instances. Each
// connection has its own resolver (grpc.WithResolvers), so the scheme is
// only a name.
const resolverScheme = "cellpay-instances"

// Dial connects to cell c's instances, balanced by b, with opts after the
// defaults (plaintext, the service config). Health checking needs the
// instances to serve grpc.health.v1 (the cells do, mutual TLS included).
// An instance listed in Addrs is authenticated under its own host, as a
// connection to it alone would be.
func Dial(c *routing.Cell, b routing.Balancer, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	all := append(append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(ServiceConfig(b)), hop.Reconnect}, grpclimits.Internal.DialOptions()...), opts...)
	target := c.Addr
	if len(c.Addrs) > 0 {
		r := manual.NewBuilderWithScheme(resolverScheme)
		r.InitialState(resolver.State{Addresses: Addresses(c.Addrs)})
		all = append(all, grpc.WithResolvers(r))
		target = resolverScheme + ":///" + c.ID
	}
	conn, err := grpc.NewClient(target, all...)
	if err != nil {
		return nil, fmt.Errorf("cellconn: %s at %s: %w", c.ID, target, err)
	}
	return conn, nil
}

// Addresses are the resolver addresses of listed instances: in list order,
// each ranked by its position for the priority balancer, and each
// verified by TLS under its own host name.
func Addresses(addrs []string) []resolver.Address {
	out := make([]resolver.Address, len(addrs))
	for i, a := range addrs {
		out[i] = withRank(resolver.Address{Addr: a, ServerName: a}, i)
	}
	return out
}

// ServiceConfig is the service config of a connection balanced by b, with
// client-side health checking of every subchannel (the empty service
// name: the instance's overall health, as the cells serve it).
func ServiceConfig(b routing.Balancer) string {
	var lb string
	switch b {
	case routing.BalanceLeastRequest:
		lb = `{"least_request_experimental":{"choiceCount":2}}`
	case routing.BalancePriority:
		lb = `{"` + priorityName + `":{}}`
	default:
		lb = `{"round_robin":{}}`
	}
	return `{"loadBalancingConfig":[` + lb + `],"healthCheckConfig":{"serviceName":""}}`
}
