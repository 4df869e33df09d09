package issuersim

import (
	"strings"
	"testing"
	"time"

	"github.com/cellpay/cellpay/pkg/issuerproto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/card"
)

func TestTestCards(t *testing.T) {
	tests := []struct {
		pan        string
		wantReason string // "" for no fixed decline
	}{
		{CardApproved, ""},
		{CardDoNotHonor, ReasonDoNotHonor},
		{CardInsufficientFunds, ReasonInsufficientFunds},
		{CardStolen, ReasonStolenCard},
		{CardExpired, ReasonExpiredCard},
	}
	for _, tt := range tests {
		t.Run(tt.pan, func(t *testing.T) {
			if len(tt.pan) != 16 || !card.Luhn(tt.pan) {
				t.Errorf("%s: want 16 digits passing Luhn", tt.pan)
			}
			reason, ok := FixedDecline(tt.pan)
			if reason != tt.wantReason || ok != (tt.wantReason != "") {
				t.Errorf("FixedDecline = %q, %v; want %q", reason, ok, tt.wantReason)
			}
		})
	}
	if card.Luhn("4111111111111112") {
		t.Error("card.Luhn accepts a bad check digit")
	}
}

func TestAuthCode(t *testing.T) {
	a, b := AuthCode("p-1", "txn-1"), AuthCode("p-1", "txn-2")
	if len(a) != 6 || a != AuthCode("p-1", "txn-1") {
		t.Fatalf("AuthCode(p-1, txn-1) = %q, want 6 stable characters", a)
	}
	if a == b {
		t.Errorf("AuthCode gives %q for two IDs", a)
	}
	// Transaction IDs are a namespace per partner: one ID, two partners,
	// two codes; and no pair runs into another.
	if c := AuthCode("p-2", "txn-1"); c == a {
		t.Errorf("AuthCode gives %q for two partners' txn-1", a)
	}
	if AuthCode("p-1", "2x") == AuthCode("p-12", "x") {
		t.Error("AuthCode(p-1, 2x) == AuthCode(p-12, x)")
	}
	for _, r := range a + b {
		if !strings.ContainsRune(authCodeAlphabet, r) {
			t.Errorf("AuthCode has %q outside its alphabet", r)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"zero value", Config{}, false},
		{"explicit limits", Config{PerTxnLimit: 1, PerCardLimit: 2}, false},
		{"negative per-txn", Config{PerTxnLimit: -1}, true},
		{"negative per-card", Config{PerCardLimit: -1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.withDefaults().validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("validate() = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr {
				defer func() {
					if recover() == nil {
						t.Error("New did not panic on an invalid Config")
					}
				}()
				New(tt.cfg)
			}
		})
	}
	if c := (Config{}).withDefaults(); c.PerTxnLimit != DefaultPerTxnLimit || c.PerCardLimit != DefaultPerCardLimit {
		t.Errorf("defaults = %d, %d", c.PerTxnLimit, c.PerCardLimit)
	}
}

