package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
)

// otherPayload is req with another amount: the same transaction ID, a
// different payload.
func otherPayload(req *cellpayv1.SubmitTransactionRequest) *cellpayv1.SubmitTransactionRequest {
	out := proto.Clone(req).(*cellpayv1.SubmitTransactionRequest)
	out.Amount.MinorUnits++
	return out
}

// sameAnswer fails unless got is the answer first recorded: the status,
// codes and the cell that decided it.
func sameAnswer(t *testing.T, what string, first, got *cellpayv1.Transaction, err error) {
	t.Helper()
	switch {
	case err != nil:
		t.Errorf("%s: %v, want the recorded answer %s from %s", what, err, first.GetStatus(), first.GetCellId())
	case got.GetStatus() != first.GetStatus() || got.GetAuthCode() != first.GetAuthCode() ||
		got.GetDeclineReason() != first.GetDeclineReason() || got.GetCellId() != first.GetCellId():
		t.Errorf("%s: %s %q %q from %s, want the recorded %s %q %q from %s", what,
			got.GetStatus(), got.GetAuthCode(), got.GetDeclineReason(), got.GetCellId(),
			first.GetStatus(), first.GetAuthCode(), first.GetDeclineReason(), first.GetCellId())
	}
}

// TestDirectoryDrainReplays: transactions decided on cell-b, which is then
// drained to 0%, are resent through two GTR replicas that never saw them.
// The replays now route to other cells; the transaction directory sends
// them to their owner's answer: the same payload gets the recorded answer
// (from cell-b), another payload ALREADY_EXISTS. Without it, the next cell
// processed each replay as new.
func TestDirectoryDrainReplays(t *testing.T) {
	ctx := ctxFor(t, 90*time.Second)
	_, _, gtrs, admins := twoReplicas(t, "dir-gtr")
	g1, g2 := gtrs[0], gtrs[1]
	a1, a2 := admins[0], admins[1]

	keys := make([]*adminproto.Attrs, 200)
	for i := range keys {
		keys[i] = &adminproto.Attrs{PartnerId: "p-001", MerchantId: fmt.Sprintf("dir-%s-%d", runID, i), Market: "GB", PaymentType: "CARD_AUTHORIZATION"}
	}
	homes, err := a1.RouteKeys(ctx, &adminproto.RouteKeysRequest{Attrs: keys})
	if err != nil {
		t.Fatal(err)
	}
	var onB []*adminproto.Attrs
	for i, h := range homes.Home {
		if h == "cell-b" && len(onB) < 10 {
			onB = append(onB, keys[i])
		}
	}
	if len(onB) < 10 {
		t.Fatalf("only %d of %d keys homed on cell-b", len(onB), len(keys))
	}
	var answers []checker.Answer
	record := func(req *cellpayv1.SubmitTransactionRequest, txn *cellpayv1.Transaction, err error) {
		answers = append(answers, checker.AnswerOf(req.GetPartnerId(), req.GetTransactionId(), txn, err))
	}
	reqs := make([]*cellpayv1.SubmitTransactionRequest, len(onB))
	first := make([]*cellpayv1.Transaction, len(onB))
	for i, k := range onB {
		reqs[i] = request(fmt.Sprintf("dir-drain-%d", i), freshPAN())
		reqs[i].Merchant.Id = k.MerchantId
		first[i], err = g1.payments.SubmitTransaction(ctx, reqs[i])
		record(reqs[i], first[i], err)
		if err != nil || first[i].GetCellId() != "cell-b" {
			t.Fatalf("txn %d: %v on %s, want an answer from its home cell-b", i, err, first[i].GetCellId())
		}
	}

	if _, err := a1.Drain(ctx, &adminproto.DrainRequest{CellId: "cell-b", Percent: 100}); err != nil {
		t.Fatal(err)
	}
	for _, a := range []adminproto.AdminClient{a1, a2} {
		testutil.Eventually(t, 10*time.Second, "cell-b drained on both replicas", func() bool {
			r, err := a.RouteKeys(ctx, &adminproto.RouteKeysRequest{Attrs: onB})
			if err != nil {
				return false
			}
			for _, h := range r.Home {
				if h == "cell-b" {
					return false
				}
			}
			return true
		})
	}

	for i, req := range reqs {
		for _, g := range []*gtrProc{g1, g2} {
			txn, err := g.payments.SubmitTransaction(ctx, req)
			record(req, txn, err)
			sameAnswer(t, fmt.Sprintf("txn %d, same payload again through %s after the drain", i, g.ID), first[i], txn, err)
			other := otherPayload(req)
			txn, err = g.payments.SubmitTransaction(ctx, other)
			if status.Code(err) != codes.AlreadyExists {
				t.Errorf("txn %d, another payload through %s after the drain: %v %v, want ALREADY_EXISTS", i, g.ID, txn.GetStatus(), err)
			}
		}
	}
	// New transactions of the drained keys go elsewhere.
	fresh := request("dir-drain-new", freshPAN())
	fresh.Merchant.Id = onB[0].MerchantId
	txn, err := g2.payments.SubmitTransaction(ctx, fresh)
	record(fresh, txn, err)
	if err != nil || txn.GetCellId() == "cell-b" {
		t.Fatalf("a new transaction of a drained key: %v on %s, want another cell", err, txn.GetCellId())
	}

	ccfg := checkerConfig()
	ccfg.Payments = g1.payments
	report, err := checker.Check(ctx, ccfg, answers)
	if err != nil {
		t.Fatal(err)
	}
	if !report.OK() {
		t.Fatalf("invariants broken:\n%s", report.String())
	}
}

