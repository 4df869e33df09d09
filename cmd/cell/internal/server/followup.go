package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/internal/validate"
	"github.com/cellpay/cellpay/pkg/api/apierr"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/cellproto"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// followUpCall names a follow-up's directory claim: a follow-up has one
// attempt, at its original's cell, and no GTR call may take it over.
const followUpCall = "follow-up"

// FollowUp runs a capture, void or refund of an authorization this cell
// holds; see the Cell service's contract. Its steps: a replay is answered
// from its record; an original held elsewhere is answered with its owner;
// the follow-up's ID is claimed in the directory (one answer per ID across
// cells); the follow-up is recorded and held on its original's ledger
// (its point of no return); the issuer is asked; the outcome recorded
// settles the hold. An unknown outcome answers PENDING, and the
// reconciler resolves it by inquiry like any sending record.
func (s *Server) FollowUp(ctx context.Context, req *cellproto.FollowUpRequest) (*cellproto.FollowUpResponse, error) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	if err := validate.FollowUp(req); err != nil {
		return nil, err
	}
	k := idempotency.Key{PartnerID: req.GetPartnerId(), TransactionID: req.GetTransactionId()}
	asReq := cellside.AsRequest(req)
	if r, err := s.cfg.Store.Get(ctx, k); err == nil {
		return s.followUpReplay(r, asReq)
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	orig, err := s.cfg.Store.Get(ctx, cellside.FollowUpKey(req))
	switch {
	case errors.Is(err, store.ErrNotFound) || err == nil && !holds(orig):
		return s.locate(ctx, cellside.FollowUpKey(req))
	case err != nil:
		return nil, status.Error(codes.Unavailable, err.Error())
	case orig.State == cellside.StateSending:
		// A sending original may be a crash's leftover of an attempt
		// that never had Proceed while another cell decided the
		// authorization (as in Find): the directory's owner, if another
		// cell, holds it, and this cell would refuse it as still pending.
		if owner, oerr := s.ownerOf(ctx, cellside.FollowUpKey(req)); oerr == nil && owner != "" {
			return &cellproto.FollowUpResponse{Outcome: &cellproto.FollowUpResponse_OwnerCell{OwnerCell: owner}}, nil
		}
	}
	fp, fpKeyID := s.cfg.Keys.Fingerprint(asReq), s.cfg.Keys.FingerprintKeyID()
	rev, answer, err := s.claimFollowUp(ctx, k, asReq, fp, fpKeyID)
	if answer != nil || err != nil {
		return answer, err
	}
	held, existing, err := s.cfg.Store.HoldFollowUp(ctx, k, cellside.FollowUpKey(req), func(o *cellside.Record) *cellside.Record {
		return cellside.FollowUpRecord(req, o, s.cfg.CellID, fp, fpKeyID, s.cfg.Now())
	})
	var refused *cellside.Refused
	switch {
	case existing != nil:
		return s.followUpReplay(existing, asReq)
	case errors.As(err, &refused):
		s.unclaimLater(k, rev)
		return nil, apierr.Error(codes.FailedPrecondition, apierr.Reason(refused.Reason), refused.Msg)
	case errors.Is(err, cellside.ErrOriginalNotFound):
		s.unclaimLater(k, rev)
		return nil, apierr.Error(codes.NotFound, apierr.OriginalNotFound, err.Error())
	case err != nil:
		// Not recorded, or recorded with its commit's answer lost: a retry
		// finds the record or makes it.
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	out := s.adjust(ctx, held)
	if out != nil {
		out = s.settle(ctx, out)
	}
	if out == nil {
		s.release(ctx, k)
		return result(held), nil // PENDING: the reconciler resolves it
	}
	if s.cfg.Directory != nil {
		s.fileLater(k, rev, out)
	}
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.Finished(string(out.State))
	}
	return result(out), nil
}

// settle records out, the issuer's outcome of a held follow-up: the
// record final, or nil when the write failed (the reconciler's then). A
// write whose commit's answer was lost (store.ErrStateChanged on a retry)
// is read back: final, it is the answer, and its directory entry is
// written like any other.
func (s *Server) settle(ctx context.Context, out *cellside.Record) *cellside.Record {
	err := s.persistAfterIssuer(ctx, out, cellside.StateSending)
	if errors.Is(err, store.ErrStateChanged) {
		if r, gerr := s.cfg.Store.Get(ctx, out.Key()); gerr == nil && r.State.Terminal() {
			return r
		}
	}
	if err != nil {
		return nil
	}
	return out
}

