package auth

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/dev/testutil/grpctest"
	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
)

// echo answers with the partner it was called for, as the handler sees it.
type echo struct {
	cellpayv1.UnimplementedPaymentsServer
}

func (echo) SubmitTransaction(ctx context.Context, r *cellpayv1.SubmitTransactionRequest) (*cellpayv1.Transaction, error) {
	p, ok := PartnerFrom(ctx)
	if !ok || p.ID != r.GetPartnerId() {
		return nil, errors.New("handler reached without the request's partner authenticated")
	}
	return &cellpayv1.Transaction{TransactionId: r.GetTransactionId(), Status: cellpayv1.TransactionStatus_APPROVED}, nil
}

func (echo) CaptureTransaction(ctx context.Context, r *cellpayv1.CaptureTransactionRequest) (*cellpayv1.Transaction, error) {
	return &cellpayv1.Transaction{TransactionId: r.GetTransactionId()}, nil
}

func (echo) GetTransaction(ctx context.Context, r *cellpayv1.GetTransactionRequest) (*cellpayv1.Transaction, error) {
	return &cellpayv1.Transaction{TransactionId: r.GetTransactionId() + "@" + r.GetPartnerId()}, nil
}

// ListTransactions answers with one transaction naming the partner it
// was called for, as the handler sees it.
func (echo) ListTransactions(ctx context.Context, r *cellpayv1.ListTransactionsRequest) (*cellpayv1.ListTransactionsResponse, error) {
	return &cellpayv1.ListTransactionsResponse{Transactions: []*cellpayv1.Transaction{{PartnerId: r.GetPartnerId()}}}, nil
}

// GetStatement answers with the partner it was called for.
func (echo) GetStatement(ctx context.Context, r *cellpayv1.GetStatementRequest) (*cellpayv1.Statement, error) {
	return &cellpayv1.Statement{PartnerId: r.GetPartnerId(), Date: r.GetDate()}, nil
}

// serve serves echo and a health service with TLS behind the partners
// interceptors of ix (denials appended to denied), and returns clients.
func serve(t *testing.T, ix *partners.Index, denied *[]string) (cellpayv1.PaymentsClient, healthpb.HealthClient) {
	t.Helper()
	cert, key, caFile, err := pki.Loopback(filepath.Join(t.TempDir(), "pki"), "gtr")
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, stop, err := tlsconf.ServerConfig(cert, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	a := &Partners{Index: func() *partners.Index { return ix }, OnDenied: func(c codes.Code, r string) { *denied = append(*denied, c.String()+" "+r) }}
	addr := grpctest.Serve(t, func(gs *grpc.Server) {
		cellpayv1.RegisterPaymentsServer(gs, echo{})
		healthpb.RegisterHealthServer(gs, health.NewServer())
	}, append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}, a.ServerOptions()...)...)
	opt, err := client.TLS(caFile)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return cellpayv1.NewPaymentsClient(conn), healthpb.NewHealthClient(conn)
}

