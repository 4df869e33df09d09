package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/internal/dev/issuersim"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

const approvedPAN = "4242424242424242"

func TestApproveDeclineReplayConflict(t *testing.T) {
	ctx := ctxFor(t, time.Minute)

	// An approval: one issuer effect, the record in the owning cell.
	approve := request("approve", approvedPAN)
	got, err := env.payments.SubmitTransaction(ctx, approve)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetStatus() != cellpayv1.TransactionStatus_APPROVED || got.GetAuthCode() == "" || got.GetCellId() == "" {
		t.Fatalf("approval: %v", got)
	}
	if got.GetMaskedPan() != "424242******4242" || got.GetAttempts() != 1 || got.GetRouteRule() != "everything" {
		t.Fatalf("approval details: %v", got)
	}
	// p-001 settles in GBP: no conversion.
	if s := got.GetSettlementAmount(); s.GetMinorUnits() != 1250 || s.GetCurrency() != "GBP" || got.GetRefdataVersion() == "" {
		t.Fatalf("settlement: %v", got)
	}
	if e, r := effects(t, ctx, approve.PartnerId, approve.TransactionId); e != 1 || r != 1 {
		t.Fatalf("issuer after approval: effects %d, requests %d; want 1, 1", e, r)
	}

	// A decline by the issuer's test card: also exactly one effect.
	decline := request("decline", issuersim.CardDoNotHonor)
	dec, err := env.payments.SubmitTransaction(ctx, decline)
	if err != nil {
		t.Fatal(err)
	}
	if dec.GetStatus() != cellpayv1.TransactionStatus_DECLINED || dec.GetDeclineReason() != issuersim.ReasonDoNotHonor {
		t.Fatalf("decline: %v", dec)
	}
	if e, _ := effects(t, ctx, decline.PartnerId, decline.TransactionId); e != 1 {
		t.Fatalf("issuer effects after decline: %d, want 1", e)
	}

	// A replay: the identical answer and nothing new at the issuer.
	again, err := env.payments.SubmitTransaction(ctx, proto.Clone(approve).(*cellpayv1.SubmitTransactionRequest))
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, again) {
		t.Fatalf("replay answered differently:\nfirst  %v\nreplay %v", got, again)
	}
	if e, r := effects(t, ctx, approve.PartnerId, approve.TransactionId); e != 1 || r != 1 {
		t.Fatalf("issuer after replay: effects %d, requests %d; want 1, 1", e, r)
	}

	// A conflicting replay: ALREADY_EXISTS, still one effect.
	conflict := proto.Clone(approve).(*cellpayv1.SubmitTransactionRequest)
	conflict.Amount.MinorUnits = 9999
	if _, err := env.payments.SubmitTransaction(ctx, conflict); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("conflicting replay: %v, want AlreadyExists", err)
	}
	if e, _ := effects(t, ctx, approve.PartnerId, approve.TransactionId); e != 1 {
		t.Fatalf("issuer effects after conflict: %d, want 1", e)
	}

	// GetTransaction reads the same record back.
	read, err := env.payments.GetTransaction(ctx, &cellpayv1.GetTransactionRequest{PartnerId: approve.PartnerId, TransactionId: approve.TransactionId})
	if err != nil || !proto.Equal(read, got) {
		t.Fatalf("GetTransaction = %v, %v; want %v", read, err, got)
	}
	if _, err := env.payments.GetTransaction(ctx, &cellpayv1.GetTransactionRequest{PartnerId: approve.PartnerId, TransactionId: runID + "-never"}); status.Code(err) != codes.NotFound {
		t.Fatalf("GetTransaction of an unknown ID: %v, want NotFound", err)
	}

	// The rows in the owning cell's own Postgres, and in no other cell.
	for _, c := range env.cells {
		db := cellDB(t, ctx, c.ID)
		var state, masked, auth, cellID string
		var amount int64
		err := db.QueryRow(ctx, `SELECT state, masked_pan, auth_code, amount, cell_id FROM transactions
			WHERE partner_id = $1 AND transaction_id = $2`,
			approve.PartnerId, approve.TransactionId).Scan(&state, &masked, &auth, &amount, &cellID)
		if c.ID != got.GetCellId() {
			if err == nil {
				t.Fatalf("cell %s also holds %s", c.ID, approve.TransactionId)
			}
			continue
		}
		if err != nil {
			t.Fatalf("owning cell %s: %v", c.ID, err)
		}
		if state != "approved" || masked != "424242******4242" || auth != got.GetAuthCode() || amount != 1250 || cellID != c.ID {
			t.Fatalf("row in %s: state %s masked %s auth %s amount %d cell %s", c.ID, state, masked, auth, amount, cellID)
		}
	}
}

