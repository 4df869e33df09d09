package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
)

type approver struct {
	cellpayv1.UnimplementedPaymentsServer
}

func (approver) SubmitTransaction(_ context.Context, req *cellpayv1.SubmitTransactionRequest) (*cellpayv1.Transaction, error) {
	return &cellpayv1.Transaction{TransactionId: req.GetTransactionId(), Status: cellpayv1.TransactionStatus_APPROVED}, nil
}

// serveApprover runs a real gRPC Payments server approving every submit.
func serveApprover(t *testing.T) string {
	t.Helper()
	return serve(t, approver{})
}

// serve runs payments as a real gRPC Payments server on loopback until
// the test ends.
func serve(t *testing.T, payments cellpayv1.PaymentsServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	cellpayv1.RegisterPaymentsServer(srv, payments)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return lis.Addr().String()
}

// runCmd runs the command with a deadline and returns its exit code,
// stdout and stderr.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	errFile, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer errFile.Close()
	var out bytes.Buffer
	codeCh := make(chan int, 1)
	go func() { codeCh <- run(args, &out, errFile) }()
	var code int
	select {
	case code = <-codeCh:
	case <-time.After(20 * time.Second):
		t.Fatalf("loadgen %v did not finish", args)
	}
	stderr, _ := os.ReadFile(errFile.Name())
	return code, out.String(), string(stderr)
}

func TestJSONReport(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	addr := serveApprover(t)
	code, out, stderr := runCmd(t, "-plaintext", "-addr", addr, "-n", "300", "-c", "4", "-json", "-progress")
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr)
	}
	var rep load.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("stdout is not a JSON report: %v\n%s", err, out)
	}
	if rep.Completed != 300 || rep.Statuses["APPROVED"] != 300 || rep.Target != "gtr" || rep.Mode != "closed" {
		t.Errorf("report %+v", rep)
	}
	if !strings.Contains(stderr, "requests") {
		t.Errorf("-progress drew no bar on stderr: %q", stderr)
	}
}

func TestTableReport(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	addr := serveApprover(t)
	// -c 50: as many outstanding requests allowed as are sent, so that
	// none is dropped however slowly a busy machine answers.
	code, out, stderr := runCmd(t, "-plaintext", "-addr", addr, "-mode", "open", "-rate", "500", "-n", "50", "-c", "50")
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr)
	}
	t.Logf("table:\n%s", out)
	for _, want := range []string{"completed", "APPROVED 50", "latency ms", "dropped", "open loop"} {
		if !strings.Contains(out, want) {
			t.Errorf("table has no %q:\n%s", want, out)
		}
	}
	if stderr != "" {
		t.Errorf("stderr not a terminal and no -progress, yet: %q", stderr)
	}
}

// TestBenchReport: -bench prints the report as BENCH lines for benchrun,
// and nothing else on stdout.
func TestBenchReport(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	addr := serveApprover(t)
	tests := []struct {
		name string
		args []string
		want []string // line prefixes, in order
	}{
		{"closed loop", []string{"-n", "120", "-c", "4"},
			[]string{"BENCH tx 120", "BENCH throughput ", "BENCH p50 ", "BENCH p90 ", "BENCH p99 ", "BENCH max ", "BENCH errors 0"}},
		// -c 50: nothing can be dropped, however slowly a busy machine
		// answers (16 outstanding, the default, were reached on CI).
		{"open loop", []string{"-mode", "open", "-rate", "500", "-n", "50", "-c", "50"},
			[]string{"BENCH tx 50", "BENCH throughput ", "BENCH p50 ", "BENCH p90 ", "BENCH p99 ", "BENCH max ", "BENCH errors 0", "BENCH dropped 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, stderr := runCmd(t, append([]string{"-plaintext", "-addr", addr, "-bench"}, tt.args...)...)
			if code != 0 {
				t.Fatalf("exit %d, stderr: %s", code, stderr)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), len(tt.want), out)
			}
			for i, line := range lines {
				f := strings.Fields(line)
				if !strings.HasPrefix(line, tt.want[i]) || len(f) < 3 || len(f) > 4 {
					t.Errorf("line %d %q, want BENCH <name> <value> [<unit>] starting %q", i, line, tt.want[i])
					continue
				}
				if _, err := strconv.ParseFloat(f[2], 64); err != nil {
					t.Errorf("line %q: value: %v", line, err)
				}
				if unit := map[string]string{"throughput": "tx/s", "p50": "ms", "p90": "ms", "p99": "ms", "max": "ms"}[f[1]]; unit != "" && (len(f) != 4 || f[3] != unit) {
					t.Errorf("line %q: want unit %s", line, unit)
				}
			}
		})
	}
}

