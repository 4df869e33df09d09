package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/internal/dev/issuersim"
	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/internal/dev/testutil/grpctest"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const testTimeout = 60 * time.Second

func TestUsage(t *testing.T) {
	answers := filepath.Join(t.TempDir(), "answers.jsonl")
	if err := os.WriteFile(answers, []byte("not json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no answers", []string{"-cell", "cell-a=postgres://x"}, "-answers is required"},
		{"no cell", []string{"-answers", answers}, "-cell"},
		{"bad cell", []string{"-answers", answers, "-cell", "cell-a"}, "want ID=URL"},
		{"stray argument", []string{"-answers", answers, "-cell", "a=b", "extra"}, "unexpected arguments"},
		{"missing file", []string{"-answers", answers + ".none", "-cell", "a=b"}, "no such file"},
		{"bad file", []string{"-plaintext", "-answers", answers, "-cell", "a=b"}, "line 1"},
		{"no CA", []string{"-answers", answers, "-cell", "a=b", "-ca", "/nonexistent/ca.crt"}, "GTR credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tt.want)
			}
		})
	}
}

// gtr answers GetTransaction for one approved transaction, p's t-1; the
// same ID of another partner is NOT_FOUND.
type gtr struct {
	cellpayv1.UnimplementedPaymentsServer
}

func (gtr) GetTransaction(_ context.Context, req *cellpayv1.GetTransactionRequest) (*cellpayv1.Transaction, error) {
	if req.GetPartnerId() == "p" && req.GetTransactionId() == "t-1" {
		return &cellpayv1.Transaction{PartnerId: "p", TransactionId: "t-1", Status: cellpayv1.TransactionStatus_APPROVED,
			AuthCode: issuersim.AuthCode("p", "t-1"), CellId: "cell-a"}, nil
	}
	return nil, status.Error(codes.NotFound, "transaction not found")
}

// TestRun checks a clean run and one with a lost transaction end to end:
// flags, answers file, a real database, issuer simulator and gRPC.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	dbURL := cellDatabase(ctx, t)
	iss := issuersim.New(issuersim.Config{})
	issuerAddr := grpctest.Serve(t, func(gs *grpc.Server) { issuerproto.RegisterIssuerServer(gs, iss) })
	gtrAddr := grpctest.Serve(t, func(gs *grpc.Server) { cellpayv1.RegisterPaymentsServer(gs, gtr{}) })
	if _, err := iss.Authorize(ctx, &issuerproto.AuthorizeRequest{PartnerId: "p", TransactionId: "t-1", Pan: issuersim.CardApproved,
		ExpiryMonth: 12, ExpiryYear: 2099, AmountMinorUnits: 100}); err != nil {
		t.Fatal(err)
	}

	write := func(answers ...checker.Answer) string {
		var b bytes.Buffer
		for _, a := range answers {
			if err := checker.WriteAnswer(&b, a); err != nil {
				t.Fatal(err)
			}
		}
		path := filepath.Join(t.TempDir(), "answers.jsonl")
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	approved := checker.Answer{PartnerID: "p", ID: "t-1", Status: cellpayv1.TransactionStatus_APPROVED, AuthCode: issuersim.AuthCode("p", "t-1"), CellID: "cell-a"}
	// Another partner's t-1, answered approved but recorded nowhere: lost,
	// though p's t-1 is there.
	lost := checker.Answer{PartnerID: "q", ID: "t-1", Status: cellpayv1.TransactionStatus_APPROVED, AuthCode: "XXXXXX"}
	base := []string{"-plaintext", "-gtr", gtrAddr, "-issuer", issuerAddr, "-cell", "cell-a=" + dbURL, "-wait", "5s"}

	var stdout, stderr bytes.Buffer
	if code := run(append(base, "-answers", write(approved)), &stdout, &stderr); code != 0 {
		t.Fatalf("clean run: exit %d\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	if !strings.Contains(stdout.String(), "RESULT: OK") {
		t.Errorf("clean run printed:\n%s", &stdout)
	}

	stdout.Reset()
	stderr.Reset()
	if code := run(append(base, "-json", "-answers", write(approved, lost)), &stdout, &stderr); code != 1 {
		t.Fatalf("lost run: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	var rep checker.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("JSON report: %v\n%s", err, &stdout)
	}
	if rep.Lost != 1 || rep.Approved != 1 || len(rep.Examples[checker.ProblemLost]) != 1 {
		t.Errorf("report %+v", rep)
	}
	if ex := rep.Examples[checker.ProblemLost]; len(ex) == 1 && (ex[0].PartnerID != "q" || ex[0].ID != "t-1") {
		t.Errorf("lost example names %s/%s, want q/t-1", ex[0].PartnerID, ex[0].ID)
	}
}

func cellDatabase(ctx context.Context, t *testing.T) string {
	t.Helper()
	url := pgtest.NewDatabase(t)
	pgtest.ApplyMigrations(t, url, "../cell/internal/store/migrations")
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO transactions (transaction_id, fingerprint, state, auth_code,
		payment_type, partner_id, market, amount, currency, settlement_amount, settlement_currency, risk_amount,
		merchant_id, mcc, merchant_country, masked_pan, refdata_version, route_rule, attempt, cell_id,
		created_at, updated_at, pan_hash_key_id, fingerprint_key_id)
		VALUES ('t-1', '\x00', 'approved', $1, 1, 'p', 'DE', 100, 'EUR', 100, 'EUR', 100, 'm', '5411', 'DE',
		'', '1', 'r', 1, 'cell-a', now(), now(), 'pan-test', 'fp-test')`, issuersim.AuthCode("p", "t-1")); err != nil {
		t.Fatal(err)
	}
	return url
}
