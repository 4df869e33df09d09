package hop_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/internal/dev/issuersim"
	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/dev/testutil/grpctest"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeCell answers Get and Process: a call that reaches it was authorized.
type fakeCell struct {
	cellproto.UnimplementedCellServer
}

func (fakeCell) Get(context.Context, *cellproto.GetRequest) (*cellpayv1.Transaction, error) {
	return &cellpayv1.Transaction{TransactionId: "t-1"}, nil
}

func (fakeCell) Process(s cellproto.Cell_ProcessServer) error {
	return s.Send(&cellproto.ProcessEvent{})
}

// identities issues, from one CA in dir, the certificates of the platform's
// hops, and one from another CA claiming to be the GTR.
func identities(t *testing.T) (dir string, files func(name string) tlsconf.Files) {
	t.Helper()
	dir = t.TempDir()
	ca, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	loop := []string{"127.0.0.1"}
	for name, c := range map[string]struct {
		hosts []string
		usage pki.Usage
	}{
		"gtr":    {append(loop, hop.GTR), pki.Server | pki.Client},
		"cell-a": {append(loop, hop.CellHost("cell-a"), hop.Cell("cell-a")), pki.Server | pki.Client},
		"issuer": {append(loop, hop.Issuer), pki.Server},
		"ops":    {[]string{hop.Ops}, pki.Client},
	} {
		if err := ca.Issue(name, c.hosts, c.usage); err != nil {
			t.Fatal(err)
		}
	}
	other, err := pki.EnsureCA(filepath.Join(dir, "other"))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Issue("gtr", []string{hop.GTR}, pki.Client); err != nil {
		t.Fatal(err)
	}
	return dir, func(name string) tlsconf.Files {
		d := dir
		if name == "forged-gtr" {
			d, name = filepath.Join(dir, "other"), "gtr"
		}
		return tlsconf.Files{Cert: pki.CertFile(d, name), Key: pki.KeyFile(d, name), CA: ca.CertFile()}
	}
}