func TestInterceptor(t *testing.T) {
	reg := &partners.Registry{Version: 1}
	plain := map[string]string{}
	for _, id := range []string{"a", "b", "gone", "gb-cards"} {
		k, key, err := partners.NewKey(nil, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		plain[id] = k
		p := partners.Partner{ID: id, Status: partners.StatusActive, Keys: []partners.Key{key}}
		switch id {
		case "gone":
			p.Status = partners.StatusSuspended
		case "gb-cards":
			p.Markets, p.PaymentTypes = []string{"GB"}, []string{"CARD_AUTHORIZATION"}
		}
		reg.Partners = append(reg.Partners, p)
	}
	ix, err := partners.Compile(reg)
	if err != nil {
		t.Fatal(err)
	}
	var denied []string
	pay, hc := serve(t, ix, &denied)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	as := func(key string) context.Context {
		if key == "" {
			return ctx
		}
		return metadata.NewOutgoingContext(ctx, metadata.Pairs("authorization", "Bearer "+key))
	}
	req := func(partner, market string, pt cellpayv1.PaymentType) *cellpayv1.SubmitTransactionRequest {
		return &cellpayv1.SubmitTransactionRequest{TransactionId: "t1", PartnerId: partner, Market: market, PaymentType: pt}
	}
	card := cellpayv1.PaymentType_CARD_AUTHORIZATION
	for _, c := range []struct {
		name string
		ctx  context.Context
		req  *cellpayv1.SubmitTransactionRequest
		want codes.Code
	}{
		{"own key", as(plain["a"]), req("a", "GB", card), codes.OK},
		{"no key", as(""), req("a", "GB", card), codes.Unauthenticated},
		{"garbage", as("x"), req("a", "GB", card), codes.Unauthenticated},
		{"other partner", as(plain["a"]), req("b", "GB", card), codes.PermissionDenied},
		{"suspended", as(plain["gone"]), req("gone", "GB", card), codes.PermissionDenied},
		{"market not enabled", as(plain["gb-cards"]), req("gb-cards", "DE", card), codes.PermissionDenied},
		{"type not enabled", as(plain["gb-cards"]), req("gb-cards", "GB", cellpayv1.PaymentType_BANK_TRANSFER), codes.PermissionDenied},
		{"enabled", as(plain["gb-cards"]), req("gb-cards", "GB", card), codes.OK},
	} {
		if _, err := pay.SubmitTransaction(c.ctx, c.req); status.Code(err) != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if len(denied) != 6 {
		t.Errorf("OnDenied told of %d refusals, want 6: %v", len(denied), denied)
	}
	// Get reads for the caller when partner_id is left out, and refuses
	// another partner's.
	got, err := pay.GetTransaction(as(plain["b"]), &cellpayv1.GetTransactionRequest{TransactionId: "t1"})
	if err != nil || got.GetTransactionId() != "t1@b" {
		t.Fatalf("Get without partner_id: %v, %v", got, err)
	}
	if _, err := pay.GetTransaction(as(plain["b"]), &cellpayv1.GetTransactionRequest{TransactionId: "t1", PartnerId: "a"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Get of another partner's: %v", err)
	}
	// A listing and a statement read for the caller when partner_id is
	// left out, and refuse another partner's: a key of b never lists or
	// reconciles a's transactions.
	list := func(partner string) (string, error) {
		resp, err := pay.ListTransactions(as(plain["b"]), &cellpayv1.ListTransactionsRequest{PartnerId: partner})
		if len(resp.GetTransactions()) != 1 {
			return "", err
		}
		return resp.GetTransactions()[0].GetPartnerId(), err
	}
	statement := func(partner string) (string, error) {
		resp, err := pay.GetStatement(as(plain["b"]), &cellpayv1.GetStatementRequest{PartnerId: partner, Date: "2026-12-07"})
		return resp.GetPartnerId(), err
	}
	for _, c := range []struct {
		name string
		call func(partner string) (string, error)
	}{{"ListTransactions", list}, {"GetStatement", statement}} {
		for _, partner := range []string{"", "b"} {
			if got, err := c.call(partner); err != nil || got != "b" {
				t.Errorf("%s with partner_id %q by b: for %q, %v; want b's", c.name, partner, got, err)
			}
		}
		if got, err := c.call("a"); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s of another partner's: for %q, %v; want PermissionDenied", c.name, got, err)
		}
		if _, err := c.call("gone"); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s of a suspended partner's by b: %v; want PermissionDenied", c.name, err)
		}
	}
	// A capture acts for the key's partner only, in a market the partner
	// may authorize in.
	capture := func(partner, market string) *cellpayv1.CaptureTransactionRequest {
		return &cellpayv1.CaptureTransactionRequest{TransactionId: "c1", PartnerId: partner, OriginalTransactionId: "t1", Market: market}
	}
	for _, c := range []struct {
		name string
		ctx  context.Context
		req  *cellpayv1.CaptureTransactionRequest
		want codes.Code
	}{
		{"capture, own", as(plain["gb-cards"]), capture("gb-cards", "GB"), codes.OK},
		{"capture, no key", as(""), capture("a", "GB"), codes.Unauthenticated},
		{"capture of another partner's", as(plain["a"]), capture("b", "GB"), codes.PermissionDenied},
		{"capture, market not enabled", as(plain["gb-cards"]), capture("gb-cards", "DE"), codes.PermissionDenied},
	} {
		if _, err := pay.CaptureTransaction(c.ctx, c.req); status.Code(err) != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// Health needs no key.
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health without a key: %v", err)
	}
}

// TestFromHeader: the tap's view of a call names the partner of a valid
// key only, and refuses no key, a wrong one, two, another scheme or a
// suspended partner with the interceptor's code and message, each told to
// OnDenied once.
func TestFromHeader(t *testing.T) {
	reg := &partners.Registry{Version: 1}
	plain := map[string]string{}
	for _, id := range []string{"a", "gone"} {
		k, key, err := partners.NewKey(nil, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		plain[id] = k
		p := partners.Partner{ID: id, Status: partners.StatusActive, Keys: []partners.Key{key}}
		if id == "gone" {
			p.Status = partners.StatusSuspended
		}
		reg.Partners = append(reg.Partners, p)
	}
	ix, err := partners.Compile(reg)
	if err != nil {
		t.Fatal(err)
	}
	var denied []string
	a := &Partners{Index: func() *partners.Index { return ix }, OnDenied: func(c codes.Code, r string) { denied = append(denied, c.String()+" "+r) }}
	if p, err := a.FromHeader(metadata.Pairs("authorization", "Bearer "+plain["a"])); err != nil || p.ID != "a" {
		t.Fatalf("a's key: %v %v", p, err)
	}
	for _, c := range []struct {
		name string
		md   metadata.MD
		want error
	}{
		{"no key", metadata.MD{}, errNoKey},
		{"wrong key", metadata.Pairs("authorization", "Bearer nope"), errBadKey},
		{"two keys", metadata.Pairs("authorization", "Bearer "+plain["a"], "authorization", "Bearer "+plain["a"]), errBadKey},
		{"basic", metadata.Pairs("authorization", "Basic "+plain["a"]), errBadKey},
		{"suspended", metadata.Pairs("authorization", "Bearer "+plain["gone"]), errSuspended},
	} {
		p, err := a.FromHeader(c.md)
		if p != nil {
			t.Errorf("%s: named %s", c.name, p.ID)
		}
		if err != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if msg := status.Convert(err).Message(); strings.Contains(msg, plain["a"]) || strings.Contains(msg, plain["gone"]) {
			t.Errorf("%s: the error quotes a key", c.name)
		}
	}
	want := "[Unauthenticated no_key Unauthenticated bad_key Unauthenticated bad_key Unauthenticated bad_key PermissionDenied suspended]"
	if got := fmt.Sprint(denied); got != want {
		t.Errorf("OnDenied: %s, want %s", got, want)
	}
}
