package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/issuersim"
	"github.com/cellpay/cellpay/pkg/issuerproto"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
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

	pr, pw := io.Pipe()
	log := slog.New(slog.NewJSONHandler(pw, nil))
	done := make(chan error, 1)
	go func() { done <- run(runCtx, log, "127.0.0.1:0") }()

	addrc := make(chan string, 1)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		dec := json.NewDecoder(pr)
		for {
			var line struct{ Msg, Addr string }
			if err := dec.Decode(&line); err != nil {
				return
			}
			if line.Msg == "issuersim listening" {
				addrc <- line.Addr
			}
		}
	}()
	defer func() {
		_ = pw.Close()
		<-drained
	}()

	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("run returned early: %v", err)
	case <-ctx.Done():
		t.Fatal("no listening line")
	}

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