// holds reports whether r is a record this cell answers for: not one it
// gave up before its point of no return (another cell may have completed
// the transaction) or one still short of it.
func holds(r *cellside.Record) bool {
	return r.State != cellside.StateAbandoned && r.State != cellside.StateReceived && r.State != cellside.StateDeciding
}

func result(r *cellside.Record) *cellproto.FollowUpResponse {
	return &cellproto.FollowUpResponse{Outcome: &cellproto.FollowUpResponse_Result{Result: r.Transaction()}}
}

// followUpReplay answers a follow-up whose ID this cell has recorded:
// ALREADY_EXISTS for another payload, the record otherwise (PENDING while
// its outcome is unknown).
func (s *Server) followUpReplay(r *cellside.Record, asReq *cellpayv1.SubmitTransactionRequest) (*cellproto.FollowUpResponse, error) {
	if r.Recovered() {
		if !cellside.MatchesRecovered(r, asReq) {
			return nil, apierr.Error(codes.AlreadyExists, apierr.TransactionIDReused, "transaction_id: already used with a different payload")
		}
		return result(r), nil
	}
	fp, ok := s.cfg.Keys.FingerprintUnder(r.FingerprintKeyID, asReq)
	if !ok || idempotency.Check(r.Fingerprint, fp) != nil {
		return nil, apierr.Error(codes.AlreadyExists, apierr.TransactionIDReused, "transaction_id: already used with a different payload")
	}
	return result(r), nil
}

// locate answers for an original this cell does not hold: its owner in
// the directory, or NOT_FOUND.
func (s *Server) locate(ctx context.Context, k idempotency.Key) (*cellproto.FollowUpResponse, error) {
	owner, err := s.ownerOf(ctx, k)
	if err != nil {
		return nil, err
	}
	if owner == "" {
		return nil, apierr.Error(codes.NotFound, apierr.OriginalNotFound, cellside.ErrOriginalNotFound.Error())
	}
	return &cellproto.FollowUpResponse{Outcome: &cellproto.FollowUpResponse_OwnerCell{OwnerCell: owner}}, nil
}

// ownerOf is the cell other than this one that the directory says holds
// k; "" when it names none (no entry, an abandoned one, or this cell's).
func (s *Server) ownerOf(ctx context.Context, k idempotency.Key) (string, error) {
	d := s.cfg.Directory
	if d == nil {
		return "", nil
	}
	e, found, err := d.Get(ctx, k)
	switch {
	case err != nil:
		return "", status.Errorf(codes.Unavailable, "not in this cell, and the transaction directory did not answer: %v", err)
	case found && e.Owner != s.cfg.CellID && e.State != cellside.EntryAbandoned:
		return e.Owner, nil
	}
	return "", nil
}

// Find is Get, or where the transaction is; see the Cell service's
// contract.
func (s *Server) Find(ctx context.Context, req *cellproto.GetRequest) (*cellproto.FindResponse, error) {
	txn, err := s.Get(ctx, req)
	k := idempotency.Key{PartnerID: req.GetPartnerId(), TransactionID: req.GetTransactionId()}
	if err == nil && txn.GetStatus() == cellpayv1.TransactionStatus_PENDING {
		// A sending record may be a crash's leftover of an attempt that
		// never had Proceed while another cell decided the transaction
		// (this cell's reconciler abandons it, in time): the directory's
		// owner, if another cell, has the answer.
		if owner, oerr := s.ownerOf(ctx, k); oerr == nil && owner != "" {
			return &cellproto.FindResponse{Outcome: &cellproto.FindResponse_OwnerCell{OwnerCell: owner}}, nil
		}
	}
	if err == nil {
		return &cellproto.FindResponse{Outcome: &cellproto.FindResponse_Result{Result: txn}}, nil
	}
	if status.Code(err) != codes.NotFound {
		return nil, err
	}
	owner, err := s.ownerOf(ctx, k)
	switch {
	case err != nil:
		return nil, err
	case owner == "":
		return nil, status.Error(codes.NotFound, "transaction not found")
	}
	return &cellproto.FindResponse{Outcome: &cellproto.FindResponse_OwnerCell{OwnerCell: owner}}, nil
}

