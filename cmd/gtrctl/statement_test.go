package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// statementAdmin answers GetStatement with cell-a's lines, cell-b down
// and their total, and keeps the requests it had.
type statementAdmin struct {
	fakeAdmin
	mu   sync.Mutex
	reqs []*adminproto.GetStatementRequest
}

func (f *statementAdmin) GetStatement(ctx context.Context, req *adminproto.GetStatementRequest) (*adminproto.GetStatementResponse, error) {
	if err := f.auth(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	gbp := &cellpayv1.StatementLine{PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION, Status: cellpayv1.TransactionStatus_APPROVED,
		Currency: "GBP", Count: 2, AmountMinorUnits: 1500}
	return &adminproto.GetStatementResponse{PartnerId: req.GetPartnerId(), Date: req.GetDate(), Cells: []*adminproto.CellStatement{
		{CellId: "cell-a", Lines: []*cellpayv1.StatementLine{gbp}},
		{CellId: "cell-b", Error: "database down"},
		{CellId: "cell-c"},
	}, Total: []*cellpayv1.StatementLine{gbp}}, nil
}

// requests is how many GetStatement requests the server had.
func (f *statementAdmin) requests() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.reqs) }

// TestStatement: gtrctl statement sends the partner and day and prints a
// row per cell's line, a row of dashes for a cell with none, the total,
// and the cell that did not answer; -o json is the answer; bad arguments
// are refused before any call, naming the one at fault.
func TestStatement(t *testing.T) {
	f := &statementAdmin{}
	addr := serveWith(t, f)
	code, out, errs := gtrctl(t, "statement", "p-001", "2026-03-01", "--addr", addr, "--token", "tok")
	if code != 0 {
		t.Fatalf("code %d: %s", code, errs)
	}
	if req := f.reqs[0]; req.GetPartnerId() != "p-001" || req.GetDate() != "2026-03-01" {
		t.Fatalf("request %v", req)
	}
	for _, want := range []string{
		`(?m)^CELL +PAYMENT TYPE +STATUS +CURRENCY +COUNT +AMOUNT$`,
		`(?m)^cell-a +CARD_AUTHORIZATION +APPROVED +GBP +2 +1500$`,
		`(?m)^cell-c +- +- +- +0 +0$`,
		`(?m)^total +CARD_AUTHORIZATION +APPROVED +GBP +2 +1500$`,
		`(?m)^cell cell-b did not answer: database down$`,
		`(?m)^incomplete: the total leaves out 1 cell\(s\) that did not answer$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "cell-b  ") {
		t.Errorf("cell-b, which did not answer, has a row:\n%s", out)
	}

	// protojson varies its whitespace on purpose: decode, do not match text.
	code, out, _ = gtrctl(t, "statement", "p-001", "2026-03-01", "-o", "json", "--addr", addr, "--token", "tok")
	var got struct {
		Complete bool
		Cells    []struct{ CellID, Error string }
		Total    []struct {
			PaymentType      string
			AmountMinorUnits string
		}
	}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || got.Complete || len(got.Cells) != 3 || got.Cells[1].Error != "database down" ||
		len(got.Total) != 1 || got.Total[0].PaymentType != "CARD_AUTHORIZATION" || got.Total[0].AmountMinorUnits != "1500" {
		t.Fatalf("-o json: %d %v\n%s", code, err, out)
	}

	before := f.requests()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"statement", "p-001"}, 2, "usage: gtrctl statement PARTNER DATE"},
		{[]string{"statement", "p-001", "2026-03-01", "extra"}, 2, "usage: gtrctl statement PARTNER DATE"},
		{[]string{"statement", "p 001", "2026-03-01"}, 1, `PARTNER "p 001"`},
		{[]string{"statement", "p-001", "2026-02-30"}, 1, `DATE "2026-02-30": want a UTC day, YYYY-MM-DD`},
		{[]string{"statement", "p-001", "01/03/2026"}, 1, `DATE "01/03/2026"`},
	} {
		code, out, errs := gtrctl(t, append(tc.args, "--addr", addr, "--token", "tok")...)
		if code != tc.code || out != "" || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: code %d, stdout %q, stderr %q; want %d and %q", tc.args, code, out, errs, tc.code, tc.want)
		}
	}
	if n := f.requests(); n != before {
		t.Fatalf("bad arguments made %d calls", n-before)
	}
}
