package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// TestTransactionsBelongToPartners: transaction IDs are a namespace per
// partner. Four partners send one transaction ID at once, each with its own
// amount, merchant and card, through the real GTR, cells, Postgres and
// issuer. They are four transactions: each approved with its own
// settlement and auth code, exactly one issuer effect each, each recorded
// once and readable only by its own partner with its own payload. Another
// partner reading the ID gets NOT_FOUND, exactly as for an ID never used;
// a partner reusing its ID with another payload gets ALREADY_EXISTS; a
// replay gets the identical answer.
func TestTransactionsBelongToPartners(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	id := runID + "-shared"
	// The partners' settlement currencies (config/refdata): one each.
	partners := []struct{ id, settles string }{{"p-001", "GBP"}, {"p-002", "USD"}, {"p-003", "EUR"}, {"p-004", "JPY"}}
	reqs := make([]*cellpayv1.SubmitTransactionRequest, len(partners))
	for i, p := range partners {
		r := request("shared", luhnPAN(fmt.Sprintf("4%014d", 27182800+i)))
		r.PartnerId = p.id
		r.Amount.MinorUnits = int64(1000 + 111*(i+1))
		r.Merchant.Id = fmt.Sprintf("m-shared-%d", i+1)
		reqs[i] = r
	}
	answers := make([]*cellpayv1.Transaction, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() { answers[i], errs[i] = env.payments.SubmitTransaction(ctx, r) })
	}
	wg.Wait()

	authCodes := map[string]string{}
	for i, r := range reqs {
		got, p := answers[i], partners[i]
		if errs[i] != nil {
			t.Fatalf("%s: %v", p.id, errs[i])
		}
		if got.GetStatus() != cellpayv1.TransactionStatus_APPROVED || got.GetAuthCode() == "" || got.GetTransactionId() != id ||
			got.GetPartnerId() != p.id || got.GetAmount().GetMinorUnits() != r.Amount.MinorUnits || got.GetMerchantId() != r.Merchant.Id {
			t.Fatalf("%s: answered %v, want its own approval", p.id, got)
		}
		if s := got.GetSettlementAmount(); s.GetCurrency() != p.settles || s.GetMinorUnits() <= 0 {
			t.Fatalf("%s: settlement %v, want %s", p.id, s, p.settles)
		}
		if other, ok := authCodes[got.GetAuthCode()]; ok {
			t.Fatalf("%s and %s were given one auth code %s", other, p.id, got.GetAuthCode())
		}
		authCodes[got.GetAuthCode()] = p.id
		if e, n := effects(t, ctx, p.id, id); e != 1 || n != 1 {
			t.Fatalf("%s: issuer effects %d, requests %d; want 1, 1", p.id, e, n)
		}
	}
	t.Logf("one ID, four partners: cells %s, %s, %s, %s", answers[0].GetCellId(), answers[1].GetCellId(),
		answers[2].GetCellId(), answers[3].GetCellId())
	// p-001 pays in GBP and settles in GBP: its own amount, unconverted.
	if s := answers[0].GetSettlementAmount(); s.GetMinorUnits() != reqs[0].Amount.MinorUnits {
		t.Fatalf("p-001 settlement %v, want its own %d GBP", s, reqs[0].Amount.MinorUnits)
	}

	// Each partner reads its own transaction back, with its own payload;
	// its row is in the owning cell's Postgres and in no other cell.
	for i, r := range reqs {
		p := partners[i].id
		read, err := env.payments.GetTransaction(ctx, &cellpayv1.GetTransactionRequest{PartnerId: p, TransactionId: id})
		if err != nil || !proto.Equal(read, answers[i]) {
			t.Fatalf("%s: GetTransaction = %v, %v; want %v", p, read, err, answers[i])
		}
		holders := 0
		for _, c := range env.cells {
			var amount int64
			var merchant, auth string
			err := cellDB(t, ctx, c.ID).QueryRow(ctx, `SELECT amount, merchant_id, auth_code FROM transactions
				WHERE partner_id = $1 AND transaction_id = $2`, p, id).Scan(&amount, &merchant, &auth)
			if err != nil {
				continue
			}
			holders++
			if c.ID != answers[i].GetCellId() || amount != r.Amount.MinorUnits || merchant != r.Merchant.Id || auth != answers[i].GetAuthCode() {
				t.Fatalf("%s: row in %s: amount %d merchant %s auth %s; answered %v", p, c.ID, amount, merchant, auth, answers[i])
			}
		}
		if holders != 1 {
			t.Fatalf("%s: %d cells hold %s, want 1", p, holders, id)
		}
	}

	// Another partner's ID is NOT_FOUND, exactly like an ID never used:
	// p-005 reads the shared ID; p-001 reads an ID only p-002 used.
	only := request("only-p002", luhnPAN(fmt.Sprintf("4%014d", 27182899)))
	only.PartnerId = "p-002"
	if _, err := env.payments.SubmitTransaction(ctx, only); err != nil {
		t.Fatal(err)
	}
	for _, probe := range []struct{ partner, id string }{{"p-005", id}, {"p-001", only.TransactionId}} {
		_, theirs := env.payments.GetTransaction(ctx, &cellpayv1.GetTransactionRequest{PartnerId: probe.partner, TransactionId: probe.id})
		_, never := env.payments.GetTransaction(ctx, &cellpayv1.GetTransactionRequest{PartnerId: probe.partner, TransactionId: runID + "-never-used"})
		st, nv := status.Convert(theirs), status.Convert(never)
		if st.Code() != codes.NotFound || nv.Code() != codes.NotFound || st.Message() != nv.Message() || len(st.Details()) != len(nv.Details()) {
			t.Fatalf("%s reading %s: %v; an ID never used: %v; want the same NOT_FOUND", probe.partner, probe.id, theirs, never)
		}
	}

	// The same partner reusing its ID with another payload: ALREADY_EXISTS,
	// and nothing new at the issuer, for it or anyone else.
	conflict := proto.Clone(reqs[2]).(*cellpayv1.SubmitTransactionRequest)
	conflict.Amount.MinorUnits++
	if _, err := env.payments.SubmitTransaction(ctx, conflict); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("p-003 reusing its ID with another payload: %v, want AlreadyExists", err)
	}
	// A replay of each partner's own request: the identical answer.
	for i, r := range reqs {
		again, err := env.payments.SubmitTransaction(ctx, proto.Clone(r).(*cellpayv1.SubmitTransactionRequest))
		if err != nil || !proto.Equal(again, answers[i]) {
			t.Fatalf("%s: replay = %v, %v; want %v", partners[i].id, again, err, answers[i])
		}
		if e, n := effects(t, ctx, partners[i].id, id); e != 1 || n != 1 {
			t.Fatalf("%s after conflict and replay: issuer effects %d, requests %d; want 1, 1", partners[i].id, e, n)
		}
	}

	// The checker, per (partner, ID), finds four clean transactions.
	var as []checker.Answer
	for i, r := range reqs {
		as = append(as, checker.AnswerOf(r.PartnerId, r.TransactionId, answers[i], nil))
	}
	rep, err := checker.Check(ctx, checkerConfig(), as)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Attempted != 4 || rep.Approved != 4 || rep.IssuerEffects != 4 {
		t.Fatalf("checker:\n%s", rep)
	}
}
