package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// The follow-ups' lives and their driver are internal/dev/load's, tested
// there against a server holding the rule book; these tests hold the
// command's part: -followups reaches load.Run, and the report and
// -answers show the follow-ups.

// followUpServer approves every submit and every follow-up, and records
// the follow-ups it is sent.
type followUpServer struct {
	approver

	mu  sync.Mutex
	got []received
}

// received is one follow-up call.
type received struct {
	kind                  cellpayv1.PaymentType
	partner, id, original string
	amount                int64
}

func (s *followUpServer) CaptureTransaction(_ context.Context, req *cellpayv1.CaptureTransactionRequest) (*cellpayv1.Transaction, error) {
	return s.approve(cellpayv1.PaymentType_CAPTURE, req.GetPartnerId(), req.GetTransactionId(), req.GetOriginalTransactionId(), req.GetAmount().GetMinorUnits())
}

func (s *followUpServer) RefundTransaction(_ context.Context, req *cellpayv1.RefundTransactionRequest) (*cellpayv1.Transaction, error) {
	return s.approve(cellpayv1.PaymentType_REFUND, req.GetPartnerId(), req.GetTransactionId(), req.GetOriginalTransactionId(), req.GetAmount().GetMinorUnits())
}

func (s *followUpServer) VoidTransaction(_ context.Context, req *cellpayv1.VoidTransactionRequest) (*cellpayv1.Transaction, error) {
	return s.approve(cellpayv1.PaymentType_VOID, req.GetPartnerId(), req.GetTransactionId(), req.GetOriginalTransactionId(), 0)
}

func (s *followUpServer) approve(kind cellpayv1.PaymentType, partner, id, original string, amount int64) (*cellpayv1.Transaction, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, received{kind: kind, partner: partner, id: id, original: original, amount: amount})
	return &cellpayv1.Transaction{TransactionId: id, OriginalTransactionId: original, Status: cellpayv1.TransactionStatus_APPROVED}, nil
}

func (s *followUpServer) calls() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.got...)
}

// runJSON runs loadgen with args and -json, and returns its report.
func runJSON(t *testing.T, args ...string) load.Report {
	t.Helper()
	code, out, stderr := runCmd(t, append(args, "-json")...)
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr)
	}
	var rep load.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	return rep
}

// TestFollowUps: -followups follows a share of the approved
// authorizations; the JSON report counts them under follow_ups, and
// -answers holds their answers in the checker's format, each naming its
// kind, original and amount.
func TestFollowUps(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	s := &followUpServer{}
	answers := t.TempDir() + "/answers.jsonl"
	rep := runJSON(t, "-plaintext", "-addr", serve(t, s), "-n", "300", "-c", "4", "-seed", "9", "-run-id", "fu-cmd",
		"-followups", "0.5", "-answers", answers)
	fu := rep.FollowUps
	calls := s.calls()
	t.Logf("follow-ups: %+v", fu)
	if fu == nil || fu.Share != 0.5 || fu.Lives[load.LifeCaptureRefund] == 0 || fu.Lives[load.LifeVoid] == 0 || fu.Dropped != 0 || fu.Unsent != 0 {
		t.Fatalf("follow-ups %+v", fu)
	}
	if fu.Sent != int64(len(calls)) || fu.Answered != fu.Sent {
		t.Fatalf("report says %d sent, %d answered; the server got %d", fu.Sent, fu.Answered, len(calls))
	}
	for _, kind := range load.FollowUpKinds {
		if byOutcome := fu.Calls[kind.String()]; byOutcome["APPROVED"] == 0 || len(byOutcome) != len(statusNames) {
			t.Fatalf("%v: %v, want every one APPROVED", kind, byOutcome)
		}
	}
	checkAnswers(t, answers, 300, calls)

	// Without -followups, no follow-up and no follow_ups in the report.
	code, out, stderr := runCmd(t, "-plaintext", "-addr", serve(t, &followUpServer{}), "-n", "50", "-json")
	if code != 0 || strings.Contains(out, "follow_ups") {
		t.Fatalf("exit %d without -followups: %s%s", code, out, stderr)
	}
}

// checkAnswers: the -answers file holds submits answers and one line per
// follow-up call, which the checker reads, each follow-up naming its
// kind and original, and its amount unless it is a void.
func checkAnswers(t *testing.T, path string, submits int, calls []received) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := checker.ReadAnswers(f)
	if err != nil || len(got) != submits+len(calls) {
		t.Fatalf("answers: %d, %v; want %d", len(got), err, submits+len(calls))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]received{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		var raw struct {
			PartnerID string `json:"partner_id"`
			ID        string `json:"id"`
			Status    string `json:"status"`
			FollowUp  string `json:"follow_up"`
			Original  string `json:"original"`
			Amount    *int64 `json:"amount"`
		}
		if err := json.Unmarshal([]byte(line), &raw); err != nil {
			t.Fatal(err)
		}
		if raw.FollowUp == "" {
			continue
		}
		if !strings.HasPrefix(raw.ID, raw.Original+"-") || raw.Status != "APPROVED" || (raw.Amount == nil) != (raw.FollowUp == "VOID") {
			t.Fatalf("line %s", line)
		}
		r := received{kind: cellpayv1.PaymentType(cellpayv1.PaymentType_value[raw.FollowUp]), partner: raw.PartnerID, id: raw.ID, original: raw.Original}
		if raw.Amount != nil {
			r.amount = *raw.Amount
		}
		lines[raw.PartnerID+"/"+raw.ID] = r
	}
	if len(lines) != len(calls) {
		t.Fatalf("%d follow-ups in the answers, %d sent", len(lines), len(calls))
	}
	for _, c := range calls {
		if lines[c.partner+"/"+c.id] != c {
			t.Fatalf("%s: %+v in the answers, %+v sent", c.id, lines[c.partner+"/"+c.id], c)
		}
	}
}

// TestFollowUpsReports: the table and the BENCH lines count the
// follow-ups; without -followups they are as before (TestBenchReport).
func TestFollowUpsReports(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	addr := serve(t, &followUpServer{})
	code, out, stderr := runCmd(t, "-plaintext", "-addr", addr, "-n", "100", "-c", "2", "-followups", "0.5")
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr)
	}
	t.Logf("table:\n%s", out)
	for _, want := range []string{"follow-ups", "share 0.5: lives capture_refund ", "captures", "voids", "refunds", "APPROVED", "unsent"} {
		if !strings.Contains(out, want) {
			t.Errorf("table has no %q:\n%s", want, out)
		}
	}
	code, out, stderr = runCmd(t, "-plaintext", "-addr", addr, "-n", "100", "-c", "2", "-followups", "0.5", "-bench")
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if n := len(lines); n != 9 || !strings.HasPrefix(lines[7], "BENCH followups ") || lines[7] == "BENCH followups 0" || lines[8] != "BENCH followup_errors 0" {
		t.Fatalf("BENCH lines:\n%s", out)
	}
}
