// Package hoptest sets up one of the platform's internal hops (GTR→cell,
// cell→issuer) for the benchmarks that measure what mutual TLS costs on
// it: a CA and its certificates, and each variant's server and dial
// options, plaintext or as the platform runs the hop (package hop).
package hoptest

import (
	"strconv"
	"testing"

	"google.golang.org/grpc"

	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// Cert is a certificate to issue: its file name, its hosts and URI SANs
// (pki.CA.Issue), and what it may be used for.
type Cert struct {
	Name  string
	Hosts []string
	Usage pki.Usage
}

// PKI issues certs from a new CA in a temporary directory and returns the
// files of the certificate named name, with the CA's.
func PKI(tb testing.TB, certs ...Cert) func(name string) tlsconf.Files {
	tb.Helper()
	dir := tb.TempDir()
	ca, err := pki.EnsureCA(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, c := range certs {
		if err := ca.Issue(c.Name, c.Hosts, c.Usage); err != nil {
			tb.Fatal(err)
		}
	}
	return func(name string) tlsconf.Files {
		return tlsconf.Files{Cert: pki.CertFile(dir, name), Key: pki.KeyFile(dir, name), CA: ca.CertFile()}
	}
}

// Variants runs bench as two sub-benchmarks, mtls=false and mtls=true,
// with the options of each (Options).
func Variants(b *testing.B, server tlsconf.Files, p hop.Policy, client tlsconf.Files,
	bench func(b *testing.B, srvOpts []grpc.ServerOption, dialOpts []grpc.DialOption)) {
	for _, mtls := range []bool{false, true} {
		b.Run("mtls="+strconv.FormatBool(mtls), func(b *testing.B) {
			srvOpts, dialOpts := Options(b, mtls, server, p, client)
			bench(b, srvOpts, dialOpts)
		})
	}
}

// Options are a hop's server and dial options: with mtls, mutual TLS with
// server's certificate and policy p on the serving side and client's
// certificate on the dialing side, as hop.ServerOptions and
// hop.DialOption give them to the platform's processes; without, none
// for the server and plaintext for the client. The certificates'
// reloading stops when tb's test ends.
func Options(tb testing.TB, mtls bool, server tlsconf.Files, p hop.Policy, client tlsconf.Files) ([]grpc.ServerOption, []grpc.DialOption) {
	tb.Helper()
	if !mtls {
		server, client = tlsconf.Files{}, tlsconf.Files{}
	}
	srvOpts, stop, err := hop.ServerOptions(server, p)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	want := hop.Anyone
	if mtls {
		cert, err := pki.ReadCertificate(server.Cert)
		if err != nil {
			tb.Fatal(err)
		}
		want = hop.Only(hop.CertIdentity(cert)) // the server's, pinned as the platform pins it
	}
	dial, stopDial, err := hop.DialOption(client, want)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stopDial)
	return srvOpts, []grpc.DialOption{dial}
}
