package payments

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/api/apierr"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// followUpAs makes f answer FollowUp as a cell does: with the result if it
// holds the original (*holds), else with its owner (f.owner, the
// directory's), else ORIGINAL_NOT_FOUND; UNAVAILABLE while *down.
func followUpAs(f *fakeCell, holds, down *bool) {
	f.fu = func(req *cellproto.FollowUpRequest) (*cellproto.FollowUpResponse, error) {
		switch {
		case *down:
			return nil, status.Error(codes.Unavailable, "down")
		case *holds:
			return &cellproto.FollowUpResponse{Outcome: &cellproto.FollowUpResponse_Result{Result: &cellpayv1.Transaction{
				TransactionId: req.GetTransactionId(), Status: cellpayv1.TransactionStatus_APPROVED, CellId: f.id,
				OriginalTransactionId: req.GetOriginalTransactionId(), PaymentType: req.GetKind()}}}, nil
		case f.owner != "":
			return &cellproto.FollowUpResponse{Outcome: &cellproto.FollowUpResponse_OwnerCell{OwnerCell: f.owner}}, nil
		}
		return nil, apierr.Error(codes.NotFound, apierr.OriginalNotFound, "original_transaction_id: not here")
	}
}

// TestFollowUpFindsTheOriginal: a capture goes to the original's home and
// no further when the home holds it; to the owner the home names; to the
// cell a fan-out finds when the home is down; and is ORIGINAL_NOT_FOUND
// when no cell has it. Each way is counted.
func TestFollowUpFindsTheOriginal(t *testing.T) {
	var homeHolds, homeDown, ownerHolds, never bool
	home, owner, other := &fakeCell{}, &fakeCell{}, &fakeCell{}
	followUpAs(home, &homeHolds, &homeDown)
	followUpAs(owner, &ownerHolds, &never)
	followUpAs(other, &never, &never)
	s, _ := setup(t, home, owner, other)
	obs := &locations{located: map[string]int{}}
	s.cfg.Metrics = obs
	capture := func(id string) (*cellpayv1.Transaction, error) {
		return s.CaptureTransaction(ctx(t), &cellpayv1.CaptureTransactionRequest{PartnerId: "p-001", TransactionId: id,
			OriginalTransactionId: "auth-1", Market: "GB", Amount: &cellpayv1.Money{MinorUnits: 100, Currency: "GBP"}})
	}
	check := func(id, wantCell string) {
		t.Helper()
		txn, err := capture(id)
		if err != nil || txn.GetCellId() != wantCell || txn.GetPaymentType() != cellpayv1.PaymentType_CAPTURE {
			t.Fatalf("%s: %v from %q, want APPROVED by %s", id, err, txn.GetCellId(), wantCell)
		}
	}
	homeHolds = true
	check("c-1", home.id)
	if owner.fus.Load()+other.fus.Load() != 0 || obs.located["follow_up/first"] != 1 {
		t.Fatalf("at home: others asked %d times, located %v", owner.fus.Load()+other.fus.Load(), obs.located)
	}
	homeHolds, home.owner, ownerHolds = false, owner.id, true
	check("c-2", owner.id)
	if other.fus.Load() != 0 || obs.located["follow_up/owner"] != 1 {
		t.Fatalf("placed: the other cell asked %d times, located %v", other.fus.Load(), obs.located)
	}
	homeDown = true
	owner.get = func(k idempotency.Key) (*cellpayv1.Transaction, error) {
		return &cellpayv1.Transaction{TransactionId: k.TransactionID}, nil
	}
	check("c-3", owner.id)
	if obs.located["follow_up/fanout"] != 1 {
		t.Fatalf("home down: located %v, want a fan-out", obs.located)
	}
	homeDown, home.owner, ownerHolds, owner.get = false, "", false, nil
	if _, err := capture("c-4"); status.Code(err) != codes.FailedPrecondition || apierr.Info(err).GetReason() != string(apierr.OriginalNotFound) {
		t.Fatalf("unknown original: %v, want FAILED_PRECONDITION ORIGINAL_NOT_FOUND", err)
	}
	if _, err := capture("auth-1"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a capture under its original's ID: %v, want INVALID_ARGUMENT", err)
	}
}
