package drillreport_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/certsig"
	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/drillreport"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// testPKI is a CA with an operators' and a cell's certificate, and a
// second CA with an operators' certificate of its own.
type testPKI struct {
	roots                *x509.CertPool
	ops, cell, opsServer tls.Certificate
	otherOps             tls.Certificate
}

func newPKI(t testing.TB) testPKI {
	t.Helper()
	issue := func(ca *pki.CA, name string, hosts []string, usage pki.Usage) tls.Certificate {
		if err := ca.Issue(name, hosts, usage); err != nil {
			t.Fatal(err)
		}
		c, err := tlsconf.LoadKeyPair(pki.CertFile(ca.Dir, name), pki.KeyFile(ca.Dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca, err := pki.EnsureCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.EnsureCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	roots, err := tlsconf.CertPool(ca.CertFile())
	if err != nil {
		t.Fatal(err)
	}
	return testPKI{roots: roots,
		ops:       issue(ca, "ops", []string{hop.Ops}, pki.Client),
		cell:      issue(ca, "cell-a", []string{hop.Cell("cell-a")}, pki.Client|pki.Server),
		opsServer: issue(ca, "ops-server", []string{hop.Ops}, pki.Server),
		otherOps:  issue(other, "ops", []string{hop.Ops}, pki.Client),
	}
}

func document(t testing.TB) []byte {
	t.Helper()
	start := time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC)
	b, err := drillreport.Document{Summary: drillreport.Summary{Start: start, End: start.Add(time.Minute), Passed: true, Sent: 3000,
		Cuts: []drillreport.Cut{{Target: "primary access point", RTO: 1.5, Longest: 2}}, RPO: &drillreport.RPO{}},
		Report: []byte(`{"steps":[]}`)}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// signAs signs b with cert, whatever its identity (Sign refuses any but
// the operators'): a forger's signature.
func signAs(t *testing.T, b []byte, cert tls.Certificate) drillreport.Signed {
	t.Helper()
	key, err := certsig.Signer(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := certsig.Sign(key, drillreport.Digest(b))
	if err != nil {
		t.Fatal(err)
	}
	return drillreport.Signed{Report: b, Signature: sig, Certificate: certsig.EncodePEM(cert.Certificate)}
}

// TestVerify: a report the operators' certificate signed verifies and
// reads back; one signed by a cell's certificate, by an operators'
// certificate of another CA or one not for client authentication, or
// whose bytes were changed after signing, is refused, naming what failed.
func TestVerify(t *testing.T) {
	p := newPKI(t)
	b := document(t)
	s, err := drillreport.Sign(b, p.ops)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{time.Now(), {}} {
		v, err := drillreport.Verify(s, p.roots, at)
		if err != nil {
			t.Fatalf("at %v: %v", at, err)
		}
		if v.ID != drillreport.ID(b) || len(v.ID) != 16 || v.Signer != hop.Ops || !v.Document.Summary.Passed || v.Document.Summary.Cuts[0].RTO != 1.5 {
			t.Fatalf("verified %+v", v)
		}
	}
	if _, err := drillreport.Sign(b, p.cell); err == nil || !strings.Contains(err.Error(), "not the operators'") {
		t.Fatalf("signing with a cell's certificate: %v", err)
	}
	tampered := s
	tampered.Report = []byte(strings.Replace(string(b), `"passed":true`, `"passed":false`, 1))
	if string(tampered.Report) == string(b) {
		t.Fatal("the test's tampering changed nothing")
	}
	badSig := s
	badSig.Signature = append([]byte(nil), s.Signature...)
	badSig.Signature[len(badSig.Signature)-1] ^= 1
	swapped := s
	swapped.Certificate = certsig.EncodePEM(p.otherOps.Certificate) // the right identity, another CA's, not the key that signed
	for _, tc := range []struct {
		name  string
		s     drillreport.Signed
		want  error
		field string
	}{
		{"by a cell", signAs(t, b, p.cell), certsig.ErrIdentity, "certificate"},
		{"by another CA's ops", signAs(t, b, p.otherOps), certsig.ErrChain, "certificate"},
		{"by an ops certificate for servers only", signAs(t, b, p.opsServer), certsig.ErrChain, "certificate"},
		{"tampered", tampered, certsig.ErrSignature, "signature"},
		{"signature changed", badSig, certsig.ErrSignature, "signature"},
		{"certificate swapped", swapped, certsig.ErrChain, "certificate"},
		{"certificate garbage", drillreport.Signed{Report: b, Signature: s.Signature, Certificate: []byte("nope")}, certsig.ErrCertificate, "certificate"},
		{"not a report", signAs(t, []byte(`{"kind":"other"}`), p.ops), drillreport.ErrDocument, "report"},
	} {
		_, err := drillreport.Verify(tc.s, p.roots, time.Now())
		if !errors.Is(err, tc.want) || !strings.HasPrefix(err.Error(), tc.field+": ") {
			t.Errorf("%s: %v, want %v naming %s", tc.name, err, tc.want, tc.field)
		}
	}
}

// TestBounds: each part of a signed report is bounded, and a report over
// its bound is refused naming the field, before any verifying.
func TestBounds(t *testing.T) {
	p := newPKI(t)
	s, err := drillreport.Sign(document(t), p.ops)
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, drillreport.MaxReport+1)
	if _, err := drillreport.Sign(big, p.ops); err == nil {
		t.Fatal("signed a report over its bound")
	}
	for _, tc := range []struct {
		field string
		s     drillreport.Signed
	}{
		{"report", drillreport.Signed{Report: big, Signature: s.Signature, Certificate: s.Certificate}},
		{"report", drillreport.Signed{Signature: s.Signature, Certificate: s.Certificate}},
		{"signature", drillreport.Signed{Report: s.Report, Signature: make([]byte, drillreport.MaxSignature+1), Certificate: s.Certificate}},
		{"certificate", drillreport.Signed{Report: s.Report, Signature: s.Signature, Certificate: make([]byte, drillreport.MaxCertificate+1)}},
	} {
		_, err := drillreport.Verify(tc.s, p.roots, time.Now())
		var fe *drillreport.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: %v", tc.field, err)
		}
	}
	d := drillreport.Document{Summary: drillreport.Summary{Start: time.Now(), Cuts: make([]drillreport.Cut, 65)}}
	b, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drillreport.DecodeDocument(b); !errors.Is(err, drillreport.ErrDocument) {
		t.Fatalf("65 cuts: %v", err)
	}
}
