package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// healthConnectTimeout bounds one attempt of the health check to connect.
// An attempt outlives the check that began it: a check is bounded by its
// probe's interval (under a second), and connecting after a failover
// (TLS and authentication with each host in turn until the one that takes
// writes) can take longer than that on a loaded host. Were every attempt
// cut off with its check, a cell whose database came back would never see
// it.
const healthConnectTimeout = 10 * time.Second

// health is the health check's own connection to the database, outside
// the pool: a pool busy with transactions must not make a healthy
// database look down (a busy cell is not a dead cell). One check runs at
// a time; the connection is made again, in the background, after it
// fails.
type health struct {
	cfg *pgx.ConnConfig

	// turn is held by the check under way (a pgx.Conn is not safe for
	// concurrent use); a check waiting for its turn gives up with its
	// context.
	turn chan struct{}
	// life ends at close: it ends the attempt to connect and the check.
	life context.Context
	end  context.CancelFunc

	closing sync.Once

	mu      sync.Mutex
	conn    *pgx.Conn
	dialing chan struct{} // closed when the attempt under way ends; nil when none is
	dialErr error         // why the last attempt failed
}

func newHealth(cfg *pgx.ConnConfig) *health {
	life, end := context.WithCancel(context.Background())
	return &health{cfg: cfg, turn: make(chan struct{}, 1), life: life, end: end}
}

// ping checks, within ctx, that the database answers.
func (h *health) ping(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(h.life, cancel)()
	select {
	case h.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-h.turn }()
	conn, err := h.connected(ctx)
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
		h.mu.Lock()
		h.conn = nil
		h.mu.Unlock()
		_ = conn.Close(context.Background())
		return err
	}
	return nil
}

// connected returns the connection, waiting within ctx for an attempt to
// make it, begun now if none is under way. The caller holds the turn.
func (h *health) connected(ctx context.Context) (*pgx.Conn, error) {
	h.mu.Lock()
	if h.conn != nil && !h.conn.IsClosed() {
		c := h.conn
		h.mu.Unlock()
		return c, nil
	}
	h.conn = nil
	if h.dialing == nil {
		h.dialing = make(chan struct{})
		go h.dial(h.dialing)
	}
	done := h.dialing
	h.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("connecting, still (the attempt goes on up to %v): %w", healthConnectTimeout, ctx.Err())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		return nil, h.dialErr
	}
	return h.conn, nil
}

// dial makes one attempt to connect and closes done when it ends.
func (h *health) dial(done chan struct{}) {
	ctx, cancel := context.WithTimeout(h.life, healthConnectTimeout)
	c, err := pgx.ConnectConfig(ctx, h.cfg)
	cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	defer close(done)
	h.dialing = nil
	if err == nil && h.life.Err() != nil {
		_ = c.Close(context.Background())
		c, err = nil, errors.New("closed")
	}
	h.conn, h.dialErr = c, err
}

// close ends any attempt to connect and any check, and closes the
// connection. Checks after it fail.
func (h *health) close() { h.closing.Do(h.closeOnce) }

func (h *health) closeOnce() {
	h.end()
	h.turn <- struct{}{} // the check under way ends with life
	h.mu.Lock()
	done := h.dialing
	h.mu.Unlock()
	if done != nil {
		<-done
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn != nil {
		_ = h.conn.Close(context.Background())
		h.conn = nil
	}
}
