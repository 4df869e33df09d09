package e2e

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/dev/issuersim"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// TestHopsAreMutualTLS: the platform's cells and issuer take only verified
// clients, and serve each only the methods its identity may call. A cell
// reads a transaction back for the GTR's certificate, and for no other
// (not another cell's, not the tools'); without a certificate, or in
// plaintext, nothing answers, health included. The issuer authorizes for
// cells only.
func TestHopsAreMutualTLS(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	txn, err := env.payments.SubmitTransaction(ctx, request("hops", approvedPAN))
	if err != nil {
		t.Fatal(err)
	}
	home := txn.GetCellId()
	var other string
	for _, c := range env.cells {
		if c.ID != home {
			other = c.ID
		}
	}
	as := func(name string) grpc.DialOption {
		opt, err := env.p.ClientTLS(name)
		if err != nil {
			t.Fatal(err)
		}
		return opt
	}
	cfg, err := tlsconf.ClientConfig(env.p.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	noCert := grpc.WithTransportCredentials(credentials.NewTLS(cfg))
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	dialCell := func(opt grpc.DialOption) *grpc.ClientConn {
		conn, err := grpc.NewClient(cellAddr(t, home), opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	get := &cellproto.GetRequest{PartnerId: txn.GetPartnerId(), TransactionId: txn.GetTransactionId()}
	for _, tc := range []struct {
		name        string
		opt         grpc.DialOption
		get, health codes.Code
	}{
		{"the GTR", as(platform.GTR), codes.OK, codes.OK},
		{"another cell", as(other), codes.PermissionDenied, codes.OK},
		{"the tools", as(platform.OpsCertName), codes.PermissionDenied, codes.OK},
		{"no certificate", noCert, codes.Unavailable, codes.Unavailable},
		{"plaintext", plain, codes.Unavailable, codes.Unavailable},
	} {
		t.Run("cell/"+tc.name, func(t *testing.T) {
			conn := dialCell(tc.opt)
			got, err := cellproto.NewCellClient(conn).Get(ctx, get)
			if status.Code(err) != tc.get {
				t.Errorf("Get: %v, want %v", err, tc.get)
			} else if err == nil && got.GetTransactionId() != txn.GetTransactionId() {
				t.Errorf("Get answered %v", got)
			}
			_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			if status.Code(err) != tc.health {
				t.Errorf("health: %v, want %v", err, tc.health)
			}
		})
	}

	auth := &issuerproto.AuthorizeRequest{PartnerId: "p-hops", TransactionId: runID + "-hops-direct", Pan: issuersim.CardApproved}
	for _, tc := range []struct {
		name string
		opt  grpc.DialOption
		want codes.Code
	}{
		{"the GTR", as(platform.GTR), codes.PermissionDenied},
		{"the tools", as(platform.OpsCertName), codes.PermissionDenied},
		{"plaintext", plain, codes.Unavailable},
	} {
		t.Run("issuer/"+tc.name, func(t *testing.T) {
			conn, err := grpc.NewClient(env.p.Config().IssuerAddr, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := issuerproto.NewIssuerClient(conn).Authorize(ctx, auth); status.Code(err) != tc.want {
				t.Errorf("Authorize: %v, want %v", err, tc.want)
			}
		})
	}
}
