package e2e

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// TestReleaseLostCell: a cell lost past a transaction's point of no return
// (the issuer applied the authorization, the cell never learnt it) holds
// the transaction: the partner's retry is sent to the owner and ends
// UNAVAILABLE. An operator releases the cell (gtrctl release): the retry
// is taken over by another cell and answered PENDING, and that cell's
// reconciler resolves it by inquiry: APPROVED, one issuer effect, no
// second authorization. The lost cell then comes back (the platform is
// shared) and abandons its own record, the entry being another's; the
// checker agrees.
func TestReleaseLostCell(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	home := partnerHome(t, ctx, "rel-probe")
	req := request("rel-lost", freshPAN())
	var answers []checker.Answer
	record := func(txn *cellpayv1.Transaction, err error) {
		answers = append(answers, checker.AnswerOf(req.GetPartnerId(), req.GetTransactionId(), txn, err))
	}

	// The issuer applies every authorization and then fails (the cell
	// never learns the outcome), and answers inquiries slower than the
	// reconciler waits: the transaction stays PENDING at its home.
	setIssuerFaults(t, ctx, &issuerproto.Faults{ErrorRate: 1, AfterEffect: true, LatencyMs: 3000})
	defer setIssuerFaults(t, context.Background(), &issuerproto.Faults{})

	// The test plays the GTR on home's Process stream.
	stream := startAsGTR(t, ctx, home, req, "e2e-rel-"+runID)
	if err := stream.Send(&cellproto.ProcessInput{Input: &cellproto.ProcessInput_Proceed{Proceed: &cellproto.Proceed{}}}); err != nil {
		t.Fatal(err)
	}
	ev, err := stream.Recv()
	if err == nil && ev.GetProceeding() != nil {
		ev, err = stream.Recv()
	}
	if err != nil || ev.GetResult().GetStatus() != cellpayv1.TransactionStatus_PENDING {
		t.Fatalf("want PENDING from %s (the issuer's answer lost), got %v %v", home, ev, err)
	}
	record(ev.GetResult(), nil)
	if eff, _ := effects(t, ctx, req.GetPartnerId(), req.GetTransactionId()); eff != 1 {
		t.Fatalf("the issuer applied it %d times, want 1", eff)
	}
	// Lost for good.
	if err := env.p.Process(home).Kill(); err != nil {
		t.Fatal(err)
	}
	waitCellDown(t, home, "lost")
	setIssuerFaults(t, ctx, &issuerproto.Faults{})

	retry := func() (*cellpayv1.Transaction, error) {
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		txn, err := env.payments.SubmitTransaction(cctx, req)
		record(txn, err)
		return txn, err
	}
	if txn, err := retry(); status.Code(err) != codes.Unavailable {
		t.Fatalf("retry with %s lost, before its release: %s %v, want UNAVAILABLE (sent to its owner)", home, txn.GetStatus(), err)
	}

	resp, err := platformAdmin(t).ReleaseCell(ctx, &adminproto.ReleaseCellRequest{CellId: home, Reason: "e2e: lost for good"})
	if err != nil {
		t.Fatalf("release %s: %v", home, err)
	}
	t.Logf("released %s at directory revision %d", home, resp.GetRevision())
	var taken *cellpayv1.Transaction
	testutil.Eventually(t, 20*time.Second, "a retry taken over once the release is seen", func() bool {
		taken, err = retry()
		return err == nil
	})
	if taken.GetStatus() != cellpayv1.TransactionStatus_PENDING || taken.GetCellId() == home {
		t.Fatalf("retry after the release: %s on %s, want PENDING on another cell", taken.GetStatus(), taken.GetCellId())
	}
	var got *cellpayv1.Transaction
	testutil.Eventually(t, 60*time.Second, "the taker's reconciler resolves it by inquiry", func() bool {
		got, err = env.payments.GetTransaction(ctx, &cellpayv1.GetTransactionRequest{TransactionId: req.GetTransactionId(), PartnerId: req.GetPartnerId()})
		return err == nil && got.GetStatus() != cellpayv1.TransactionStatus_PENDING
	})
	if got.GetStatus() != cellpayv1.TransactionStatus_APPROVED || got.GetCellId() != taken.GetCellId() {
		t.Fatalf("resolved as %s on %s, want APPROVED (the issuer's effect) on %s", got.GetStatus(), got.GetCellId(), taken.GetCellId())
	}
	record(got, nil)
	if eff, reqs := effects(t, ctx, req.GetPartnerId(), req.GetTransactionId()); eff != 1 || reqs != 1 {
		t.Fatalf("issuer: %d effects of %d requests, want 1 of 1 (no second authorization)", eff, reqs)
	}

	// The lost cell comes back: its reconciler finds the entry another
	// cell's and abandons its own record.
	restartCell(t, ctx, home)
	db := cellDB(t, ctx, home)
	testutil.Eventually(t, 60*time.Second, home+"'s record abandoned", func() bool {
		var state string
		err := db.QueryRow(ctx, `SELECT state FROM transactions WHERE partner_id = $1 AND transaction_id = $2`,
			req.GetPartnerId(), req.GetTransactionId()).Scan(&state)
		return err == nil && state == "abandoned"
	})
	report, err := checker.Check(ctx, checkerConfig(), answers)
	if err != nil {
		t.Fatal(err)
	}
	if !report.OK() || report.Pending != 0 {
		t.Fatalf("invariants broken:\n%s", report.String())
	}
}
