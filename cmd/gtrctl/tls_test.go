package main

import (
	"os"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// testCA is one loopback CA and server certificate for every fake admin
// server of this package's tests (the admin API speaks TLS only), with
// the GTR's identity, and a cell's certificate of the same CA.
var testCA struct {
	once              sync.Once
	dir, ca           string
	cert, key         string // the GTR's
	cellCert, cellKey string
	err               error
}

func provisionTestCA(t *testing.T) {
	t.Helper()
	testCA.once.Do(func() {
		dir, err := os.MkdirTemp("", "gtrctl-test-pki-")
		if err != nil {
			testCA.err = err
			return
		}
		ca, err := pki.EnsureCA(dir)
		if err != nil {
			testCA.err = err
			return
		}
		hosts := []string{"127.0.0.1", "::1", "localhost"}
		if testCA.err = ca.EnsureCert("admin", append(hosts, hop.GTR), pki.Server); testCA.err != nil {
			return
		}
		testCA.err = ca.EnsureCert("cell", append(hosts, hop.Cell("cell-a")), pki.Server)
		testCA.dir, testCA.ca = dir, ca.CertFile()
		testCA.cert, testCA.key = pki.CertFile(dir, "admin"), pki.KeyFile(dir, "admin")
		testCA.cellCert, testCA.cellKey = pki.CertFile(dir, "cell"), pki.KeyFile(dir, "cell")
	})
	if testCA.err != nil {
		t.Fatal(testCA.err)
	}
}

// tlsServer is a gRPC server with the GTR's test certificate; gtrctl (the
// test helper) trusts its CA.
func tlsServer(t *testing.T) *grpc.Server {
	t.Helper()
	provisionTestCA(t)
	return tlsServerWith(t, testCA.cert, testCA.key)
}

func tlsServerWith(t *testing.T, cert, key string) *grpc.Server {
	t.Helper()
	cfg, stop, err := tlsconf.ServerConfig(cert, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
}

// TestPlaintextAdminRefused: gtrctl does not talk to an admin API without
// TLS (a token would cross the network in the clear).
func TestPlaintextAdminRefused(t *testing.T) {
	f := &fakeAdmin{}
	gs := grpc.NewServer()
	addr := serveOn(t, gs, f)
	if code, _, errs := gtrctl(t, "cells", "--addr", addr, "--token", "tok"); code == 0 || f.listed() != 0 {
		t.Fatalf("gtrctl against a plaintext server: exit %d, %d calls served, %s", code, f.listed(), errs)
	}
}

// TestAdminIdentityPinned: an admin API whose certificate the CA verifies
// for the host but which is not the GTR's (a cell's) is refused at the
// handshake, so the operator's token never reaches it; --server-identity
// "" accepts it.
func TestAdminIdentityPinned(t *testing.T) {
	provisionTestCA(t)
	f := &fakeAdmin{}
	addr := serveOn(t, tlsServerWith(t, testCA.cellCert, testCA.cellKey), f)
	code, _, errs := gtrctl(t, "cells", "--addr", addr, "--token", "tok")
	if code == 0 || f.listed() != 0 || !strings.Contains(errs, "not the peer dialled") {
		t.Fatalf("gtrctl against a cell's certificate: exit %d, %d calls served, %s", code, f.listed(), errs)
	}
	if code, _, errs := gtrctl(t, "cells", "--addr", addr, "--token", "tok", "--server-identity", ""); code != 0 || f.listed() != 1 {
		t.Fatalf("with --server-identity \"\": exit %d, %d calls served, %s", code, f.listed(), errs)
	}
}

func (f *fakeAdmin) listed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}
