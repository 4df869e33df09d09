package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// loadFollowUpsReport is the part of the load tool's -json report this
// test reads: the submits, and the follow-ups (-followups).
type loadFollowUpsReport struct {
	Completed int64            `json:"completed"`
	Errors    map[string]int64 `json:"errors"`
	FollowUps struct {
		Lives    map[string]int64            `json:"lives"`
		Dropped  int64                       `json:"dropped"`
		Sent     int64                       `json:"sent"`
		Answered int64                       `json:"answered"`
		Calls    map[string]map[string]int64 `json:"calls"`
		Unsent   int64                       `json:"unsent"`
	} `json:"follow_ups"`
}

// followUpLine is a follow-up's line of the load tool's -answers, past
// the checker's fields.
type followUpLine struct {
	PartnerID string `json:"partner_id"`
	ID        string `json:"id"`
	Status    string `json:"status"`
	FollowUp  string `json:"follow_up"`
	Original  string `json:"original"`
	Amount    int64  `json:"amount"`
}

// TestLoadToolFollowUps: the load tool with -followups through both
// access points (half the calls each): half the approved authorizations
// are captured in two parts then refunded in two parts, or voided, every
// follow-up approved by its original's cell. The checker then finds
// nothing lost or doubled and every amount equal in the cells' ledgers,
// their follow-ups' records and the issuer's effects; and each
// authorization's sums, read back, are exactly its approved follow-ups'
// amounts as the load tool sent them.
func TestLoadToolFollowUps(t *testing.T) {
	ctx := ctxFor(t, 4*time.Minute)
	answers := filepath.Join(t.TempDir(), "answers.jsonl")
	const n = 300
	cmd := exec.CommandContext(ctx, filepath.Join(env.bin, "loadgen"), "-target", "gtr", "-addr", env.gtrAddr+","+env.backupAddr, "-split", "50",
		"-mode", "closed", "-c", "8", "-n", strconv.Itoa(n), "-d", "90s", "-timeout", "10s", "-seed", "40", "-followups", "0.5",
		"-json", "-answers", answers, "-run-id", runID+"-lgfu", "-ca", env.p.CAFile(), "-keys", env.p.PartnerKeyDir())
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("loadgen: %v\n%s%s", err, out.String(), errOut.String())
	}
	var rep loadFollowUpsReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out.String())
	}
	fu := rep.FollowUps
	t.Logf("load: completed %d, errors %v; follow-ups: lives %v, sent %d, answered %d, unsent %d, dropped %d, calls %v",
		rep.Completed, rep.Errors, fu.Lives, fu.Sent, fu.Answered, fu.Unsent, fu.Dropped, fu.Calls)
	if rep.Completed != n || len(rep.Errors) != 0 {
		t.Fatalf("submits: %d completed of %d, errors %v", rep.Completed, n, rep.Errors)
	}
	for _, kind := range []string{"CAPTURE", "VOID", "REFUND"} {
		if fu.Calls[kind]["APPROVED"] == 0 {
			t.Errorf("no %s approved: %v", kind, fu.Calls[kind])
		}
	}
	if fu.Lives["capture_refund"] == 0 || fu.Lives["void"] == 0 || fu.Answered != fu.Sent || fu.Unsent != 0 || fu.Dropped != 0 {
		t.Fatalf("follow-ups: every life played to its end on a healthy platform, every follow-up answered: %+v", fu)
	}

	all, lines := readLoadAnswers(t, answers)
	if len(all) != n+int(fu.Sent) || len(lines) != int(fu.Sent) {
		t.Fatalf("%d answers, %d of them follow-ups; the report says %d submits and %d follow-ups", len(all), len(lines), n, fu.Sent)
	}
	cfg := checkerConfig()
	keys := make([]idempotency.Key, len(all))
	for i, a := range all {
		keys[i] = a.Key()
	}
	if took, err := checker.WaitResolved(ctx, cfg, keys, 60*time.Second); err != nil {
		t.Fatalf("after %v: %v", took, err)
	}
	report, err := checker.Check(ctx, cfg, all)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checker: %s", report.String())
	if !report.OK() || report.Pending != 0 || report.AmountMismatches != 0 {
		t.Fatalf("invariants broken:\n%s", report.String())
	}
	checkLoadSums(t, lines)
}

// readLoadAnswers reads the load tool's -answers: every answer, for the
// checker, and the follow-ups' lines.
func readLoadAnswers(t *testing.T, path string) ([]checker.Answer, []followUpLine) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	all, err := checker.ReadAnswers(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var lines []followUpLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var l followUpLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.FollowUp != "" {
			lines = append(lines, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return all, lines
}

// checkLoadSums: each followed authorization, read back, shows exactly
// the captures and refunds approved to the load tool, and the void.
func checkLoadSums(t *testing.T, lines []followUpLine) {
	t.Helper()
	type sums struct {
		captured, refunded int64
		voided             bool
	}
	want := map[idempotency.Key]sums{}
	for _, l := range lines {
		k := idempotency.Key{PartnerID: l.PartnerID, TransactionID: l.Original}
		s := want[k]
		if l.Status == "APPROVED" {
			switch l.FollowUp {
			case "CAPTURE":
				s.captured += l.Amount
			case "REFUND":
				s.refunded += l.Amount
			case "VOID":
				s.voided = true
			}
		}
		want[k] = s
	}
	ctx := ctxFor(t, time.Minute)
	for k, w := range want {
		txn, err := env.payments.GetTransaction(ctx, &cellpayv1.GetTransactionRequest{PartnerId: k.PartnerID, TransactionId: k.TransactionID})
		if err != nil {
			t.Fatalf("read %s: %v", k, err)
		}
		got := sums{txn.GetCapturedAmount().GetMinorUnits(), txn.GetRefundedAmount().GetMinorUnits(), txn.GetVoided()}
		if got != w {
			t.Errorf("%s: captured %d, refunded %d, voided %v; its approved follow-ups say %d, %d, %v",
				k, got.captured, got.refunded, got.voided, w.captured, w.refunded, w.voided)
		}
	}
	t.Logf("%d authorizations' sums equal their approved follow-ups'", len(want))
}
