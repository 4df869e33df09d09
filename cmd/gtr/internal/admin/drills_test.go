package admin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/cmd/gtr/internal/audit"
	"github.com/cellpay/cellpay/internal/certsig"
	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/internal/drillreport"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/operators"
	"github.com/cellpay/cellpay/internal/partnerstate"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

// drillPKI is a development CA's roots with its operators' and a cell's
// certificates.
func drillPKI(t *testing.T) (roots *x509.CertPool, ops, cell tls.Certificate) {
	t.Helper()
	ca, err := pki.EnsureCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	load := func(name string, hosts []string) tls.Certificate {
		if err := ca.Issue(name, hosts, pki.Client); err != nil {
			t.Fatal(err)
		}
		c, err := tlsconf.LoadKeyPair(pki.CertFile(ca.Dir, name), pki.KeyFile(ca.Dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if roots, err = tlsconf.CertPool(ca.CertFile()); err != nil {
		t.Fatal(err)
	}
	return roots, load("ops", []string{hop.Ops}), load("cell-a", []string{hop.Cell("cell-a")})
}

// signedDrill is a drill report that started at start, signed with cert.
func signedDrill(t *testing.T, start time.Time, passed bool, cert tls.Certificate) *adminproto.SignedDrillReport {
	t.Helper()
	b, err := drillreport.Document{Summary: drillreport.Summary{Start: start, End: start.Add(time.Minute), Passed: passed, Sent: 100,
		Cuts: []drillreport.Cut{{Target: "primary access point", RTO: 1.25, Longest: 2}}, RPO: &drillreport.RPO{},
		PartnerErrors: map[string]int{"UNAVAILABLE": 1}}}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	s, err := drillreport.Sign(b, cert)
	if err != nil {
		t.Fatal(err)
	}
	return &adminproto.SignedDrillReport{Report: s.Report, Signature: s.Signature, Certificate: s.Certificate}
}

// TestDrills runs RecordDrill, ListDrills and GetDrill over loopback gRPC
// with the drills' bucket and the audit log on a real NATS server: an
// operator records (twice: one report kept), a viewer may not; a report
// signed by a cell, changed after signing or over its bound is refused
// naming what failed; a viewer lists (newest first, bounded) and gets
// one whole; every recording, and every refusal, is audited.
func TestDrills(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ix, toks := threeOperators(t)
	ns := natstest.Start(t)
	al, err := audit.Open(audit.Config{NATSURL: ns.URL(), Replica: "test", File: filepath.Join(t.TempDir(), "spool.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	roots, ops, cell := drillPKI(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	fx := startServer(t, ix, al, quiet, partnerstate.Config{}, nil, func(c *Config) {
		c.Drills, c.DrillRoots = &DrillBucket{URL: ns.URL(), Name: "test"}, roots
	})
	viewer, oper := dialAs(t, fx.addr, toks["vera"]), dialAs(t, fx.addr, toks["otto"])
	begin := time.Now().Add(-time.Second)

	older := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	first := signedDrill(t, older, true, ops)
	if _, err := viewer.RecordDrill(ctx, &adminproto.RecordDrillRequest{Report: first}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("viewer RecordDrill: %v", err)
	}
	rec, err := oper.RecordDrill(ctx, &adminproto.RecordDrillRequest{Report: first})
	if err != nil || !rec.GetCreated() || rec.GetId() != drillreport.ID(first.GetReport()) || rec.GetSummary().GetSigner() != hop.Ops {
		t.Fatalf("RecordDrill: %v, %v", rec, err)
	}
	again, err := oper.RecordDrill(ctx, &adminproto.RecordDrillRequest{Report: first})
	if err != nil || again.GetCreated() || again.GetId() != rec.GetId() {
		t.Fatalf("RecordDrill again: %v, %v (want the same ID, not created)", again, err)
	}
	newer := signedDrill(t, older.Add(24*time.Hour), false, ops)
	if _, err := oper.RecordDrill(ctx, &adminproto.RecordDrillRequest{Report: newer}); err != nil {
		t.Fatal(err)
	}

	tampered := signedDrill(t, older, true, ops)
	tampered.Report = []byte(strings.Replace(string(tampered.Report), `"passed":true`, `"passed":false`, 1))
	for _, tc := range []struct {
		name string
		r    *adminproto.SignedDrillReport
		code codes.Code
		what string
	}{
		{"by a cell", forge(t, signedDrill(t, older, true, ops).GetReport(), cell), codes.PermissionDenied, "report.certificate"},
		{"tampered", tampered, codes.InvalidArgument, "report.signature"},
		{"too large", &adminproto.SignedDrillReport{Report: make([]byte, drillreport.MaxReport+1), Signature: first.Signature, Certificate: first.Certificate}, codes.InvalidArgument, "report.report"},
		{"no certificate", &adminproto.SignedDrillReport{Report: first.Report, Signature: first.Signature}, codes.InvalidArgument, "report.certificate"},
	} {
		_, err := oper.RecordDrill(ctx, &adminproto.RecordDrillRequest{Report: tc.r})
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.what) {
			t.Errorf("%s: %v, want %v naming %s", tc.name, err, tc.code, tc.what)
		}
	}

	list, err := viewer.ListDrills(ctx, &adminproto.ListDrillsRequest{})
	if err != nil || len(list.GetDrills()) != 2 {
		t.Fatalf("ListDrills: %v, %v", list, err)
	}
	d0, d1 := list.GetDrills()[0], list.GetDrills()[1]
	if d0.GetSummary().GetId() != drillreport.ID(newer.GetReport()) || d0.GetSummary().GetPassed() || d1.GetSummary().GetId() != rec.GetId() {
		t.Fatalf("not newest first: %v, %v", d0.GetSummary(), d1.GetSummary())
	}
	if s := d1.GetSummary(); !s.GetPassed() || len(s.GetCuts()) != 1 || s.GetCuts()[0].GetRtoSeconds() != 1.25 || !s.GetChecked() ||
		s.GetPartnerErrors()["UNAVAILABLE"] != 1 || d1.GetRecordedBy() != "otto" || d1.GetReplica() != "test" || d1.GetRecordedAt() == nil {
		t.Fatalf("listed %v", d1)
	}
	if l, err := viewer.ListDrills(ctx, &adminproto.ListDrillsRequest{Limit: 1}); err != nil || len(l.GetDrills()) != 1 || l.GetDrills()[0].GetSummary().GetId() != d0.GetSummary().GetId() {
		t.Fatalf("limit 1: %v, %v", l, err)
	}
	if _, err := viewer.ListDrills(ctx, &adminproto.ListDrillsRequest{Limit: 101}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("limit 101: %v", err)
	}
	got, err := viewer.GetDrill(ctx, &adminproto.GetDrillRequest{Id: rec.GetId()})
	if err != nil || string(got.GetReport().GetReport()) != string(first.GetReport()) || string(got.GetReport().GetSignature()) != string(first.GetSignature()) {
		t.Fatalf("GetDrill: %v, %v", got, err)
	}
	if _, err := viewer.GetDrill(ctx, &adminproto.GetDrillRequest{Id: "0123456789abcdef"}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetDrill of none: %v", err)
	}
	if _, err := viewer.GetDrill(ctx, &adminproto.GetDrillRequest{Id: "../x"}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "id") {
		t.Fatalf("GetDrill of a bad ID: %v", err)
	}

	// The bucket is bounded: its size and each value's.
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, DrillBucketName)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config; c.MaxBytes != DrillBucketMaxBytes || c.MaxMsgSize != maxKeptDrill {
		t.Fatalf("bucket bounds: max bytes %d, max value %d", c.MaxBytes, c.MaxMsgSize)
	}

	// The audit: each recording and refusal, the report by its ID and
	// sizes, never its bytes.
	resp, err := viewer.ListAudit(ctx, &adminproto.ListAuditRequest{Since: timestamppb.New(begin)})
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	for _, r := range resp.GetRecords() {
		if r.GetMethod() != "RecordDrill" {
			continue
		}
		calls = append(calls, r.GetActor()+" "+r.GetOutcome())
		if strings.Contains(r.GetRequest(), "signature\":\"") || (r.GetActor() == "otto" && !strings.Contains(r.GetRequest(), `"report_bytes"`)) {
			t.Errorf("request recorded: %s", r.GetRequest())
		}
	}
	want := "vera PermissionDenied; otto OK; otto OK; otto OK; otto PermissionDenied; otto InvalidArgument; otto InvalidArgument; otto InvalidArgument"
	if strings.Join(calls, "; ") != want {
		t.Fatalf("audit:\n got %s\nwant %s", strings.Join(calls, "; "), want)
	}
	for _, r := range resp.GetRecords() {
		if r.GetMethod() == "RecordDrill" && r.GetOutcome() == "OK" && !strings.Contains(r.GetAfter(), rec.GetId()) && !strings.Contains(r.GetAfter(), d0.GetSummary().GetId()) {
			t.Errorf("RecordDrill's after names no report: %s", r.GetAfter())
		}
	}
	if policy["RecordDrill"] != operators.RoleOperator || policy["ListDrills"] != operators.RoleViewer || policy["GetDrill"] != operators.RoleViewer {
		t.Fatal("the drills' roles")
	}
}

// forge signs report with cert whatever its identity, as a cell that
// tried to pass for the operators would.
func forge(t *testing.T, report []byte, cert tls.Certificate) *adminproto.SignedDrillReport {
	t.Helper()
	key, err := certsig.Signer(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := certsig.Sign(key, drillreport.Digest(report))
	if err != nil {
		t.Fatal(err)
	}
	return &adminproto.SignedDrillReport{Report: report, Signature: sig, Certificate: certsig.EncodePEM(cert.Certificate)}
}

// TestDrillsWithoutNATS: a GTR that keeps no drills answers UNAVAILABLE.
func TestDrillsWithoutNATS(t *testing.T) {
	s := &Server{cfg: Config{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	ctx := context.Background()
	if _, err := s.RecordDrill(ctx, &adminproto.RecordDrillRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("RecordDrill: %v", err)
	}
	if _, err := s.ListDrills(ctx, &adminproto.ListDrillsRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("ListDrills: %v", err)
	}
	if _, err := s.GetDrill(ctx, &adminproto.GetDrillRequest{Id: "0123456789abcdef"}); status.Code(err) != codes.Unavailable {
		t.Errorf("GetDrill: %v", err)
	}
}
