package issuercheck

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cellpay/cellpay/internal/dev/issuersim"
	"github.com/cellpay/cellpay/internal/dev/testutil/grpctest"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

const partner = "p-001"

func effect(id string, approved bool, amount int64) *issuerproto.RecordedEffect {
	e := &issuerproto.RecordedEffect{PartnerId: partner, TransactionId: id, Approved: approved}
	if approved {
		e.AmountMinorUnits, e.Currency, e.AuthCode = amount, "EUR", "AUTH"+id
	} else {
		e.DeclineReason = "stolen_card"
	}
	return e
}

func record(id string, st cellside.State, amount int64) *cellside.Record {
	r := &cellside.Record{PartnerID: partner, TransactionID: id, State: st, PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION, Amount: amount, Currency: "EUR"}
	if st == cellside.StateApproved {
		r.AuthCode = "AUTH" + id
	}
	return r
}

// TestCompare: the judgement of one effect against the cell's record.
func TestCompare(t *testing.T) {
	capture := func() *issuerproto.RecordedEffect {
		e := effect("c", true, 400)
		e.Kind, e.OriginalTransactionId = issuerproto.AdjustKind_ADJUST_KIND_CAPTURE, "a"
		return e
	}
	captured := func() *cellside.Record {
		r := record("c", cellside.StateApproved, 400)
		r.PaymentType, r.Original = cellpayv1.PaymentType_CAPTURE, "a"
		return r
	}
	void := func(amount int64) (*issuerproto.RecordedEffect, *cellside.Record) {
		e := effect("v", true, 1000)
		e.Kind, e.OriginalTransactionId = issuerproto.AdjustKind_ADJUST_KIND_VOID, "a"
		r := record("v", cellside.StateApproved, amount)
		r.PaymentType, r.Original = cellpayv1.PaymentType_VOID, "a"
		return e, r
	}
	voidE, voidR := void(0)
	refundAuth := effect("r", true, 50)
	refundAuth.Refund = true
	for _, tc := range []struct {
		name string
		e    *issuerproto.RecordedEffect
		r    *cellside.Record
		want Kind
	}{
		{"approved, recorded so", effect("a", true, 1000), record("a", cellside.StateApproved, 1000), Agrees},
		{"declined, recorded so", effect("d", false, 0), record("d", cellside.StateDeclined, 500), Agrees},
		{"a capture, recorded so", capture(), captured(), Agrees},
		{"a void releases the authorization, whatever the void's record says", voidE, voidR, Agrees},
		{"no record", effect("a", true, 1000), nil, Missing},
		{"a decline with no record", effect("d", false, 0), nil, Missing},
		{"sending", effect("a", true, 1000), record("a", cellside.StateSending, 1000), Unresolved},
		{"received: behind", effect("a", true, 1000), record("a", cellside.StateReceived, 1000), Behind},
		{"abandoned where the issuer applied it (released, or taken over)", effect("a", true, 1000), record("a", cellside.StateAbandoned, 1000), Differs},
		{"a capture received as an authorization", capture(), record("c", cellside.StateReceived, 400), Differs},
		{"deciding", effect("a", true, 1000), record("a", cellside.StateDeciding, 1000), Unresolved},
		{"failed where the issuer applied it", effect("a", true, 1000), record("a", cellside.StateFailed, 1000), Differs},
		{"declined where the issuer approved", effect("a", true, 1000), record("a", cellside.StateDeclined, 1000), Differs},
		{"approved where the issuer declined", effect("d", false, 0), record("d", cellside.StateApproved, 500), Differs},
		{"another amount", effect("a", true, 1000), record("a", cellside.StateApproved, 999), Differs},
		{"another auth code", effect("a", true, 1000), func() *cellside.Record { r := record("a", cellside.StateApproved, 1000); r.AuthCode = "X"; return r }(), Differs},
		{"a capture recorded as an authorization", capture(), record("c", cellside.StateApproved, 400), Differs},
		{"a refund authorization recorded as a purchase", refundAuth, record("r", cellside.StateApproved, 50), Differs},
	} {
		f := Compare(tc.e, tc.r)
		if f.Kind != tc.want || f.Key != (idempotency.Key{PartnerID: partner, TransactionID: tc.e.GetTransactionId()}) || f.Issuer == "" || f.Cell == "" {
			t.Errorf("%s: %+v, want %v", tc.name, f, tc.want)
		}
	}
}

