package cell

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// appliedIssuer's record holds one approved authorization for cell-t.
type appliedIssuer struct {
	issuerproto.UnimplementedIssuerServer
	effect *issuerproto.RecordedEffect
}

func (a appliedIssuer) ListEffects(_ context.Context, in *issuerproto.ListEffectsRequest) (*issuerproto.ListEffectsResponse, error) {
	if in.GetTerminalId() != a.effect.GetTerminalId() {
		return &issuerproto.ListEffectsResponse{}, nil
	}
	return &issuerproto.ListEffectsResponse{Effects: []*issuerproto.RecordedEffect{a.effect}}, nil
}

// TestRecoverAtStartCatchesUpReceived: a cell started with RecoverAtStart
// on a database that holds received a transaction the issuer applied for
// it (a promoted copy that lost the lost primary's later commits: sending,
// approved) records the issuer's outcome before it serves, and abandons
// only what the issuer never applied. Abandoning its leftovers first, as
// a start without recovery does, had left the applied one abandoned where
// the issuer approved it, with no directory to say it was this cell's
// (TestSiteLostCellRecoversFromItsCopy, 2026-12-07: 2 transactions
// answered APPROVED and read NOT_FOUND).
func TestRecoverAtStartCatchesUpReceived(t *testing.T) {
	cfg := lifeConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	gs := grpc.NewServer()
	issuerproto.RegisterIssuerServer(gs, appliedIssuer{effect: &issuerproto.RecordedEffect{
		PartnerId: "p-001", TransactionId: "applied", Approved: true, AuthCode: "A1B2C3",
		AmountMinorUnits: 1250, Currency: "GBP", AppliedAt: timestamppb.New(now), TerminalId: cfg.ID,
	}})
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	cfg.IssuerAddr = lis.Addr().String()

	// The database as the copy holds it: both received, left by this
	// instance before it stopped.
	st, err := connectStore(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	st.SetInstance(cfg.Instance)
	if err := st.RenewLease(ctx, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"applied", "never-sent"} {
		r := &cellside.Record{
			TransactionID: id, Fingerprint: [32]byte{1}, State: cellside.StateReceived,
			PaymentType: cellpayv1.PaymentType_CARD_AUTHORIZATION, PartnerID: "p-001", Market: "GB",
			Amount: 1250, Currency: "GBP", SettlementAmount: 1250, SettlementCurrency: "GBP", RiskAmount: 1250,
			MerchantID: "m-1", MCC: "5411", MerchantCountry: "GB", MaskedPAN: "424242******4242",
			PANHash: []byte{1}, PANHashKeyID: "pan", FingerprintKeyID: "fp", RefdataVersion: "rd-1", RouteRule: "default",
			Attempt: 1, CellID: cfg.ID, CreatedAt: now.Add(-time.Second), UpdatedAt: now.Add(-time.Second),
		}
		if ok, _, err := st.Insert(ctx, r); err != nil || !ok {
			t.Fatalf("insert %s: %v, %v", id, ok, err)
		}
	}
	st.Close()

	cfg.RecoverAtStart = time.Minute
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown(context.Background())
	for id, want := range map[string]cellside.State{"applied": cellside.StateApproved, "never-sent": cellside.StateAbandoned} {
		r, err := c.st.Get(ctx, idempotency.Key{PartnerID: "p-001", TransactionID: id})
		if err != nil {
			t.Fatal(err)
		}
		if r.State != want {
			t.Errorf("%s: %v, want %v", id, r.State, want)
		}
		if id == "applied" && r.AuthCode != "A1B2C3" {
			t.Errorf("%s: auth code %q, want the issuer's", id, r.AuthCode)
		}
	}
}
