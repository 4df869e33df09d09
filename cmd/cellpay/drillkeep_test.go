package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/drill"
	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/drillreport"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// TestKeepReport: the drill signs its report with the data folder's
// operators' certificate and writes it to -report, where it verifies
// against the folder's CA; a report that cannot be kept (no GTR
// listening) is said on stderr and fails the drill; -keep=false keeps
// nothing and says nothing.
func TestKeepReport(t *testing.T) {
	data := t.TempDir()
	ca, err := pki.EnsureCA(filepath.Join(data, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.EnsureCert(platform.OpsCertName, []string{hop.Ops}, pki.Client); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(data, "operators"), 0o700)
	os.WriteFile(filepath.Join(data, "operators", "operator.token"), []byte("cpo_otto_x\n"), 0o600)
	start := time.Now().Add(-time.Minute)
	rep := drill.Report{Start: start, End: time.Now(), Errors: map[string]int{"UNAVAILABLE": 0},
		Steps: []drill.Step{{Target: "primary access point", DisturbedUntil: 1.5, LongestDuring: 2}}}

	o, err := parseDrill([]string{"-data", data, "-keep=false", "-report", filepath.Join(data, "signed.json")}, io.Discard)
	if err != nil || o.keep || o.tokenFile != filepath.Join(data, "operators", "operator.token") {
		t.Fatalf("parse: %+v, %v", o, err)
	}
	var stdout, stderr bytes.Buffer
	if !keepReport(context.Background(), o, platform.RunInfo{}, rep, &stdout, &stderr) || stdout.Len()+stderr.Len() != 0 {
		t.Fatalf("-keep=false: %q %q", stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(data, "signed.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s drillreport.Signed
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	roots, err := tlsconf.CertPool(ca.CertFile())
	if err != nil {
		t.Fatal(err)
	}
	v, err := drillreport.Verify(s, roots, time.Now())
	if err != nil {
		t.Fatalf("the signed report does not verify: %v", err)
	}
	if sum := v.Document.Summary; !sum.Passed || len(sum.Cuts) != 1 || sum.Cuts[0].RTO != 1.5 || sum.PartnerErrors != nil || sum.RPO != nil || len(v.Document.Report) == 0 {
		t.Fatalf("summary %+v", sum)
	}

	// Nothing listens there: the report is not kept, and the drill says so.
	o.keep = true
	stdout.Reset()
	if keepReport(context.Background(), o, platform.RunInfo{AdminAddr: "127.0.0.1:1"}, rep, &stdout, &stderr) ||
		!strings.Contains(stderr.String(), "the report was not kept") || strings.Contains(stdout.String(), "report kept") {
		t.Fatalf("with no GTR: stdout %q stderr %q", stdout.String(), stderr.String())
	}
}