func TestExitCodes(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := lis.Addr().String()
	lis.Close()
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"help", []string{"-h"}, 0},
		{"unknown flag", []string{"-bogus"}, 2},
		{"non-loopback", []string{"-plaintext", "-addr", "192.0.2.1:7070"}, 2},
		{"count over cap", []string{"-plaintext", "-n", "10000001"}, 2},
		{"duration over cap", []string{"-plaintext", "-d", "2h"}, 2},
		{"rate in closed loop", []string{"-plaintext", "-rate", "10"}, 2},
		{"two report formats", []string{"-plaintext", "-json", "-bench"}, 2},
		{"nothing completed", []string{"-plaintext", "-addr", deadAddr, "-n", "5", "-timeout", "2s"}, 1},
		{"no API keys for the GTR", []string{"-keys", t.TempDir(), "-n", "5"}, 2},
		{"API key folder missing", []string{"-keys", "/nonexistent/cellpay", "-n", "5"}, 2},
		{"cell target without the GTR's certificate", []string{"-target", "cell", "-ca", "/nonexistent/pki/ca.crt", "-n", "5"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code, _, stderr := runCmd(t, tt.args...); code != tt.want {
				t.Errorf("exit %d, want %d; stderr: %s", code, tt.want, stderr)
			}
		})
	}
}

// TestFailoverAnswers: -addr PRIMARY,BACKUP sends through the client's
// failover; -answers writes the checker's format plus the endpoint; the
// JSON report counts answers per access point.
func TestFailoverAnswers(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	primary, backup := serveApprover(t), serveApprover(t)
	answers := t.TempDir() + "/answers.jsonl"
	code, out, stderr := runCmd(t, "-plaintext", "-addr", primary+","+backup, "-split", "50", "-n", "200", "-c", "4", "-json", "-answers", answers)
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr)
	}
	var rep load.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Endpoints[primary]+rep.Endpoints[backup] != 200 || rep.Endpoints[primary] < 50 || rep.Endpoints[backup] < 50 {
		t.Fatalf("endpoints %v", rep.Endpoints)
	}
	f, err := os.Open(answers)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := checker.ReadAnswers(f)
	if err != nil || len(got) != 200 || got[0].PartnerID == "" || got[0].Status != cellpayv1.TransactionStatus_APPROVED {
		t.Fatalf("answers: %d, %v, first %+v", len(got), err, got)
	}
	b, _ := os.ReadFile(answers)
	line, _, _ := strings.Cut(string(b), "\n")
	var raw map[string]any
	if err := json.Unmarshal([]byte(line), &raw); err != nil || (raw["endpoint"] != primary && raw["endpoint"] != backup) {
		t.Fatalf("line %s: no endpoint (%v)", line, err)
	}
	code, out, _ = runCmd(t, "-plaintext", "-addr", primary+","+backup, "-n", "20")
	if code != 0 || !strings.Contains(out, "access points") {
		t.Fatalf("table without access points:\n%s", out)
	}
}

// TestFollowUpsFlag: -followups is a share 0..1, for the gtr target, with
// room in -run-id for a follow-up's suffix; each refusal names the flag.
func TestFollowUpsFlag(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"negative", []string{"-followups", "-0.1"}, "-followups -0.1: want a share 0..1"},
		{"over one", []string{"-followups", "1.5"}, "-followups 1.5: want a share 0..1"},
		{"NaN", []string{"-followups", "NaN"}, "-followups NaN: want a share 0..1"},
		{"infinite", []string{"-followups", "+Inf"}, "-followups +Inf: want a share 0..1"},
		{"not a number", []string{"-followups", "some"}, "-followups"},
		{"cell target", []string{"-target", "cell", "-followups", "0.5"}, "-followups: follow-ups go through the Payments API, the gtr target only"},
		{"run ID too long", []string{"-followups", "0.5", "-n", "1000", "-run-id", strings.Repeat("r", 58)}, "-run-id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCmd(t, append([]string{"-plaintext"}, tt.args...)...)
			if code != 2 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, want 2, and stderr naming %q: %s", code, tt.want, stderr)
			}
		})
	}
	// The longest run ID that -n 1000 leaves room for is accepted.
	o, err := parseFlags([]string{"-plaintext", "-followups", "1", "-n", "1000", "-run-id", strings.Repeat("r", 56)}, io.Discard)
	if err != nil || o.cfg.FollowUps != 1 {
		t.Fatalf("56-character run ID with -n 1000: %v, %+v", err, o)
	}
	if _, err := parseFlags([]string{"-plaintext", "-followups", "0", "-target", "cell"}, io.Discard); err != nil {
		t.Fatalf("-followups 0 with the cell target: %v", err)
	}
}

