package gtr

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/cmd/gtr/internal/admin"
	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

// adminCall makes one ListCells call at addr with token tok, trusting the
// CA in caFile and, if id is set, pinning the server's identity.
func adminCall(t *testing.T, addr, caFile, id, tok string) error {
	t.Helper()
	pool, err := tlsconf.CertPool(caFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	if id != "" {
		cfg.VerifyConnection = hop.Pin(hop.Only(id))
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)), grpc.WithPerRPCCredentials(admin.TokenCredentials(tok)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = adminproto.NewAdminClient(conn).ListCells(ctx, &adminproto.ListCellsRequest{})
	return err
}

// TestAdminCertificate: with -admin-tls-cert, the admin listener serves
// its own certificate (the GTR's identity, of another CA than the
// partners'), which a client pinning that identity accepts; the partners'
// listener keeps its own. Without it, the admin listener serves the
// partners' certificate; one of the two files alone is refused.
func TestAdminCertificate(t *testing.T) {
	cfg, partnersCA := lifeConfig(t)
	ca, err := pki.EnsureCA(filepath.Join(t.TempDir(), "internal"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Issue("gtr-admin", []string{"127.0.0.1", hop.GTR}, pki.Server); err != nil {
		t.Fatal(err)
	}
	cfg.AdminTLSCertFile, cfg.AdminTLSKeyFile = pki.CertFile(ca.Dir, "gtr-admin"), pki.KeyFile(ca.Dir, "gtr-admin")
	g := startGTR(t, cfg)
	adminAddr := g.AdminAddr().String()
	if err := adminCall(t, adminAddr, ca.CertFile(), hop.GTR, "tok"); err != nil {
		t.Fatalf("admin listener, the internal CA, pinning %s: %v", hop.GTR, err)
	}
	if err := adminCall(t, adminAddr, partnersCA, "", "tok"); status.Code(err) != codes.Unavailable {
		t.Fatalf("admin listener with the partners' CA: %v, want Unavailable (another CA's certificate)", err)
	}
	if err := adminCall(t, g.Addr().String(), ca.CertFile(), "", "tok"); status.Code(err) != codes.Unavailable {
		t.Fatalf("partners' listener with the internal CA: %v, want Unavailable (it keeps the partners' certificate)", err)
	}

	def, partnersCA := lifeConfig(t)
	g = startGTR(t, def)
	if err := adminCall(t, g.AdminAddr().String(), partnersCA, "", "tok"); err != nil {
		t.Fatalf("without -admin-tls-cert, the partners' certificate: %v", err)
	}

	half, _ := lifeConfig(t)
	half.AdminTLSCertFile = cfg.AdminTLSCertFile
	if _, err := New(half); err == nil || !strings.Contains(err.Error(), "admin-tls-key") {
		t.Fatalf("a certificate without its key: %v, want refused naming admin-tls-key", err)
	}
}

// TestLoopbackThrottle: by default an address of this host is throttled
// like any other after too many failed logins (kubectl port-forward
// arrives from loopback); with AdminExemptLoopback it is only refused
// each time, never locked out.
func TestLoopbackThrottle(t *testing.T) {
	for _, tc := range []struct {
		name   string
		exempt bool
		want   codes.Code // the right token after the failures
	}{
		{"default: throttled", false, codes.ResourceExhausted},
		{"exempt", true, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, ca := lifeConfig(t)
			cfg.AdminExemptLoopback = tc.exempt
			g := startGTR(t, cfg)
			for i := range 12 {
				err := adminCall(t, g.AdminAddr().String(), ca, "", "wrong")
				if c := status.Code(err); c != codes.Unauthenticated && (tc.exempt || c != codes.ResourceExhausted) {
					t.Fatalf("failure %d: %v", i+1, err)
				}
			}
			if err := adminCall(t, g.AdminAddr().String(), ca, "", "tok"); status.Code(err) != tc.want {
				t.Fatalf("the right token after 12 failures from loopback: %v, want %v", err, tc.want)
			}
		})
	}
}
