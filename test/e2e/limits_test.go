package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// servesStill: the GTR answers a real transaction.
func servesStill(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	got, err := env.payments.SubmitTransaction(ctx, request("limits-"+what+"-"+time.Now().Format("150405.000000"), freshPAN()))
	if err != nil || got.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
		t.Fatalf("after %s, a transaction: %v, %v", what, got, err)
	}
}

// TestOversizedRequestRefused: a 5 MB request is refused with
// RESOURCE_EXHAUSTED before it is decoded, and nothing was processed; so
// is a request with 5 MB of headers (internal/grpclimits's
// TestOversizedHeadersRefused shows the server's side of it).
func TestOversizedRequestRefused(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	r := request("limits-5mb", freshPAN())
	r.Merchant.Id = strings.Repeat("m", 5<<20)
	_, err := env.payments.SubmitTransaction(ctx, r)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("5 MB request: %v, want RESOURCE_EXHAUSTED", err)
	}
	servesStill(t, ctx, "5mb")
	// 5 MB of headers: the listener's limit (16 KiB, in its SETTINGS) makes
	// gRPC's client refuse to send them, naming the limit.
	big := metadata.AppendToOutgoingContext(ctx, "x-padding", strings.Repeat("h", 5<<20))
	_, err = env.payments.SubmitTransaction(big, request("limits-5mb-headers", freshPAN()))
	if err == nil || !strings.Contains(status.Convert(err).Message(), "header list size") {
		t.Fatalf("5 MB of headers: %v, want a refusal naming the header list size", err)
	}
	servesStill(t, ctx, "5mb-headers")
}

// TestHostileBytesOnTheGRPCPort: garbage, HTTP/1.1 and a silent client on
// the partners' port are cut off, and the GTR keeps serving.
func TestHostileBytesOnTheGRPCPort(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	garbage := make([]byte, 4096)
	_, _ = rand.Read(garbage)
	for name, payload := range map[string][]byte{
		"garbage":                garbage,
		"http/1.1":               []byte("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
		"h2 preface without TLS": []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
	} {
		c, err := net.DialTimeout("tcp", env.gtrAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write(payload)
		_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
		b, err := io.ReadAll(c) // until the server closes
		c.Close()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("%s: the connection was still open after 15 s", name)
		}
		if bytes.Contains(b, []byte("HTTP/1.1 200")) {
			t.Errorf("%s: answered as if valid: %q", name, b)
		}
	}
	servesStill(t, ctx, "hostile-bytes")
}

// TestIdleConnectionsDoNotStopService: 2,000 connections that never speak
// (plus 100 idle gRPC connections) do not stop the GTR from serving.
func TestIdleConnectionsDoNotStopService(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range 2000 {
		c, err := net.DialTimeout("tcp", env.gtrAddr, 5*time.Second)
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	var idle []*grpc.ClientConn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range 100 {
		c, err := grpc.NewClient(env.gtrAddr, env.gtrOpts...)
		if err != nil {
			t.Fatal(err)
		}
		c.Connect()
		idle = append(idle, c)
	}
	servesStill(t, ctx, "2000-idle")
	// The silent ones are cut off by the handshake deadline, not kept.
	_ = conns[0].SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := conns[0].Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("a silent connection was not closed by the GTR within 20 s: %v", err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
