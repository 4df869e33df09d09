package console

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cellpay/cellpay/internal/dev/pki"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSplit: on one listener, a gRPC client reaches the gRPC server (with
// its TLS state), a browser-like HTTP/1.1 client the web server, a client
// offering no ALPN the web server too, and plaintext neither.
func TestSplit(t *testing.T) {
	cert, key, caFile, err := pki.Loopback(filepath.Join(t.TempDir(), "pki"), "gtr")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcL, webL := Split(l, &tls.Config{Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12})
	gs := grpc.NewServer(grpc.Creds(Handshaken()))
	healthpb.RegisterHealthServer(gs, grpchealth.NewServer())
	go gs.Serve(grpcL)
	web := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			http.Error(w, "no TLS", 500)
			return
		}
		io.WriteString(w, "web "+r.Proto)
	}), ReadHeaderTimeout: time.Second}
	go web.Serve(webL)
	defer func() {
		gs.Stop()
		web.Close()
	}()
	addr := l.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC through the split: %v, %v", r, err)
	}

	for _, protos := range [][]string{{"h2", "http/1.1"}, nil} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, NextProtos: protos}, ForceAttemptHTTP2: len(protos) > 0}
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + addr + "/")
		if err != nil {
			t.Fatalf("HTTPS offering %v: %v", protos, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if string(b) != "web HTTP/1.1" {
			t.Fatalf("HTTPS offering %v: %q, want the web server over HTTP/1.1", protos, b)
		}
	}

	plain, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	short, scancel := context.WithTimeout(ctx, time.Second)
	defer scancel()
	if _, err := healthpb.NewHealthClient(plain).Check(short, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("plaintext gRPC answered")
	}
}

// TestHandshakenRefusesPlaintext: a gRPC server with Handshaken on a plain
// listener serves nobody.
func TestHandshakenRefusesPlaintext(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, _, err := Handshaken().ServerHandshake(a); err == nil {
		t.Fatal("a plaintext connection passed")
	}
}
