package auth

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/cellpay/cellpay/internal/partners"
)

// BenchmarkAuthenticate: one call's authentication, with the headers a
// gRPC call arrives with, on every Payments call and on every refusal.
func BenchmarkAuthenticate(b *testing.B) {
	k, key, err := partners.NewKey(nil, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	ix, err := partners.Compile(&partners.Registry{Version: 1, Partners: []partners.Partner{{ID: "p", Status: partners.StatusActive, Keys: []partners.Key{key}}}})
	if err != nil {
		b.Fatal(err)
	}
	a := &Partners{Index: func() *partners.Index { return ix }}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(
		":authority", "127.0.0.1:7070", "content-type", "application/grpc", "user-agent", "grpc-go/1.85.0",
		"te", "trailers", "grpc-timeout", "4999912u", "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"authorization", "Bearer "+k))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.authenticate(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
