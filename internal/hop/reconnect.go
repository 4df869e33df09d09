package hop

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Reconnect is the connection back-off of the internal hops (GTR→cell
// payments, cell→issuer, the launcher's readiness checks): at most a
// second between attempts. gRPC's default grows to two minutes, so a peer
// that was down for a minute was not dialled again for up to another one
// after it came back: a restarted cell stayed ejected, and its payments
// connection refused the calls it was re-admitted for.
var Reconnect = ReconnectWithin(time.Second)

// ReconnectWithin is a connection back-off of at most max between attempts
// (the GTR's health monitor uses its check interval). An attempt to a peer
// that does not answer at all (a frozen host) is given 5 s before the next.
func ReconnectWithin(max time.Duration) grpc.DialOption {
	return grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: min(100*time.Millisecond, max), Multiplier: 1.6, Jitter: 0.2, MaxDelay: max},
		MinConnectTimeout: 5 * time.Second,
	})
}
