package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/load"
	"github.com/cellpay/cellpay/internal/pki"
	"github.com/cellpay/cellpay/internal/platform"
	"github.com/cellpay/cellpay/internal/testutil"
)

// TestCertificatesRotateUnderLoad replaces every component's certificate
// and key files in place while partners' traffic runs: no transaction
// fails, no process restarts, and within the reload period every server
// presents its new certificate on a new connection.
func TestCertificatesRotateUnderLoad(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	servers := map[string]string{platform.GTR: env.gtrAddr, platform.IssuerSim: env.p.Config().IssuerAddr}
	for _, c := range env.cells {
		servers[c.ID] = cellAddr(t, c.ID)
	}
	pids := map[string]int{}
	for name := range servers {
		pids[name] = env.p.Process(name).Pid()
	}
	certName := func(server string) string {
		switch server {
		case platform.GTR:
			return "gtr"
		case platform.IssuerSim:
			return platform.IssuerCertName
		}
		return server
	}
	before := map[string]*big.Int{}
	for name, addr := range servers {
		before[name] = servedSerial(t, addr)
		if file := fileSerial(t, env.p.TLSFiles(certName(name)).Cert); file.Cmp(before[name]) != 0 {
			t.Fatalf("%s serves serial %x, its file holds %x", name, before[name], file)
		}
	}

	var failed atomic.Int64
	done := make(chan load.Report, 1)
	go func() {
		rep, err := load.Run(ctx, load.Config{
			Target: load.TargetGTR, Addr: env.gtrAddr, Mode: load.ModeOpen, Rate: 30, Concurrency: 64,
			Count: 750, Duration: 25 * time.Second, Seed: 11, RunID: runID + "-certrot",
			DialOptions: env.gtrOpts,
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
	if err := env.p.RotateCertificates(); err != nil {
		t.Fatal(err)
	}
	for name, addr := range servers {
		want := fileSerial(t, env.p.TLSFiles(certName(name)).Cert)
		if want.Cmp(before[name]) == 0 {
			t.Fatalf("%s: the rotated file has the old serial", name)
		}
		testutil.Eventually(t, 2*pki.DefaultRefresh+5*time.Second, name+" serves its new certificate", func() bool {
			return servedSerial(t, addr).Cmp(want) == 0
		})
	}
	rep := <-done
	if failed.Load() != 0 || rep.Completed < 500 {
		t.Fatalf("rotation under load: %d failed, %d completed, errors %v", failed.Load(), rep.Completed, rep.Errors)
	}
	for name, pid := range pids {
		if now := env.p.Process(name).Pid(); now != pid {
			t.Fatalf("%s restarted (pid %d, then %d)", name, pid, now)
		}
	}
	t.Logf("rotation under load: %d completed, 0 failed, %d servers on new certificates, no restart", rep.Completed, len(servers))
}

// servedSerial is the serial of the certificate addr presents to a new
// TLS connection (with the tools' client certificate, which every internal
// server takes).
func servedSerial(t *testing.T, addr string) *big.Int {
	t.Helper()
	pool, err := pki.CertPool(env.p.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	f := env.p.TLSFiles(platform.OpsCertName)
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS to %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

func fileSerial(t *testing.T, path string) *big.Int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatal(fmt.Errorf("%s: no PEM", path))
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}