// TestDirectoryFailedNotReached: a cell records a transaction as sending
// and dies before the GTR's Proceed (the test plays the GTR on the cell's
// own Process stream, so the moment is exact). Restarted, its reconciler
// records FAILED issuer_not_reached once the grace period has passed. The
// partner then retries through the other GTR replica while that cell is
// down: the retry reaches another cell, which answers the recorded FAILED
// from the transaction directory instead of approving it. One answer
// everywhere, no issuer effect, and the checker agrees.
func TestDirectoryFailedNotReached(t *testing.T) {
	ctx := ctxFor(t, 150*time.Second)
	home := partnerHome(t, ctx, "dir-probe")
	req := request("dir-notreached", freshPAN())
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	startAsGTR(t, sctx, home, req, "e2e-"+runID)
	// Sending is durable at the cell; no Proceed will come. Kill it now.
	if err := env.p.Process(home).Kill(); err != nil {
		t.Fatal(err)
	}
	waitCellDown(t, home, "killed between sending and Proceed")
	cancel()
	restartCell(t, ctx, home)

	db := cellDB(t, ctx, home)
	testutil.Eventually(t, 90*time.Second, "the reconciler records FAILED issuer_not_reached", func() bool {
		var state, reason string
		err := db.QueryRow(ctx, `SELECT state, decline_reason FROM transactions WHERE partner_id = $1 AND transaction_id = $2`,
			req.GetPartnerId(), req.GetTransactionId()).Scan(&state, &reason)
		return err == nil && state == "failed" && reason == "issuer_not_reached"
	})

	// The partner retries while the cell is down, through the replica it
	// never used: the retry goes to the next cell.
	if err := env.p.Process(home).Kill(); err != nil {
		t.Fatal(err)
	}
	waitCellDown(t, home, "killed again")
	var answers []checker.Answer
	backup := cellpayv1.NewPaymentsClient(dialGTR(env.backupAddr))
	for _, g := range []struct {
		name string
		c    cellpayv1.PaymentsClient
	}{{"the backup replica", backup}, {"the primary replica", env.payments}} {
		txn, err := g.c.SubmitTransaction(ctx, req)
		answers = append(answers, checker.AnswerOf(req.GetPartnerId(), req.GetTransactionId(), txn, err))
		if err != nil || txn.GetStatus() != cellpayv1.TransactionStatus_FAILED || txn.GetDeclineReason() != "issuer_not_reached" {
			t.Errorf("retry through %s with %s down: %s %s %v, want the recorded FAILED issuer_not_reached",
				g.name, home, txn.GetStatus(), txn.GetDeclineReason(), err)
		}
		if txn.GetCellId() != "" && txn.GetCellId() != home {
			t.Errorf("retry through %s: answered as decided by %s, want %s, its owner", g.name, txn.GetCellId(), home)
		}
	}
	restartCell(t, ctx, home)
	// The GTR dials the restarted cell again within a second; until then
	// a read answers UNAVAILABLE (retry), as a partner is told.
	for _, g := range []cellpayv1.PaymentsClient{backup, env.payments} {
		var got *cellpayv1.Transaction
		var err error
		testutil.Eventually(t, 10*time.Second, "GetTransaction answers once the GTR reaches every cell", func() bool {
			got, err = g.GetTransaction(ctx, &cellpayv1.GetTransactionRequest{TransactionId: req.GetTransactionId(), PartnerId: req.GetPartnerId()})
			return status.Code(err) != codes.Unavailable
		})
		if err != nil || got.GetStatus() != cellpayv1.TransactionStatus_FAILED {
			t.Errorf("GetTransaction after the retries: %s %v, want FAILED", got.GetStatus(), err)
		}
	}
	if eff, _ := effects(t, ctx, req.GetPartnerId(), req.GetTransactionId()); eff != 0 {
		t.Errorf("the issuer applied the transaction %d times, want 0", eff)
	}
	report, err := checker.Check(ctx, checkerConfig(), answers)
	if err != nil {
		t.Fatal(err)
	}
	if !report.OK() {
		t.Fatalf("invariants broken:\n%s", strings.TrimSpace(report.String()))
	}
}

// partnerHome is the cell p-001's transactions go to: the platform's
// table hashes on the partner. It sends one (its ID ends in suffix) to
// find out.
func partnerHome(t *testing.T, ctx context.Context, suffix string) string {
	t.Helper()
	txn, err := env.payments.SubmitTransaction(ctx, request(suffix, freshPAN()))
	if err != nil {
		t.Fatal(err)
	}
	return txn.GetCellId()
}

// startAsGTR plays the GTR on cell's Process stream (a cell serves it to
// the GTR's identity only): it starts req as attempt 1 of call at its
// home and waits for the cell's point of no return event, so that the
// test chooses the exact moment of what follows. The stream lives as long
// as ctx.
func startAsGTR(t *testing.T, ctx context.Context, cell string, req *cellpayv1.SubmitTransactionRequest, call string) cellproto.Cell_ProcessClient {
	t.Helper()
	asGTR, err := env.p.ClientTLS(platform.GTR)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(cellAddr(t, cell), asGTR)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	stream, err := cellproto.NewCellClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&cellproto.ProcessInput{Input: &cellproto.ProcessInput_Start{Start: &cellproto.ProcessRequest{
		Request: req, Attempt: 1, RouteRule: "everything", CallId: call, Home: true,
	}}}); err != nil {
		t.Fatal(err)
	}
	if ev, err := stream.Recv(); err != nil || ev.GetPointOfNoReturn() == nil {
		t.Fatalf("want %s's point of no return event, got %v %v", cell, ev, err)
	}
	return stream
}