// TestAccessPointsFlag: -access-points SITE=HOST:PORT,... with
// -home-site sends through the client's failover by site, starting at
// the first of the home site, and the report counts answers by access
// point; each refusal names the flag (or, for what pkg/client or
// load.Run checks, the field).
func TestAccessPointsFlag(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	o, err := parseFlags([]string{"-plaintext", "-access-points", "site-b=127.0.0.1:7270,site-a=127.0.0.1:7070,site-a=127.0.0.1:7170", "-home-site", "site-a"}, io.Discard)
	want := []client.AccessPoint{{Addr: "127.0.0.1:7270", Site: "site-b"}, {Addr: "127.0.0.1:7070", Site: "site-a"}, {Addr: "127.0.0.1:7170", Site: "site-a"}}
	if err != nil || !slices.Equal(o.cfg.AccessPoints, want) || o.cfg.Client.HomeSite != "site-a" || o.cfg.Addr != "" || o.cfg.Endpoints != nil {
		t.Fatalf("parse: %v; access points %+v, home site %q, addr %q, endpoints %v", err, o.cfg.AccessPoints, o.cfg.Client.HomeSite, o.cfg.Addr, o.cfg.Endpoints)
	}

	seven := make([]string, 7)
	for i := range seven {
		seven[i] = "site-a=127.0.0.1:" + strconv.Itoa(7070+i)
	}
	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"entry without a site", []string{"-access-points", "site-a=127.0.0.1:7070,127.0.0.1:7170", "-home-site", "site-a"}, `-access-points: "127.0.0.1:7170": want SITE=HOST:PORT`},
		{"empty site", []string{"-access-points", "=127.0.0.1:7070", "-home-site", "site-a"}, `-access-points: "=127.0.0.1:7070": want SITE=HOST:PORT`},
		{"empty address", []string{"-access-points", "site-a=", "-home-site", "site-a"}, `-access-points: "site-a=": want SITE=HOST:PORT`},
		{"too many", []string{"-access-points", strings.Join(seven, ","), "-home-site", "site-a"}, "-access-points: 7 access points, at most 6"},
		{"no home site", []string{"-access-points", "site-a=127.0.0.1:7070"}, `-home-site: required with -access-points, one of ["site-a"]`},
		{"home site not among the sites", []string{"-access-points", "site-a=127.0.0.1:7070,site-b=127.0.0.1:7170", "-home-site", "site-c"}, `-home-site "site-c": no access point of -access-points is in it`},
		{"home site alone", []string{"-home-site", "site-a"}, `-home-site "site-a": with -access-points only`},
		{"beside -addr", []string{"-addr", "127.0.0.1:7070", "-access-points", "site-a=127.0.0.1:7170", "-home-site", "site-a"}, "-addr and -access-points"},
		{"cell target", []string{"-target", "cell", "-access-points", "site-a=127.0.0.1:7081", "-home-site", "site-a"}, "-access-points: access points are for the gtr target only"},
		{"off loopback", []string{"-access-points", "site-a=127.0.0.1:7070,site-b=192.0.2.1:7070", "-home-site", "site-a"}, `access points[1]: addr "192.0.2.1:7070": load may only target a loopback address`},
		{"site of another form", []string{"-access-points", "Site-A=127.0.0.1:7070", "-home-site", "Site-A"}, "AccessPoint[0].Site"},
		{"an address twice", []string{"-access-points", "site-a=127.0.0.1:7070,site-b=127.0.0.1:7070", "-home-site", "site-a"}, "AccessPoint[1].Addr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCmd(t, append([]string{"-plaintext", "-n", "5"}, tt.args...)...)
			if code != 2 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, want 2, and stderr naming %q: %s", code, tt.want, stderr)
			}
		})
	}

	a1, a2, b1 := serveApprover(t), serveApprover(t), serveApprover(t)
	code, out, stderr := runCmd(t, "-plaintext", "-access-points", "site-b="+b1+",site-a="+a1+",site-a="+a2, "-home-site", "site-a", "-n", "100", "-c", "4", "-json")
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr)
	}
	var rep load.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Addr != a1 || len(rep.Endpoints) != 3 || rep.Endpoints[a1] == 0 || rep.Endpoints[a1]+rep.Endpoints[a2]+rep.Endpoints[b1] != 100 {
		t.Fatalf("addr %q (want %q, the first of the home site), endpoints %v", rep.Addr, a1, rep.Endpoints)
	}
}
