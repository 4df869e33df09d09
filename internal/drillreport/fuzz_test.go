package drillreport_test

import (
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/drillreport"
)

// FuzzDecodeDocument: a report's bytes come from outside (a drill's
// caller, the bucket): the decoder never panics, and what it accepts is
// of its kind, bounded, and encodes again to a document it accepts.
func FuzzDecodeDocument(f *testing.F) {
	f.Add([]byte(`{"kind":"cellpay.drill.report/v1","summary":{"start":"2026-12-07T21:00:00Z","cuts":[{"target":"primary","rto_s":1.5}],"passed":true,"partner_errors":{"UNAVAILABLE":2},"rpo":{"answers_lost":0}},"report":{"steps":[]}}`))
	f.Add([]byte(`{"kind":"cellpay.drill.report/v1","summary":{"start":"2026-12-07T21:00:00Z"}} {}`))
	f.Add([]byte(`{"kind":"other"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := drillreport.DecodeDocument(b)
		if err != nil {
			return
		}
		if d.Kind != drillreport.Kind || len(d.Summary.Cuts) > 64 || d.Summary.Start.IsZero() {
			t.Fatalf("accepted %+v", d)
		}
		again, err := d.Marshal()
		if err != nil {
			return // re-encoded, a document may grow past its bound
		}
		if _, err := drillreport.DecodeDocument(again); err != nil {
			t.Fatalf("re-encoded document refused: %v\n%s", err, again)
		}
	})
}

// FuzzVerify: a signed report's three parts come from outside: Verify
// never panics, and accepts nothing it was not given signed (the fuzzer
// holds no key of the CA).
func FuzzVerify(f *testing.F) {
	p := newPKI(f)
	b := document(f)
	s, err := drillreport.Sign(b, p.ops)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(s.Report, s.Signature, s.Certificate)
	f.Add(s.Report, []byte{0x30, 0}, s.Certificate)
	f.Add([]byte("{}"), s.Signature, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Fuzz(func(t *testing.T, report, sig, cert []byte) {
		v, err := drillreport.Verify(drillreport.Signed{Report: report, Signature: sig, Certificate: cert}, p.roots, time.Time{})
		if err == nil && string(report) != string(b) {
			t.Fatalf("verified bytes nobody signed: %q (%+v)", report, v)
		}
	})
}
