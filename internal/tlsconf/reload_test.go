package tlsconf

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/dev/testutil"
)

// TestMutualReload replaces both sides' certificate files in place while
// clients keep calling over real gRPC on loopback, each call on a new
// connection (a new handshake): no call fails, and soon the server serves
// its new certificate and sees the client's new one, without a restart.
func TestMutualReload(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	ca, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	issue := func() {
		t.Helper()
		if err := ca.Issue("server", []string{"127.0.0.1"}, pki.Server); err != nil {
			t.Fatal(err)
		}
		if err := ca.Issue("client", []string{"spiffe://test/client"}, pki.Client); err != nil {
			t.Fatal(err)
		}
	}
	issue()
	files := func(name string) Files {
		return Files{Cert: pki.CertFile(dir, name), Key: pki.KeyFile(dir, name), CA: ca.CertFile()}
	}
	const refresh = 50 * time.Millisecond
	scfg, stopServer, err := MutualServerConfig(files("server"), refresh)
	if err != nil {
		t.Fatal(err)
	}
	defer stopServer()
	ccfg, stopClient, err := MutualClientConfig(files("client"), refresh)
	if err != nil {
		t.Fatal(err)
	}
	defer stopClient()

	var clientSerial atomic.Value // the serial of the last client certificate the server verified
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(scfg)), grpc.UnaryInterceptor(
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if p, ok := peer.FromContext(ctx); ok {
				if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.VerifiedChains) > 0 {
					clientSerial.Store(info.State.VerifiedChains[0][0].SerialNumber.String())
				}
			}
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	addr := lis.Addr().String()

	serial := func(name string) string {
		c, err := pki.ReadCertificate(pki.CertFile(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return c.SerialNumber.String()
	}
	var serverSerial atomic.Value // the serial of the last server certificate a client saw
	call := func(ctx context.Context) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(ccfg)))
		if err != nil {
			return err
		}
		defer conn.Close()
		var p peer.Peer
		if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
			return err
		}
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
			serverSerial.Store(info.State.PeerCertificates[0].SerialNumber.String())
		}
		return nil
	}

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	loadCtx, stopLoad := context.WithCancel(ctx)
	var calls, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
				err := call(cctx)
				ccancel()
				calls.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	testutil.Eventually(t, 5*time.Second, "calls under load", func() bool { return calls.Load() > 20 })
	oldServer, oldClient := serial("server"), serial("client")
	if s, _ := serverSerial.Load().(string); s != oldServer {
		t.Fatalf("served %q before the renewal, want %q", s, oldServer)
	}
	issue() // replaced in place (atomic renames), as cert-manager does
	newServer, newClient := serial("server"), serial("client")
	if newServer == oldServer || newClient == oldClient {
		t.Fatal("Issue kept the serials")
	}
	testutil.Eventually(t, 10*time.Second, "the new certificates in use on both sides", func() bool {
		s, _ := serverSerial.Load().(string)
		c, _ := clientSerial.Load().(string)
		return s == newServer && c == newClient
	})
	stopLoad()
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d calls failed across the renewal; first: %v", n, calls.Load(), firstErr.Load())
	}
	t.Logf("%d calls, none failed", calls.Load())
}

// TestMutualServerRefusesOtherCAs: a client certificate of another CA is
// refused in the handshake, as is none.
func TestMutualServerRefusesOtherCAs(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.EnsureCA(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.EnsureCA(filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Issue("server", []string{"127.0.0.1"}, pki.Server); err != nil {
		t.Fatal(err)
	}
	if err := other.Issue("client", []string{"spiffe://test/client"}, pki.Client); err != nil {
		t.Fatal(err)
	}
	scfg, stop, err := MutualServerConfig(Files{Cert: pki.CertFile(ca.Dir, "server"), Key: pki.KeyFile(ca.Dir, "server"), CA: ca.CertFile()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	roots, err := CertPool(ca.CertFile())
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := tls.LoadX509KeyPair(pki.CertFile(other.Dir, "client"), pki.KeyFile(other.Dir, "client"))
	if err != nil {
		t.Fatal(err)
	}
	for name, certs := range map[string][]tls.Certificate{"none": nil, "another CA's": {stranger}} {
		c, err := tls.Dial("tcp", lis.Addr().String(), &tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12})
		if err == nil {
			// TLS 1.3: the client learns of the refusal on its first read.
			_, err = c.Read(make([]byte, 1))
			c.Close()
		}
		if err == nil {
			t.Errorf("client certificate %s: accepted", name)
		}
	}
}
