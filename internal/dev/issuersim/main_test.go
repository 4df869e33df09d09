package issuersim

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/cellpay/cellpay/pkg/issuerproto"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds every test; a hung call fails the test instead of the
// whole run.
const testTimeout = 20 * time.Second

// fixedNow is the clock the rules tests run at: mid June 2026.
var fixedNow = time.Date(2026, time.June, 15, 12, 0, 0, 0, time.UTC)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// startGRPC serves a new Server on a loopback listener and returns a client
// connected to it through real gRPC, plus the Server itself.
func startGRPC(t *testing.T, cfg Config) (issuerproto.IssuerClient, *Server) {
	t.Helper()
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return fixedNow }
	}
	srv := New(cfg)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	gs := grpc.NewServer()
	issuerproto.RegisterIssuerServer(gs, srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = gs.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		gs.Stop()
		<-served
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		<-served
	})
	return issuerproto.NewIssuerClient(conn), srv
}

// testPartner is the partner of authReq's requests.
const testPartner = "p-001"

// authReq returns a request of testPartner that is approved by default at
// fixedNow.
func authReq(id, pan string, amount int64) *issuerproto.AuthorizeRequest {
	return &issuerproto.AuthorizeRequest{
		PartnerId:        testPartner,
		TransactionId:    id,
		Pan:              pan,
		ExpiryMonth:      12,
		ExpiryYear:       2030,
		AmountMinorUnits: amount,
		Currency:         "EUR",
		MerchantId:       "m-1",
		Mcc:              "5411",
	}
}

func wantCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("code = %v (err %v), want %v", got, err, want)
	}
}

// effectsOf reads the counters of testPartner's transaction id.
func effectsOf(ctx context.Context, t *testing.T, c issuerproto.IssuerClient, id string) (effects, requests int32) {
	t.Helper()
	return effectsOfPartner(ctx, t, c, testPartner, id)
}

func effectsOfPartner(ctx context.Context, t *testing.T, c issuerproto.IssuerClient, partner, id string) (effects, requests int32) {
	t.Helper()
	resp, err := c.Effects(ctx, &issuerproto.EffectsRequest{Transactions: []*issuerproto.TransactionRef{{PartnerId: partner, TransactionId: id}}})
	if err != nil {
		t.Fatalf("Effects: %v", err)
	}
	if len(resp.GetEffects()) != 1 {
		t.Fatalf("Effects returned %d entries, want 1", len(resp.GetEffects()))
	}
	e := resp.GetEffects()[0]
	return e.GetEffects(), e.GetRequests()
}