// serve runs a gRPC server with files' mutual TLS and policy p on
// loopback, with register's services and health.
func serve(t *testing.T, files tlsconf.Files, p hop.Policy, register func(*grpc.Server)) string {
	t.Helper()
	opts, stop, err := hop.ServerOptions(files, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return grpctest.Serve(t, func(gs *grpc.Server) {
		register(gs)
		healthpb.RegisterHealthServer(gs, health.NewServer())
	}, opts...)
}

// dialAs dials addr as files' identity (plaintext with none), expecting
// a server whose identity want accepts.
func dialAs(t *testing.T, addr string, files *tlsconf.Files, want func(string) bool) *grpc.ClientConn {
	t.Helper()
	opt := grpc.WithTransportCredentials(insecure.NewCredentials())
	if files != nil {
		var stop func()
		var err error
		if opt, stop, err = hop.DialOption(*files, want); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
	}
	conn, err := grpc.NewClient(addr, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// caOnly trusts the CA but presents no certificate.
func caOnly(t *testing.T, addr string, caFile string) *grpc.ClientConn {
	t.Helper()
	cfg, err := tlsconf.ClientConfig(caFile)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestCellServesTheGTROnly(t *testing.T) {
	_, files := identities(t)
	addr := serve(t, files("cell-a"), hop.CellPolicy, func(gs *grpc.Server) { cellproto.RegisterCellServer(gs, fakeCell{}) })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	as := func(name string) *grpc.ClientConn {
		f := files(name)
		return dialAs(t, addr, &f, hop.Only(hop.Cell("cell-a")))
	}

	for _, tc := range []struct {
		name    string
		conn    *grpc.ClientConn
		get     codes.Code // Get's code
		process codes.Code // Process's first Recv's
		health  codes.Code
	}{
		{"the GTR", as("gtr"), codes.OK, codes.OK, codes.OK},
		{"a cell's certificate", as("cell-a"), codes.PermissionDenied, codes.PermissionDenied, codes.OK},
		{"the tools' certificate", as("ops"), codes.PermissionDenied, codes.PermissionDenied, codes.OK},
		{"no certificate", caOnly(t, addr, files("gtr").CA), codes.Unavailable, codes.Unavailable, codes.Unavailable},
		{"plaintext", dialAs(t, addr, nil, nil), codes.Unavailable, codes.Unavailable, codes.Unavailable},
		{"the GTR's name from another CA", as("forged-gtr"), codes.Unavailable, codes.Unavailable, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cellproto.NewCellClient(tc.conn)
			_, err := c.Get(ctx, &cellproto.GetRequest{})
			if got := status.Code(err); got != tc.get {
				t.Errorf("Get: %v, want %v", err, tc.get)
			}
			var perr error
			if s, err := c.Process(ctx); err != nil {
				perr = err
			} else {
				_, perr = s.Recv()
			}
			if got := status.Code(perr); got != tc.process {
				t.Errorf("Process: %v, want %v", perr, tc.process)
			}
			_, err = healthpb.NewHealthClient(tc.conn).Check(ctx, &healthpb.HealthCheckRequest{})
			if got := status.Code(err); got != tc.health {
				t.Errorf("health: %v, want %v", err, tc.health)
			}
		})
	}
}

func TestIssuerServesCells(t *testing.T) {
	_, files := identities(t)
	addr := serve(t, files("issuer"), hop.IssuerPolicy, func(gs *grpc.Server) {
		issuerproto.RegisterIssuerServer(gs, issuersim.New(issuersim.Config{}))
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	as := func(name string) issuerproto.IssuerClient {
		f := files(name)
		return issuerproto.NewIssuerClient(dialAs(t, addr, &f, hop.Only(hop.Issuer)))
	}
	auth := &issuerproto.AuthorizeRequest{PartnerId: "p", TransactionId: "t-1", Pan: issuersim.CardApproved}
	day := func(terminal string) *issuerproto.ListEffectsRequest {
		now := time.Now()
		return &issuerproto.ListEffectsRequest{From: timestamppb.New(now.Add(-time.Hour)), To: timestamppb.New(now.Add(time.Hour)), TerminalId: terminal}
	}
	for _, tc := range []struct {
		name                     string
		client                   issuerproto.IssuerClient
		authorize, stats         codes.Code
		ownEffects, otherEffects codes.Code // ListEffects of cell-a's terminal, of cell-b's
	}{
		{"a cell", as("cell-a"), codes.OK, codes.PermissionDenied, codes.OK, codes.PermissionDenied},
		{"the GTR", as("gtr"), codes.PermissionDenied, codes.PermissionDenied, codes.PermissionDenied, codes.PermissionDenied},
		{"the tools", as("ops"), codes.PermissionDenied, codes.OK, codes.OK, codes.OK},
		{"plaintext", issuerproto.NewIssuerClient(dialAs(t, addr, nil, nil)), codes.Unavailable, codes.Unavailable, codes.Unavailable, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.client.Authorize(ctx, auth)
			if got := status.Code(err); got != tc.authorize {
				t.Errorf("Authorize: %v, want %v", err, tc.authorize)
			}
			_, err = tc.client.Inquire(ctx, &issuerproto.InquireRequest{PartnerId: "p", TransactionId: "t-1"})
			if got := status.Code(err); got != tc.authorize && !(tc.authorize == codes.OK && got == codes.NotFound) {
				t.Errorf("Inquire: %v, want %v", err, tc.authorize)
			}
			_, err = tc.client.Effects(ctx, &issuerproto.EffectsRequest{})
			if got := status.Code(err); got != tc.stats {
				t.Errorf("Effects: %v, want %v", err, tc.stats)
			}
			_, err = tc.client.ListEffects(ctx, day("cell-a"))
			if got := status.Code(err); got != tc.ownEffects {
				t.Errorf("ListEffects of cell-a: %v, want %v", err, tc.ownEffects)
			}
			_, err = tc.client.ListEffects(ctx, day("cell-b"))
			if got := status.Code(err); got != tc.otherEffects {
				t.Errorf("ListEffects of cell-b: %v, want %v", err, tc.otherEffects)
			}
		})
	}
}

func TestPolicyDeniesWhatItDoesNotName(t *testing.T) {
	p := hop.Policy{{Prefix: "/a.A/", Allow: hop.Anyone}}
	if err := p.Authorize(context.Background(), "/a.A/X"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no peer: %v, want Unauthenticated", err)
	}
	if !hop.IsCell(hop.Cell("cell-a")) || hop.IsCell(hop.GTR) || hop.IsCell(hop.Cell("")) {
		t.Error("IsCell")
	}
}

// TestRequireTLS: without TLS files a component refuses to start, naming
// its flags, unless -insecure-plaintext chose plaintext.
func TestRequireTLS(t *testing.T) {
	const flags = "-tls-cert, -tls-key and -tls-ca"
	err := hop.RequireTLS(tlsconf.Files{}, false, flags)
	if err == nil || !strings.Contains(err.Error(), flags) || !strings.Contains(err.Error(), hop.InsecurePlaintextFlag) {
		t.Fatalf("no files, no -insecure-plaintext: %v, want an error naming %s and %s", err, flags, hop.InsecurePlaintextFlag)
	}
	if err := hop.RequireTLS(tlsconf.Files{}, true, flags); err != nil {
		t.Errorf("-insecure-plaintext: %v", err)
	}
	if err := hop.RequireTLS(tlsconf.Files{Cert: "c", Key: "k", CA: "ca"}, false, flags); err != nil {
		t.Errorf("TLS files: %v", err)
	}
	// NATS: a URL without the CA is refused unless plaintext is chosen.
	if err := hop.RequireNATSTLS("nats://127.0.0.1:4222", "", false, "-nats-ca"); err == nil || !strings.Contains(err.Error(), "-nats-ca") {
		t.Errorf("NATS URL without CA: %v, want an error naming -nats-ca", err)
	}
	for _, c := range []struct {
		url, ca  string
		insecure bool
	}{{"", "", false}, {"tls://n:4222", "ca.crt", false}, {"nats://n:4222", "", true}} {
		if err := hop.RequireNATSTLS(c.url, c.ca, c.insecure, "-nats-ca"); err != nil {
			t.Errorf("RequireNATSTLS(%q, %q, %v): %v", c.url, c.ca, c.insecure, err)
		}
	}
}

// TestClientsPinThePeer: a client refuses a server of the same CA whose
// certificate carries another identity than the peer dialled (a cell's
// certificate answering as the issuer, say), at the handshake, before any
// call; the expiry of what each server served is recorded by identity.
func TestClientsPinThePeer(t *testing.T) {
	_, files := identities(t)
	addr := serve(t, files("cell-a"), hop.CellPolicy, func(gs *grpc.Server) { cellproto.RegisterCellServer(gs, fakeCell{}) })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	gtr := files("gtr")
	for _, tc := range []struct {
		name string
		want func(string) bool
		code codes.Code
	}{
		{"the cell dialled", hop.Only(hop.Cell("cell-a")), codes.OK},
		{"any cell", hop.IsCell, codes.OK},
		{"another cell", hop.Only(hop.Cell("cell-b")), codes.Unavailable},
		{"the issuer", hop.Only(hop.Issuer), codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cellproto.NewCellClient(dialAs(t, addr, &gtr, tc.want)).Get(ctx, &cellproto.GetRequest{})
			if got := status.Code(err); got != tc.code {
				t.Fatalf("Get: %v, want %v", err, tc.code)
			}
			if tc.code != codes.OK && !strings.Contains(err.Error(), "presented identity "+hop.Cell("cell-a")) {
				t.Fatalf("the refusal does not name the identity presented: %v", err)
			}
		})
	}
	cert, err := pki.ReadCertificate(files("cell-a").Cert)
	if err != nil {
		t.Fatal(err)
	}
	var seen bool
	for _, p := range hop.PeerExpiries() {
		if p.Identity == hop.Cell("cell-a") {
			seen = p.NotAfter.Equal(cert.NotAfter)
		}
	}
	if !seen {
		t.Fatalf("cell-a's served certificate (expiring %v) not among %v", cert.NotAfter, hop.PeerExpiries())
	}
}
