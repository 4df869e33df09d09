package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
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
	req := request("auth-1", freshPAN()) // partner p-001
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
		_, err = raw.GetTransaction(c.ctx, &cellpayv1.GetTransactionRequest{TransactionId: req.TransactionId, PartnerId: "p-001"})
		if status.Code(err) != c.want {
			t.Errorf("%s: Get = %v, want %v", c.name, err, c.want)
		}
	}
	// Nothing was processed for any of those.
	if _, err := raw.GetTransaction(withKey(ctx, keys["p-001"]), &cellpayv1.GetTransactionRequest{TransactionId: req.TransactionId}); status.Code(err) != codes.NotFound {
		t.Fatalf("a refused call left a transaction behind: %v", err)
	}

	// The right key works, and a Get without partner_id reads the caller's own.
	got, err := raw.SubmitTransaction(withKey(ctx, keys["p-001"]), req)
	if err != nil || got.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
		t.Fatalf("Submit with the partner's key = %v, %v", got, err)
	}
	read, err := raw.GetTransaction(withKey(ctx, keys["p-001"]), &cellpayv1.GetTransactionRequest{TransactionId: req.TransactionId})
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
	if _, err := cellpayv1.NewPaymentsClient(plain).SubmitTransaction(withKey(short, keys["p-001"]), request("auth-plain", freshPAN())); err == nil {
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

// platformAdmin is an Admin API client of the shared platform's GTR.
func platformAdmin(t *testing.T) adminproto.AdminClient {
	t.Helper()
	tok, err := os.ReadFile(env.p.AdminTokenFile())
	if err != nil {
		t.Fatal(err)
	}
	return adminClientFor(t, env.p.Config().AdminAddr, strings.TrimSpace(string(tok)))
}

// submitAs sends req as partner with key, and returns the gRPC code.
func submitAs(ctx context.Context, raw cellpayv1.PaymentsClient, key string, req *cellpayv1.SubmitTransactionRequest) codes.Code {
	_, err := raw.SubmitTransaction(withKey(ctx, key), req)
	return status.Code(err)
}

// TestSuspendedPartner: a partner added through the Admin API can call at
// once; suspended, it is PERMISSION_DENIED; resumed, it calls again.
func TestSuspendedPartner(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	adm, raw := platformAdmin(t), dialRaw(t)
	id := "p-susp-" + runID
	added, err := adm.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: id})
	if err != nil {
		t.Fatal(err)
	}
	key := added.GetKey().GetApiKey()
	n := 0
	next := func() *cellpayv1.SubmitTransactionRequest {
		n++
		r := request(fmt.Sprintf("susp-%d", n), freshPAN())
		r.PartnerId = id
		return r
	}
	testutil.Eventually(t, 10*time.Second, "the new partner's key works", func() bool { return submitAs(ctx, raw, key, next()) == codes.OK })
	if _, err := adm.SuspendPartner(ctx, &adminproto.SuspendPartnerRequest{PartnerId: id}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the suspended partner refused", func() bool { return submitAs(ctx, raw, key, next()) == codes.PermissionDenied })
	if _, err := adm.ResumePartner(ctx, &adminproto.ResumePartnerRequest{PartnerId: id}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the resumed partner served", func() bool { return submitAs(ctx, raw, key, next()) == codes.OK })
}

// rotatingKey sends whichever key is current.
type rotatingKey struct{ cur atomic.Pointer[string] }

func (r *rotatingKey) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + *r.cur.Load()}, nil
}
func (*rotatingKey) RequireTransportSecurity() bool { return true }

// TestKeyRotationUnderLoad: under steady load from one partner, a second
// key is added, the client moves to it, and the first is revoked: not one
// transaction fails, and the first key is refused afterwards.
func TestKeyRotationUnderLoad(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	adm, raw := platformAdmin(t), dialRaw(t)
	id := "p-rot-" + runID
	added, err := adm.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: id})
	if err != nil {
		t.Fatal(err)
	}
	key1 := added.GetKey().GetApiKey()
	probe := 0
	try := func(key string) codes.Code {
		probe++
		r := request(fmt.Sprintf("rot-probe-%d", probe), freshPAN())
		r.PartnerId = id
		return submitAs(ctx, raw, key, r)
	}
	testutil.Eventually(t, 10*time.Second, "the first key works", func() bool { return try(key1) == codes.OK })

	rk := &rotatingKey{}
	rk.cur.Store(&key1)
	var failed atomic.Int64
	done := make(chan load.Report, 1)
	go func() {
		rep, err := load.Run(ctx, load.Config{
			// Through the partners' client, as a partner sends: a request
			// the GTR sheds under the machine's load (RESOURCE_EXHAUSTED,
			// sent to no cell) is resent after its hint, so that only what
			// the rotation breaks counts as failed.
			Target: load.TargetGTR, Endpoints: []string{env.gtrAddr}, Client: client.Config{CallTimeout: 12 * time.Second},
			Mode: load.ModeOpen, Rate: 40, Concurrency: 64,
			Count: 400, Duration: 10 * time.Second, Seed: 5, RunID: runID + "-rot", Partners: []string{id},
			DialOptions: []grpc.DialOption{env.gtrOpts[0], grpc.WithPerRPCCredentials(rk)},
			OnResult: func(r load.Result) {
				if r.Err != nil {
					failed.Add(1)
				}
			},
		}, nil)
		if err != nil {
			t.Error(err)
		}
		done <- rep
	}()
	time.Sleep(2 * time.Second)
	nk, err := adm.AddKey(ctx, &adminproto.AddKeyRequest{PartnerId: id})
	if err != nil {
		t.Fatal(err)
	}
	key2 := nk.GetKey().GetApiKey()
	testutil.Eventually(t, 10*time.Second, "the second key works", func() bool { return try(key2) == codes.OK })
	rk.cur.Store(&key2)
	time.Sleep(time.Second) // calls already sent with the first key finish
	if _, err := adm.RevokeKey(ctx, &adminproto.RevokeKeyRequest{PartnerId: id, KeyId: added.GetKey().GetKeyId()}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the revoked key refused", func() bool { return try(key1) == codes.Unauthenticated })
	rep := <-done
	if failed.Load() != 0 || rep.Completed < 300 {
		t.Fatalf("rotation under load: %d failed, %d completed, errors %v", failed.Load(), rep.Completed, rep.Errors)
	}
	if try(key2) != codes.OK {
		t.Fatal("the second key stopped working")
	}
	t.Logf("rotation under load: %d completed, 0 failed", rep.Completed)
}
