// Package cellconn keeps one gRPC client connection per cell, created on
// first use and reused by every request after it. Connections are lazy
// (grpc.NewClient) and reconnect by themselves; a cell whose address changes
// gets a new connection.
package cellconn

import (
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cellpay/cellpay/pkg/cellproto"
)

// Pool holds the connections. It is safe for concurrent use.
type Pool struct {
	mu    sync.RWMutex
	conns map[string]entry // by cell ID
	opts  []grpc.DialOption
}

type entry struct {
	addr   string
	conn   *grpc.ClientConn
	client cellproto.CellClient
}

// New returns an empty pool whose connections get opts besides the pool's
// own (telemetry's stats handler, say). Connections are plaintext unless
// opts carry transport credentials (the GTR's mutual TLS, package hop).
func New(opts ...grpc.DialOption) *Pool { return &Pool{conns: map[string]entry{}, opts: opts} }

// Client returns the client for cell id at addr.
func (p *Pool) Client(id, addr string) (cellproto.CellClient, error) {
	p.mu.RLock()
	e, ok := p.conns[id]
	p.mu.RUnlock()
	if ok && e.addr == addr {
		return e.client, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.conns[id]; ok {
		if e.addr == addr {
			return e.client, nil
		}
		_ = e.conn.Close()
	}
	// Round robin over whatever the address resolves to: a headless
	// Kubernetes Service (dns:///cell.cell-a.svc:7081) names every pod of
	// a cell, and each GTR replica should spread over all of them.
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`)}, p.opts...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("cellconn: %s at %s: %w", id, addr, err)
	}
	e = entry{addr: addr, conn: conn, client: cellproto.NewCellClient(conn)}
	p.conns[id] = e
	return e.client, nil
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