// TestCheck: against the issuer simulator over gRPC, with authorizations
// and a capture sent under two terminals, then the cell's records with one
// lost (a commit missing from a restored copy), one left sending and one
// recorded with another amount: Check pages through the terminal's
// effects only and finds each.
func TestCheck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sim := issuersim.New(issuersim.Config{})
	addr := grpctest.Serve(t, func(s *grpc.Server) { issuerproto.RegisterIssuerServer(s, sim) })
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	issuer := issuerproto.NewIssuerClient(conn)
	from := time.Now().Add(-time.Minute)
	cell := map[idempotency.Key]*cellside.Record{}
	authorize := func(id, terminal string, amount int64) {
		t.Helper()
		resp, err := issuer.Authorize(ctx, &issuerproto.AuthorizeRequest{PartnerId: partner, TransactionId: id, Pan: issuersim.CardApproved,
			ExpiryMonth: 12, ExpiryYear: 2040, AmountMinorUnits: amount, Currency: "EUR", MerchantId: "m", Mcc: "5411", TerminalId: terminal})
		if err != nil || !resp.GetApproved() {
			t.Fatalf("%s: %v %v", id, resp, err)
		}
		if terminal == "cell-a" {
			r := record(id, cellside.StateApproved, amount)
			r.AuthCode = resp.GetAuthCode()
			cell[r.Key()] = r
		}
	}
	const n = 12
	for i := range n {
		authorize("a-"+string(rune('a'+i)), "cell-a", int64(100+i))
		authorize("b-"+string(rune('a'+i)), "cell-b", int64(100+i))
	}
	if _, err := issuer.Adjust(ctx, &issuerproto.AdjustRequest{PartnerId: partner, TransactionId: "cap-1", OriginalTransactionId: "a-a",
		Kind: issuerproto.AdjustKind_ADJUST_KIND_CAPTURE, AmountMinorUnits: 60, Currency: "EUR", TerminalId: "cell-a"}); err != nil {
		t.Fatal(err)
	}
	capRec := record("cap-1", cellside.StateApproved, 60)
	capRec.PaymentType, capRec.Original, capRec.AuthCode = cellpayv1.PaymentType_CAPTURE, "a-a", issuersim.AuthCode(partner, "cap-1")
	cell[capRec.Key()] = capRec
	records := func(_ context.Context, keys []idempotency.Key) (map[idempotency.Key]*cellside.Record, error) {
		out := map[idempotency.Key]*cellside.Record{}
		for _, k := range keys {
			if r := cell[k]; r != nil {
				out[k] = r
			}
		}
		return out, nil
	}
	to := time.Now().Add(time.Minute)

	rep, err := Check(ctx, issuer, records, nil, nil, "cell-a", from, to)
	if err != nil || rep.Checked != n+1 || rep.Counts[Agrees] != n+1 || rep.Discrepancies() != 0 || len(rep.Findings) != 0 || rep.Truncated {
		t.Fatalf("all recorded: %+v, %v", rep, err)
	}
	delete(cell, idempotency.Key{PartnerID: partner, TransactionID: "a-b"})
	cell[idempotency.Key{PartnerID: partner, TransactionID: "a-c"}].State = cellside.StateSending
	cell[idempotency.Key{PartnerID: partner, TransactionID: "a-d"}].Amount = 1
	rep, err = Check(ctx, issuer, records, nil, nil, "cell-a", from, to)
	if err != nil || rep.Checked != n+1 || rep.Counts[Missing] != 1 || rep.Counts[Unresolved] != 1 || rep.Counts[Differs] != 1 || rep.Discrepancies() != 2 {
		t.Fatalf("one lost, one sending, one wrong: %+v, %v", rep, err)
	}
	got := map[string]Kind{}
	for _, f := range rep.Findings {
		got[f.Key.TransactionID] = f.Kind
		if strings.Contains(f.Issuer+f.Cell, issuersim.CardApproved) {
			t.Errorf("a finding carries a card number: %+v", f)
		}
	}
	if got["a-b"] != Missing || got["a-c"] != Unresolved || got["a-d"] != Differs || len(got) != 3 {
		t.Fatalf("findings %v", got)
	}
	if _, err := Check(ctx, issuer, records, nil, nil, "", from, to); err == nil {
		t.Fatal("a check with no terminal ran")
	}

	// Recovery: the original a-a and its capture lost together, a-b still
	// lost. With a recorder, each is recorded from the issuer's record, the
	// original before its capture, and the next check finds them agreeing
	// (a-c and a-d are never written).
	delete(cell, idempotency.Key{PartnerID: partner, TransactionID: "a-a"})
	delete(cell, capRec.Key())
	recorder := &mapRecorder{cell: cell}
	rep, err = Check(ctx, issuer, records, recorder, nil, "cell-a", from, to)
	if err != nil || rep.Counts[Missing] != 3 || rep.Recovered != 3 || rep.Unrecovered() != 0 {
		t.Fatalf("three lost, recovered: %+v, %v", rep, err)
	}
	if strings.Join(recorder.order, ",") != "a-a,a-b,cap-1" {
		t.Fatalf("recovered in the order %v, want the issuer's (a-a before its capture)", recorder.order)
	}
	if r := cell[capRec.Key()]; !r.Recovered() || r.Original != "a-a" || r.Amount != 60 || r.AuthCode != capRec.AuthCode ||
		r.PaymentType != cellpayv1.PaymentType_CAPTURE || r.State != cellside.StateApproved || r.CellID != "cell-a" {
		t.Fatalf("the recovered capture: %+v", r)
	}
	rep, err = Check(ctx, issuer, records, recorder, nil, "cell-a", from, to)
	if err != nil || rep.Counts[Missing] != 0 || rep.Recovered != 0 || rep.Counts[Agrees] != n-1 {
		t.Fatalf("after the recovery: %+v, %v", rep, err)
	}

	// Behind: a-e held received (its commits past that lost): brought to
	// the issuer's outcome, its payload kept; a-f abandoned (a released
	// cell's, another holding the transaction) is reported, never
	// written.
	ae := idempotency.Key{PartnerID: partner, TransactionID: "a-e"}
	af := idempotency.Key{PartnerID: partner, TransactionID: "a-f"}
	auth := cell[ae].AuthCode
	cell[ae].State, cell[ae].AuthCode, cell[ae].Fingerprint = cellside.StateReceived, "", idempotency.Fingerprint{7}
	cell[af].State, cell[af].AuthCode = cellside.StateAbandoned, ""
	rep, err = Check(ctx, issuer, records, recorder, nil, "cell-a", from, to)
	if err != nil || rep.Counts[Behind] != 1 || rep.Recovered != 1 || rep.Unrecovered() != 0 || rep.Counts[Differs] != 2 {
		t.Fatalf("one behind, a-d and a-f differing: %+v, %v", rep, err)
	}
	if r := cell[af]; r.State != cellside.StateAbandoned {
		t.Fatalf("a-f written: %+v", r)
	}
	// With the directory naming another cell a-f's owner (a released
	// cell's record, taken over), a-f is held elsewhere: no discrepancy.
	owners := map[idempotency.Key]string{af: "cell-b"}
	owner := func(_ context.Context, k idempotency.Key) (string, error) { return owners[k], nil }
	rep, err = Check(ctx, issuer, records, recorder, owner, "cell-a", from, to)
	if err != nil || rep.Counts[Elsewhere] != 1 || rep.Counts[Differs] != 1 || rep.Discrepancies() != 1 {
		t.Fatalf("a-f held by cell-b: %+v, %v", rep, err)
	}
	// Naming this cell (its own entry: the copy held a-f received, and
	// the cell abandoned it at its start), a-f is behind, caught up.
	owners[af] = "cell-a"
	rep, err = Check(ctx, issuer, records, recorder, owner, "cell-a", from, to)
	if err != nil || rep.Counts[Behind] != 1 || rep.Recovered != 1 || cell[af].State != cellside.StateApproved {
		t.Fatalf("a-f under this cell's own entry: %+v, %v; a-f %+v", rep, err, cell[af])
	}
	if !slices.Equal(recorder.caughtUpFrom, []cellside.State{cellside.StateReceived, cellside.StateAbandoned}) {
		t.Fatalf("caught up from %v", recorder.caughtUpFrom)
	}
	if r := cell[ae]; r.State != cellside.StateApproved || r.AuthCode != auth || r.Fingerprint != (idempotency.Fingerprint{7}) || r.Recovered() {
		t.Fatalf("a-e caught up: %+v", r)
	}
}

