package main

import (
	"os"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// testCA is one loopback CA and server certificate for every fake admin
// server of this package's tests: the admin API speaks TLS only.
var testCA struct {
	once          sync.Once
	cert, key, ca string
	err           error
}

// tlsServer is a gRPC server with the test certificate; gtrctl (the test
// helper) trusts its CA.
func tlsServer(t *testing.T) *grpc.Server {
	t.Helper()
	testCA.once.Do(func() {
		dir, err := os.MkdirTemp("", "gtrctl-test-pki-")
		if err != nil {
			testCA.err = err
			return
		}
		testCA.cert, testCA.key, testCA.ca, testCA.err = pki.Loopback(dir, "admin")
	})
	if testCA.err != nil {
		t.Fatal(testCA.err)
	}
	cfg, stop, err := tlsconf.ServerConfig(testCA.cert, testCA.key, 0)
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

func (f *fakeAdmin) listed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}