// TestRules runs each rule once through real gRPC, on a fresh server at
// fixedNow (June 2026).
func TestRules(t *testing.T) {
	with := func(r *issuerproto.AuthorizeRequest, f func(*issuerproto.AuthorizeRequest)) *issuerproto.AuthorizeRequest {
		f(r)
		return r
	}
	expiry := func(m, y int32) func(*issuerproto.AuthorizeRequest) {
		return func(r *issuerproto.AuthorizeRequest) { r.ExpiryMonth, r.ExpiryYear = m, y }
	}
	refund := func(r *issuerproto.AuthorizeRequest) { r.Refund = true }
	const other = "5555555555554444"

	tests := []struct {
		name       string
		req        *issuerproto.AuthorizeRequest
		wantCode   codes.Code
		wantField  string // named in the error message
		wantReason string // "" means approved
	}{
		{name: "approved card", req: authReq("t", CardApproved, 1000)},
		{name: "any other card", req: authReq("t", other, 1000)},
		{name: "zero amount", req: authReq("t", other, 0)},
		{name: "do not honor", req: authReq("t", CardDoNotHonor, 1000), wantReason: ReasonDoNotHonor},
		{name: "insufficient funds card", req: authReq("t", CardInsufficientFunds, 1), wantReason: ReasonInsufficientFunds},
		{name: "stolen", req: authReq("t", CardStolen, 1000), wantReason: ReasonStolenCard},
		{name: "expired card", req: authReq("t", CardExpired, 1000), wantReason: ReasonExpiredCard},
		{name: "expires this month", req: with(authReq("t", other, 1), expiry(6, 2026))},
		{name: "expired last month", req: with(authReq("t", other, 1), expiry(5, 2026)), wantReason: ReasonExpiredCard},
		{name: "expired last year", req: with(authReq("t", other, 1), expiry(12, 2025)), wantReason: ReasonExpiredCard},
		{name: "two-digit year valid", req: with(authReq("t", other, 1), expiry(6, 26))},
		{name: "two-digit year expired", req: with(authReq("t", other, 1), expiry(5, 26)), wantReason: ReasonExpiredCard},
		{name: "month zero", req: with(authReq("t", other, 1), expiry(0, 2030)), wantReason: ReasonInvalidExpiry},
		{name: "month thirteen", req: with(authReq("t", other, 1), expiry(13, 2030)), wantReason: ReasonInvalidExpiry},
		{name: "at per-txn limit", req: authReq("t", other, DefaultPerTxnLimit)},
		{name: "bank transfer without card", req: &issuerproto.AuthorizeRequest{PartnerId: testPartner, TransactionId: "t", AmountMinorUnits: 1000, BankTransfer: true}},
		{name: "bank transfer over limit", req: &issuerproto.AuthorizeRequest{PartnerId: testPartner, TransactionId: "t", AmountMinorUnits: DefaultPerTxnLimit + 1, BankTransfer: true}, wantReason: ReasonExceedsLimit},
		{name: "over per-txn limit", req: authReq("t", other, DefaultPerTxnLimit+1), wantReason: ReasonExceedsLimit},
		{name: "expiry checked before limit", req: with(authReq("t", other, DefaultPerTxnLimit+1), expiry(1, 2020)), wantReason: ReasonExpiredCard},
		{name: "refund approved", req: with(authReq("t", other, 1000), refund)},
		{name: "refund over limit", req: with(authReq("t", other, DefaultPerTxnLimit*100), refund)},
		{name: "refund expired", req: with(with(authReq("t", other, 1000), refund), expiry(1, 2020))},
		{name: "refund stolen", req: with(authReq("t", CardStolen, 1000), refund), wantReason: ReasonStolenCard},
		{name: "refund expired test card", req: with(authReq("t", CardExpired, 1000), refund), wantReason: ReasonExpiredCard},
		{name: "no partner id", req: with(authReq("t", other, 1), func(r *issuerproto.AuthorizeRequest) { r.PartnerId = "" }),
			wantCode: codes.InvalidArgument, wantField: "partner_id"},
		{name: "no transaction id", req: authReq("", other, 1), wantCode: codes.InvalidArgument, wantField: "transaction_id"},
		{name: "no pan", req: authReq("t", "", 1), wantCode: codes.InvalidArgument, wantField: "pan"},
		{name: "negative amount", req: authReq("t", other, -1), wantCode: codes.InvalidArgument, wantField: "amount_minor_units"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			c, _ := startGRPC(t, Config{})
			resp, err := c.Authorize(ctx, tt.req)
			if tt.wantCode != codes.OK {
				wantCode(t, err, tt.wantCode)
				if msg := status.Convert(err).Message(); !strings.Contains(msg, tt.wantField) {
					t.Errorf("message %q does not name %q", msg, tt.wantField)
				}
				effects, requests := effectsOf(ctx, t, c, tt.req.GetTransactionId())
				if effects != 0 || requests != 0 {
					t.Errorf("invalid request recorded: effects %d, requests %d", effects, requests)
				}
				return
			}
			if err != nil {
				t.Fatalf("Authorize: %v", err)
			}
			wantApproved := tt.wantReason == ""
			wantAuth := ""
			if wantApproved {
				wantAuth = AuthCode(tt.req.GetPartnerId(), tt.req.GetTransactionId())
			}
			if resp.GetApproved() != wantApproved || resp.GetDeclineReason() != tt.wantReason ||
				resp.GetAuthCode() != wantAuth || resp.GetDuplicate() ||
				resp.GetTransactionId() != tt.req.GetTransactionId() || resp.GetPartnerId() != tt.req.GetPartnerId() {
				t.Errorf("got %v; want approved=%v reason=%q auth=%q", resp, wantApproved, tt.wantReason, wantAuth)
			}
		})
	}
}

// TestPerCardLimit runs a sequence on one server: approvals add up per
// card, declines, duplicates and refunds do not.
func TestPerCardLimit(t *testing.T) {
	ctx := testCtx(t)
	c, _ := startGRPC(t, Config{PerTxnLimit: 600, PerCardLimit: 1000})
	const card, other = "5555555555554444", "4242424242424242"
	refund := authReq("r1", card, 600)
	refund.Refund = true
	steps := []struct {
		req        *issuerproto.AuthorizeRequest
		wantReason string
		wantDup    bool
	}{
		{req: authReq("a", card, 600)},
		{req: authReq("a", card, 600), wantDup: true}, // must not spend again
		{req: authReq("big", card, 601), wantReason: ReasonExceedsLimit},
		{req: authReq("b", card, 401), wantReason: ReasonInsufficientFunds},
		{req: authReq("c", card, 400)}, // exactly at the card limit
		{req: authReq("d", card, 1), wantReason: ReasonInsufficientFunds},
		{req: authReq("e", card, 0)},
		{req: authReq("f", other, 600)}, // another card has its own total
		{req: refund},                   // approved, restores nothing
		{req: authReq("g", card, 1), wantReason: ReasonInsufficientFunds},
	}
	for i, s := range steps {
		resp, err := c.Authorize(ctx, s.req)
		if err != nil {
			t.Fatalf("step %d: Authorize: %v", i, err)
		}
		if resp.GetApproved() != (s.wantReason == "") || resp.GetDeclineReason() != s.wantReason || resp.GetDuplicate() != s.wantDup {
			t.Fatalf("step %d (%s): got %v, want reason %q duplicate %v", i, s.req.GetTransactionId(), resp, s.wantReason, s.wantDup)
		}
	}
}

func TestNowIsConsulted(t *testing.T) {
	ctx := testCtx(t)
	now := fixedNow
	c, _ := startGRPC(t, Config{Now: func() time.Time { return now.AddDate(5, 0, 0) }})
	resp, err := c.Authorize(ctx, authReq("t", CardApproved, 1)) // expires 12/2030, clock in 2031
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetDeclineReason() != ReasonExpiredCard {
		t.Errorf("got %v, want %s with the clock in 2031", resp, ReasonExpiredCard)
	}
}
