package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/issuersim"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/issuerproto"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRun serves on a free port and checks the listening log line, health,
// reflection, one Authorize, and a clean stop when the context ends.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()

	addrs, done := serveForTest(t, ctx, runCtx, func(ctx context.Context, log *slog.Logger) error { return run(ctx, log, "127.0.0.1:0") },
		"issuersim listening")
	addr := addrs["issuersim listening"]

	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	for _, svc := range []string{"", issuerproto.Issuer_ServiceDesc.ServiceName} {
		h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q = %v, %v; want SERVING", svc, h, err)
		}
	}

	rs, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	rr, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	_ = rs.CloseSend()
	var names []string
	for _, s := range rr.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !slices.Contains(names, issuerproto.Issuer_ServiceDesc.ServiceName) {
		t.Errorf("reflection lists %v, want the Issuer service", names)
	}

	resp, err := issuerproto.NewIssuerClient(conn).Authorize(ctx, &issuerproto.AuthorizeRequest{
		PartnerId: "p-001", TransactionId: "smoke", Pan: issuersim.CardApproved, ExpiryMonth: 12, ExpiryYear: 2099, AmountMinorUnits: 100,
	})
	if err != nil || !resp.GetApproved() {
		t.Errorf("Authorize = %v, %v; want approved", resp, err)
	}

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("run did not return after its context ended")
	}
}

// TestHealthPort serves with a health port and checks that it answers
// health and not the Issuer API, and that it says NOT_SERVING once the
// simulator stops.
func TestHealthPort(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	addrs, done := serveForTest(t, ctx, runCtx, func(ctx context.Context, log *slog.Logger) error {
		return serve(ctx, log, "127.0.0.1:0", "", "127.0.0.1:0", tlsconf.Files{})
	}, "issuersim listening", "issuersim health port listening")

	conn, err := grpc.NewClient("passthrough:///"+addrs["issuersim health port listening"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, svc := range []string{"", issuerproto.Issuer_ServiceDesc.ServiceName} {
		h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health port: health %q = %v, %v; want SERVING", svc, h, err)
		}
	}
	_, err = issuerproto.NewIssuerClient(conn).Authorize(ctx, &issuerproto.AuthorizeRequest{PartnerId: "p-001", TransactionId: "probe"})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("Authorize on the health port: %v, want Unimplemented", err)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("serve did not return after its context ended")
	}
}

// serveForTest starts serve with a JSON logger and returns the addr of
// each log line named in want, once all have been logged, and the channel
// serve's result arrives on.
func serveForTest(t *testing.T, ctx, runCtx context.Context, serve func(context.Context, *slog.Logger) error, want ...string) (map[string]string, <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	log := slog.New(slog.NewJSONHandler(pw, nil))
	done := make(chan error, 1)
	go func() { done <- serve(runCtx, log) }()
	type line struct{ Msg, Addr string }
	lines := make(chan line, 16)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		dec := json.NewDecoder(pr)
		for {
			var l line
			if err := dec.Decode(&l); err != nil {
				return
			}
			if slices.Contains(want, l.Msg) {
				lines <- l
			}
		}
	}()
	t.Cleanup(func() {
		_ = pw.Close()
		<-drained
	})
	addrs := map[string]string{}
	for len(addrs) < len(want) {
		select {
		case l := <-lines:
			addrs[l.Msg] = l.Addr
		case err := <-done:
			t.Fatalf("serve returned early: %v", err)
		case <-ctx.Done():
			t.Fatalf("logged %v, want all of %v", addrs, want)
		}
	}
	return addrs, done
}
