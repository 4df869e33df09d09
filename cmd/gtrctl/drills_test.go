package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/drillreport"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

// drillsAdmin answers ListDrills and GetDrill with the records it holds.
type drillsAdmin struct {
	fakeAdmin
	drills []*adminproto.DrillRecord
	limit  int32
}

func (f *drillsAdmin) ListDrills(ctx context.Context, req *adminproto.ListDrillsRequest) (*adminproto.ListDrillsResponse, error) {
	if err := f.auth(ctx); err != nil {
		return nil, err
	}
	f.limit = req.GetLimit()
	return &adminproto.ListDrillsResponse{Drills: f.drills}, nil
}

func (f *drillsAdmin) GetDrill(ctx context.Context, req *adminproto.GetDrillRequest) (*adminproto.DrillRecord, error) {
	if err := f.auth(ctx); err != nil {
		return nil, err
	}
	for _, d := range f.drills {
		if drillreport.ID(d.GetReport().GetReport()) == req.GetId() {
			return d, nil
		}
	}
	return nil, status.Error(codes.NotFound, "none")
}

// opsCert is an operators' certificate of dir's CA (made there if need be).
func opsCert(t *testing.T, dir string) tls.Certificate {
	t.Helper()
	ca, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.EnsureCert("ops", []string{hop.Ops}, pki.Client); err != nil {
		t.Fatal(err)
	}
	c, err := tlsconf.LoadKeyPair(pki.CertFile(dir, "ops"), pki.KeyFile(dir, "ops"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func drillRecord(t *testing.T, start time.Time, passed bool, cert tls.Certificate) *adminproto.DrillRecord {
	t.Helper()
	sum := drillreport.Summary{Start: start, End: start.Add(70 * time.Second), Passed: passed, Sent: 3500, Failed: 0,
		Cuts: []drillreport.Cut{{Target: "primary access point 127.0.0.1:7070 (SIGSTOP)", RTO: 1.75, Longest: 2.5}},
		RPO:  &drillreport.RPO{}}
	if !passed {
		sum.PartnerErrors = map[string]int{"DEADLINE_EXCEEDED": 2}
		sum.RPO.AnswersLost = 1
	}
	b, err := drillreport.Document{Summary: sum, Report: json.RawMessage(`{"steps":[{"target":"primary"}]}`)}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	s, err := drillreport.Sign(b, cert)
	if err != nil {
		t.Fatal(err)
	}
	return &adminproto.DrillRecord{Summary: &adminproto.DrillSummary{Id: drillreport.ID(b)},
		Report:     &adminproto.SignedDrillReport{Report: s.Report, Signature: s.Signature, Certificate: s.Certificate},
		RecordedAt: timestamppb.New(start.Add(2 * time.Minute)), RecordedBy: "otto", Replica: "gtr-1"}
}

// TestDrills: gtrctl drills verifies each report against --ca itself and
// prints what its verified bytes say (time, cuts and RTO, verdict,
// partner errors, RPO, signer, "signature: verified"); a report the GTR
// serves changed, or signed under another CA, is shown NOT VERIFIED and
// the command fails. drills show prints one whole; -o json is JSON.
func TestDrills(t *testing.T) {
	provisionTestCA(t)
	ops := opsCert(t, testCA.dir)
	start := time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC)
	good, failed := drillRecord(t, start, true, ops), drillRecord(t, start.Add(-time.Hour), false, ops)
	f := &drillsAdmin{drills: []*adminproto.DrillRecord{good, failed}}
	addr := serveWith(t, f)
	code, out, errs := gtrctl(t, "drills", "--token", "tok", "--addr", addr, "--limit", "5")
	if code != 0 || errs != "" {
		t.Fatalf("drills: %d %s", code, errs)
	}
	for _, want := range []string{
		"drill " + drillreport.ID(good.Report.Report) + "  PASS  ", "FAIL",
		"cut primary access point 127.0.0.1:7070 (SIGSTOP)", "ended 1.75s after it", "took 2.50s",
		"partner errors: none", "partner errors: DEADLINE_EXCEEDED=2",
		"RPO: 0 answers lost", "RPO: 1 answers lost",
		"signer: " + hop.Ops, "signature: verified", "kept 2026-12-07T",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("drills lacks %q:\n%s", want, out)
		}
	}
	if f.limit != 5 {
		t.Errorf("limit sent %d", f.limit)
	}

	code, out, _ = gtrctl(t, "drills", "show", drillreport.ID(good.Report.Report), "--token", "tok", "--addr", addr)
	if code != 0 || !strings.Contains(out, "signature: verified") || !strings.Contains(out, `"target": "primary"`) {
		t.Fatalf("drills show: %d\n%s", code, out)
	}
	code, out, _ = gtrctl(t, "drills", "show", drillreport.ID(good.Report.Report), "--token", "tok", "--addr", addr, "-o", "json")
	var one struct {
		ID       string
		Verified bool
		Signer   string
		Summary  drillreport.Summary
		Report   json.RawMessage
	}
	if err := json.Unmarshal([]byte(out), &one); code != 0 || err != nil || !one.Verified || one.Signer != hop.Ops || !one.Summary.Passed || len(one.Report) == 0 {
		t.Fatalf("drills show -o json: %d %v\n%s", code, err, out)
	}

	// The GTR's copy changed, or a report of another CA: not verified,
	// and said so; the command fails.
	changed := drillRecord(t, start.Add(time.Hour), true, ops)
	changed.Report.Report = []byte(strings.Replace(string(changed.Report.Report), `"passed":true`, `"passed":false`, 1))
	foreign := drillRecord(t, start.Add(2*time.Hour), true, opsCert(t, t.TempDir()))
	f.drills = []*adminproto.DrillRecord{foreign, changed, good}
	code, out, errs = gtrctl(t, "drills", "--token", "tok", "--addr", addr)
	if code != 1 || strings.Count(out, "signature: NOT VERIFIED") != 2 || !strings.Contains(out, "certsig: certificate not trusted") ||
		!strings.Contains(out, "signature does not verify") || strings.Count(out, "signature: verified") != 1 || !strings.Contains(errs, "2 of 3") {
		t.Fatalf("drills with bad reports: %d\n%s%s", code, out, errs)
	}
	code, out, _ = gtrctl(t, "drills", "--token", "tok", "--addr", addr, "-o", "json")
	var list struct {
		Drills []struct {
			Verified bool
			Error    string
		}
	}
	if err := json.Unmarshal([]byte(out), &list); code != 1 || err != nil || len(list.Drills) != 3 || list.Drills[0].Verified || !list.Drills[2].Verified {
		t.Fatalf("drills -o json: %d %v\n%s", code, err, out)
	}
}