// mapRecorder is a Recorder over TestCheck's map of the cell's records.
type mapRecorder struct {
	cell         map[idempotency.Key]*cellside.Record
	order        []string
	caughtUpFrom []cellside.State
}

func (m *mapRecorder) Recover(_ context.Context, r *cellside.Record) (bool, error) {
	if m.cell[r.Key()] != nil {
		return false, nil
	}
	m.order = append(m.order, r.TransactionID)
	m.cell[r.Key()] = r
	return true, nil
}

func (m *mapRecorder) CatchUp(_ context.Context, r *cellside.Record, from cellside.State) (bool, error) {
	if cur := m.cell[r.Key()]; cur == nil || cur.State != from {
		return false, nil
	}
	m.caughtUpFrom = append(m.caughtUpFrom, from)
	m.cell[r.Key()] = r
	return true, nil
}

// TestRecoveredAgrees: the record Recovered makes of any effect is one
// Compare finds agreeing with it, approved or declined, payment or
// follow-up.
func TestRecoveredAgrees(t *testing.T) {
	capture := effect("c", true, 400)
	capture.Kind, capture.OriginalTransactionId = issuerproto.AdjustKind_ADJUST_KIND_CAPTURE, "a"
	refund := effect("r", true, 50)
	refund.Refund = true
	transfer := effect("t", false, 0)
	transfer.BankTransfer = true
	for _, e := range []*issuerproto.RecordedEffect{effect("a", true, 1000), effect("d", false, 0), capture, refund, transfer} {
		r := Recovered(e, time.Now())
		if f := Compare(e, r); f.Kind != Agrees || !r.Recovered() || !r.State.Terminal() {
			t.Errorf("%s: %+v from %+v", e.GetTransactionId(), f, r)
		}
		// The same record held behind, caught up, agrees too.
		for _, st := range []cellside.State{cellside.StateReceived} {
			behind := *r
			behind.State, behind.AuthCode, behind.DeclineReason, behind.FingerprintKeyID = st, "", "", "fp-cur"
			if f := Compare(e, &behind); f.Kind != Behind {
				t.Errorf("%s held %s: %v, want behind", e.GetTransactionId(), st, f.Kind)
			}
			if f := Compare(e, CaughtUp(e, &behind, time.Now())); f.Kind != Agrees {
				t.Errorf("%s caught up from %s: %+v", e.GetTransactionId(), st, f)
			}
		}
	}
}

// TestRecoveredDeclineHoldsItsAmount: a recovered decline holds the
// amount the issuer's record says was asked for, which the partner was
// answered with; from an issuer that does not say, none.
func TestRecoveredDeclineHoldsItsAmount(t *testing.T) {
	e := effect("d", false, 0)
	e.RequestedAmountMinorUnits, e.RequestedCurrency = 1234, "EUR"
	r := Recovered(e, time.Now())
	if r.State != cellside.StateDeclined || r.Amount != 1234 || r.Currency != "EUR" || r.DeclineReason != "stolen_card" {
		t.Fatalf("recovered %+v", r)
	}
	if f := Compare(e, r); f.Kind != Agrees {
		t.Fatalf("%+v", f)
	}
	if r := Recovered(effect("d", false, 0), time.Now()); r.Amount != 0 || r.Currency != "" {
		t.Fatalf("without the requested amount: %+v", r)
	}
}