// claimFollowUp claims the follow-up's ID in the directory, so that no
// other cell takes the same ID for another transaction: rev is the claim's
// revision (0 without one), or answer/err the answer for an ID held by
// another cell. Without the directory the follow-up goes on unclaimed: it
// is decided in this cell only, never re-routed.
func (s *Server) claimFollowUp(ctx context.Context, k idempotency.Key, asReq *cellpayv1.SubmitTransactionRequest, fp idempotency.Fingerprint, fpKeyID string) (rev uint64, answer *cellproto.FollowUpResponse, err error) {
	d := s.cfg.Directory
	if d == nil {
		return 0, nil, nil
	}
	e, ours, err := d.Claim(ctx, k, cellside.Entry{Owner: s.cfg.CellID, Call: followUpCall, Attempt: 1,
		Fingerprint: fp, FingerprintKeyID: fpKeyID, State: cellside.EntryOwned})
	var same bool
	if err == nil {
		theirs, known := s.cfg.Keys.FingerprintUnder(e.FingerprintKeyID, asReq)
		same = known && e.Call == followUpCall && idempotency.Check(e.Fingerprint, theirs) == nil
	}
	// Claim answers "ours" for any entry this cell owns: only a claim of
	// this follow-up (a retry's) is. Another transaction's entry under
	// the ID, this cell's too (a payment's claim whose record is not
	// written yet, found by the model), is a reuse of the ID: taken, the
	// follow-up and the payment would both reach the issuer.
	ours = ours && same
	result := "claimed"
	switch {
	case err != nil:
		result = "unavailable"
	case !ours:
		result = "held"
	}
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.Directory(result)
	}
	switch {
	case err != nil:
		return 0, nil, nil
	case ours:
		return e.Revision, nil, nil
	case !same:
		return 0, nil, apierr.Error(codes.AlreadyExists, apierr.TransactionIDReused, "transaction_id: already used with a different payload")
	}
	if e.State == cellside.EntryFinal && e.Answer != nil {
		return 0, &cellproto.FollowUpResponse{Outcome: &cellproto.FollowUpResponse_Result{Result: e.Answer}}, nil
	}
	return 0, nil, apierr.Error(codes.Aborted, apierr.TransactionInProgress, "transaction_id: in progress in another cell; retry")
}

// unclaimLater gives up the follow-up's claim of rev (refused: nothing
// recorded), so that the ID stays free.
func (s *Server) unclaimLater(k idempotency.Key, rev uint64) {
	if d := s.cfg.Directory; d != nil && rev != 0 {
		d.Later(func(ctx context.Context) error { return d.Abandon(ctx, k, s.cfg.CellID, followUpCall, 1) }, "abandon")
	}
}

// adjust sends held to the issuer; the outcome's record, or nil when the
// outcome is unknown.
func (s *Server) adjust(ctx context.Context, held *cellside.Record) *cellside.Record {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.IssuerTimeout)
	defer cancel()
	kind := issuerproto.AdjustKind_ADJUST_KIND_CAPTURE
	switch held.PaymentType {
	case cellpayv1.PaymentType_VOID:
		kind = issuerproto.AdjustKind_ADJUST_KIND_VOID
	case cellpayv1.PaymentType_REFUND:
		kind = issuerproto.AdjustKind_ADJUST_KIND_REFUND
	}
	resp, err := s.cfg.Issuer.Adjust(ctx, &issuerproto.AdjustRequest{
		PartnerId: held.PartnerID, TransactionId: held.TransactionID, OriginalTransactionId: held.Original,
		Kind: kind, AmountMinorUnits: held.Amount, Currency: held.Currency, TerminalId: s.cfg.CellID,
	})
	switch status.Code(err) {
	case codes.OK:
		return cellside.FollowUpOutcome(held, resp.GetApproved(), resp.GetAuthCode(), resp.GetDeclineReason(), s.cfg.Now())
	case codes.InvalidArgument:
		return cellside.FollowUpOutcome(held, false, "", "issuer_invalid_request", s.cfg.Now())
	}
	s.cfg.Log.Warn("issuer outcome unknown; follow-up pending", "partner_id", held.PartnerID, "transaction_id", held.TransactionID,
		"code", status.Code(err).String())
	return nil
}
