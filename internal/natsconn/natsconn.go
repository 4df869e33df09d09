// Package natsconn opens the NATS connection of a long-lived component
// (a cell's reference data consumer and transaction directory, the GTR's
// KV replicas, report watcher and audit log), with the options they all
// need: start without waiting for NATS, reconnect forever, fail fast.
// It is the one place a component's NATS credentials and TLS will go.
package natsconn

import (
	"time"

	"github.com/nats-io/nats.go"
)

// Connect connects to url as name. It returns at once even when NATS is
// down (the connection retries in the background, without end, every
// 250 ms); each request times out after a second. opts come after the
// defaults, so they may override them.
func Connect(url, name string, opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(url, append([]nats.Option{
		nats.Name(name),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(time.Second),
	}, opts...)...)
}
