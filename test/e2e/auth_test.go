package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// withKey returns ctx whose calls carry key as the bearer token.
func withKey(ctx context.Context, key string) context.Context {
	return metadata.NewOutgoingContext(ctx, metadata.Pairs("authorization", "Bearer "+key))
}

// TestPartnerAuthentication: the partners' listener serves TLS only, every
// Payments call needs its partner's key, and a key acts for its partner only.
func TestPartnerAuthentication(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	keys, err := env.p.PartnerKeys()
	if err != nil {
		t.Fatal(err)
	}
	raw := dialRaw(t)
	req := request("auth-1", approvedPAN) // partner p-001
	wrong := keys["p-001"][:len(keys["p-001"])-64] + strings.Repeat("0", 64)

	for _, c := range []struct {
		name string
		ctx  context.Context
		want codes.Code
	}{
		{"no key", ctx, codes.Unauthenticated},
		{"wrong key", withKey(ctx, wrong), codes.Unauthenticated},
		{"not a key", withKey(ctx, "hello"), codes.Unauthenticated},
		{"another partner's key", withKey(ctx, keys["p-002"]), codes.PermissionDenied},
	} {
		_, err := raw.SubmitTransaction(c.ctx, req)
		if status.Code(err) != c.want {
			t.Errorf("%s: Submit = %v, want %v", c.name, err, c.want)
		}
		if strings.Contains(status.Convert(err).Message(), "cpk_") {
			t.Errorf("%s: the error quotes a key: %v", c.name, err)
		}
		_, err = raw.GetTransaction(c.ctx, &cellpayv1.GetTransactionRequest{TransactionId: "auth-1", PartnerId: "p-001"})
		if status.Code(err) != c.want {
			t.Errorf("%s: Get = %v, want %v", c.name, err, c.want)
		}
	}
	// Nothing was processed for any of those.
	if _, err := raw.GetTransaction(withKey(ctx, keys["p-001"]), &cellpayv1.GetTransactionRequest{TransactionId: "auth-1"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a refused call left a transaction behind: %v", err)
	}

	// The right key works, and a Get without partner_id reads the caller's own.
	got, err := raw.SubmitTransaction(withKey(ctx, keys["p-001"]), req)
	if err != nil || got.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
		t.Fatalf("Submit with the partner's key = %v, %v", got, err)
	}
	read, err := raw.GetTransaction(withKey(ctx, keys["p-001"]), &cellpayv1.GetTransactionRequest{TransactionId: "auth-1"})
	if err != nil || read.GetAuthCode() != got.GetAuthCode() {
		t.Fatalf("Get without partner_id = %v, %v", read, err)
	}

	// gRPC health answers without a key (over TLS).
	conn, err := grpc.NewClient(env.gtrAddr, env.gtrOpts[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without a key: %v, %v", resp, err)
	}

	// A plaintext client on the TLS listener fails, even with a valid key
	// (which gRPC refuses to send in the clear anyway).
	plain, err := grpc.NewClient(env.gtrAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := cellpayv1.NewPaymentsClient(plain).SubmitTransaction(withKey(short, keys["p-001"]), request("auth-plain", approvedPAN)); err == nil {
		t.Fatal("a plaintext call to the TLS listener succeeded")
	}
	if _, err := healthpb.NewHealthClient(plain).Check(short, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("a plaintext health check on the TLS listener succeeded")
	}
}

// TestTryItAsPrinted runs the launcher's "Try" lines through a shell, with
// grpcurl, exactly as printed (the README shows the same lines).
func TestTryItAsPrinted(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	dir := filepath.Dir(env.p.Config().DataDir)
	lines := env.p.TryCommands(filepath.Join(env.bin, "grpcurl"), dir)
	var answers []map[string]any
	for _, line := range lines {
		cmd := exec.CommandContext(ctx, "bash", "-c", line)
		cmd.Dir = dir
		cmd.Env = os.Environ()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s\n%v\n%s", line, err, out)
		}
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("%s: not JSON: %v\n%s", line, err, out)
		}
		answers = append(answers, m)
	}
	if answers[0]["status"] != "APPROVED" || answers[1]["authCode"] != answers[0]["authCode"] {
		t.Fatalf("submit then read: %v, %v", answers[0], answers[1])
	}
}