func TestBadInput(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	type mut = func(*cellpayv1.SubmitTransactionRequest)
	cases := []struct {
		name, field string
		mut         mut
	}{
		{"empty id", "transaction_id", func(r *cellpayv1.SubmitTransactionRequest) { r.TransactionId = "" }},
		{"long id", "transaction_id", func(r *cellpayv1.SubmitTransactionRequest) { r.TransactionId = strings.Repeat("x", 65) }},
		{"id chars", "transaction_id", func(r *cellpayv1.SubmitTransactionRequest) { r.TransactionId = "bad id!" }},
		{"zero amount", "amount.minor_units", func(r *cellpayv1.SubmitTransactionRequest) { r.Amount.MinorUnits = 0 }},
		{"negative amount", "amount.minor_units", func(r *cellpayv1.SubmitTransactionRequest) { r.Amount.MinorUnits = -100 }},
		{"unknown currency", "amount.currency", func(r *cellpayv1.SubmitTransactionRequest) { r.Amount.Currency = "ABC" }},
		{"mcc", "merchant.mcc", func(r *cellpayv1.SubmitTransactionRequest) { r.Merchant.Mcc = "54" }},
		{"luhn", "card.pan", func(r *cellpayv1.SubmitTransactionRequest) { r.Card.Pan = "4242424242424241" }},
		{"pan length", "card.pan", func(r *cellpayv1.SubmitTransactionRequest) { r.Card.Pan = "42424242" }},
		{"missing card", "card", func(r *cellpayv1.SubmitTransactionRequest) { r.Card = nil }},
		{"unknown type", "payment_type", func(r *cellpayv1.SubmitTransactionRequest) { r.PaymentType = 99 }},
		{"expired", "card.expiry_year", func(r *cellpayv1.SubmitTransactionRequest) { r.Card.ExpiryYear = 2020 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := request("bad-"+strings.ReplaceAll(c.name, " ", "-"), approvedPAN)
			c.mut(r)
			_, err := env.payments.SubmitTransaction(ctx, r)
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument {
				t.Fatalf("code %v (%v), want InvalidArgument", st.Code(), err)
			}
			var field string
			for _, d := range st.Details() {
				if br, ok := d.(*errdetails.BadRequest); ok && len(br.FieldViolations) > 0 {
					field = br.FieldViolations[0].Field
				}
			}
			if field != c.field || !strings.Contains(st.Message(), c.field) {
				t.Fatalf("error %q names field %q, want %q", st.Message(), field, c.field)
			}
			if strings.Contains(st.Message(), r.GetCard().GetPan()) && r.GetCard().GetPan() != "" {
				t.Fatal("the error echoes the card number")
			}
		})
	}
	// Nothing reached the issuer, and the GTR still serves.
	if e, r := effects(t, ctx, "p-001", runID+"-bad-luhn"); e != 0 || r != 0 {
		t.Fatalf("a rejected request reached the issuer: %d effects", e)
	}
	if _, err := env.payments.SubmitTransaction(ctx, request("after-bad", approvedPAN)); err != nil {
		t.Fatalf("GTR after bad input: %v", err)
	}
}

// TestLoadTool drives the platform with the load tool, through the GTR and
// straight at a cell, and checks its JSON report.
func TestLoadTool(t *testing.T) {
	for _, target := range []struct{ name, addr string }{{"gtr", env.gtrAddr}, {"cell", env.cells[0].Addr}} {
		t.Run(target.name, func(t *testing.T) {
			ctx := ctxFor(t, 2*time.Minute)
			cmd := exec.CommandContext(ctx, filepath.Join(env.bin, "loadgen"), "-target", target.name, "-addr", target.addr,
				"-mode", "closed", "-c", "8", "-n", "300", "-d", "60s", "-json", "-run-id", runID+"-lg"+target.name, "-decline-share", "0.1",
				"-ca", env.p.CAFile(), "-keys", env.p.PartnerKeyDir())
			var out bytes.Buffer
			cmd.Stdout = &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("loadgen: %v\n%s", err, out.String())
			}
			var rep struct {
				Completed int64            `json:"completed"`
				Errors    map[string]int64 `json:"errors"`
				Statuses  map[string]int64 `json:"statuses"`
			}
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("report: %v\n%s", err, out.String())
			}
			if rep.Completed != 300 || len(rep.Errors) != 0 {
				t.Fatalf("report: %+v", rep)
			}
			if rep.Statuses["APPROVED"] == 0 || rep.Statuses["DECLINED"] == 0 || rep.Statuses["PENDING"] != 0 {
				t.Fatalf("statuses: %v", rep.Statuses)
			}
		})
	}
}
