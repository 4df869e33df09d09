package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/internal/dev/issuersim"
	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// sums is count and amount per payment type.
type sums map[cellpayv1.PaymentType][2]int64

func (s sums) add(pt cellpayv1.PaymentType, n, amount int64) {
	v := s[pt]
	s[pt] = [2]int64{v[0] + n, v[1] + amount}
}

// TestStatementAndList: a partner of its own runs a day's business, four
// calls at a time: authorizations (some declined by the issuer), bank
// transfers, card refunds, and on the approved authorizations captures,
// refunds and voids. Its statement for the day (every cell's records) holds, per
// payment type, exactly the approvals it was answered and exactly the
// issuer's effects, to the minor unit; ListTransactions pages through
// every transaction it made once, in order, and filters by status and
// type.
func TestStatementAndList(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	p := newCBPartner(t, "stmt")
	started := time.Now().UTC()
	answered := sums{}
	answers := &answerLog{}
	var (
		mu       sync.Mutex
		ids      []string
		approved []original
	)
	// made records a transaction answered.
	made := func(pt cellpayv1.PaymentType, id string, txn *cellpayv1.Transaction, amount int64) {
		mu.Lock()
		defer mu.Unlock()
		ids = append(ids, id)
		if txn.GetStatus() == cellpayv1.TransactionStatus_APPROVED {
			answered.add(pt, 1, amount)
		}
	}
	// Four workers at once: 60 payments, some declined by the issuer, some
	// bank transfers and card refunds.
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < 60; i += 4 {
				pan := freshPAN()
				if i%7 == 3 {
					pan = issuersim.CardDoNotHonor
				}
				req := request(fmt.Sprintf("stmt-%d", i), pan)
				req.PartnerId, req.Amount.MinorUnits = p.id, int64(1000+37*i)
				switch i % 10 {
				case 8:
					req.PaymentType, req.Card = cellpayv1.PaymentType_BANK_TRANSFER, nil
				case 9:
					req.PaymentType = cellpayv1.PaymentType_CARD_REFUND
				}
				txn, err := p.payments.SubmitTransaction(ctx, req)
				answers.add(p.id, req.GetTransactionId(), txn, err)
				if err != nil {
					t.Errorf("%s: %v", req.GetTransactionId(), err)
					return
				}
				made(req.GetPaymentType(), req.GetTransactionId(), txn, req.GetAmount().GetMinorUnits())
				if req.GetPaymentType() == cellpayv1.PaymentType_CARD_AUTHORIZATION && txn.GetStatus() == cellpayv1.TransactionStatus_APPROVED {
					mu.Lock()
					approved = append(approved, original{req, txn.GetCellId(), txn})
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if len(approved) < 10 {
		t.Fatalf("only %d authorizations approved", len(approved))
	}
	for i, o := range approved {
		id := func(what string) string { return fmt.Sprintf("%s-%s", o.req.GetTransactionId(), what) }
		if i%4 == 3 {
			txn := followUp(t, ctx, p.payments, cellpayv1.PaymentType_VOID, o, id("void"), 0)
			answers.add(p.id, id("void"), txn, nil)
			made(cellpayv1.PaymentType_VOID, id("void"), txn, txn.GetAmount().GetMinorUnits())
			continue
		}
		capture := o.req.GetAmount().GetMinorUnits() - int64(i)
		txn := followUp(t, ctx, p.payments, cellpayv1.PaymentType_CAPTURE, o, id("cap"), capture)
		answers.add(p.id, id("cap"), txn, nil)
		made(cellpayv1.PaymentType_CAPTURE, id("cap"), txn, capture)
		txn = followUp(t, ctx, p.payments, cellpayv1.PaymentType_REFUND, o, id("ref"), int64(10+i))
		answers.add(p.id, id("ref"), txn, nil)
		made(cellpayv1.PaymentType_REFUND, id("ref"), txn, int64(10+i))
	}
	finished := time.Now().UTC()

	stated := sums{}
	approvedLines(t, ctx, p, started, finished, func(l *cellpayv1.StatementLine) {
		stated.add(l.GetPaymentType(), l.GetCount(), l.GetAmountMinorUnits())
	})
	issuer := sums{}
	approvedEffects(t, ctx, p.id, ids, func(pt cellpayv1.PaymentType, e *issuerproto.Effect) {
		issuer.add(pt, int64(e.GetEffects()), e.GetAmountMinorUnits())
	})
	payments := sums{}
	for pt, v := range stated {
		switch pt {
		case cellpayv1.PaymentType_CARD_AUTHORIZATION, cellpayv1.PaymentType_CARD_REFUND, cellpayv1.PaymentType_BANK_TRANSFER:
			payments.add(cellpayv1.PaymentType_PAYMENT_TYPE_UNSPECIFIED, v[0], v[1])
		default:
			payments.add(pt, v[0], v[1])
		}
	}
	if !maps.Equal(stated, answered) {
		t.Errorf("statement's approvals %v, the partner was answered %v", stated, answered)
	}
	if !maps.Equal(payments, issuer) {
		t.Errorf("statement's approvals by issuer kind %v, the issuer's effects %v", payments, issuer)
	}
	answers.judge(t, ctx, p.payments)

	// ListTransactions: every transaction once, in order, over pages.
	var listed []string
	var last *cellpayv1.Transaction
	req := &cellpayv1.ListTransactionsRequest{PartnerId: p.id, StartTime: timestamppb.New(started.Add(-time.Minute)),
		EndTime: timestamppb.New(finished.Add(time.Minute)), PageSize: 7}
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("more than 100 pages")
		}
		page, err := p.payments.ListTransactions(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, txn := range page.GetTransactions() {
			if last != nil && txn.GetCreatedAt().AsTime().Before(last.GetCreatedAt().AsTime()) {
				t.Fatalf("%s listed after %s, created later", txn.GetTransactionId(), last.GetTransactionId())
			}
			last = txn
			listed = append(listed, txn.GetTransactionId())
		}
		if page.GetNextPageToken() == "" {
			break
		}
		req.PageToken = page.GetNextPageToken()
	}
	slices.Sort(listed)
	slices.Sort(ids)
	if !slices.Equal(listed, ids) {
		t.Fatalf("listed %d transactions, made %d:\nlisted %v\nmade   %v", len(listed), len(ids), listed, ids)
	}
	captures, err := p.payments.ListTransactions(ctx, &cellpayv1.ListTransactionsRequest{PartnerId: p.id,
		StartTime: req.GetStartTime(), EndTime: req.GetEndTime(), PageSize: 1000,
		Statuses: []cellpayv1.TransactionStatus{cellpayv1.TransactionStatus_APPROVED}, PaymentTypes: []cellpayv1.PaymentType{cellpayv1.PaymentType_CAPTURE}})
	if err != nil {
		t.Fatal(err)
	}
	if n := int64(len(captures.GetTransactions())); n != answered[cellpayv1.PaymentType_CAPTURE][0] {
		t.Fatalf("approved captures listed: %d, answered %d", n, answered[cellpayv1.PaymentType_CAPTURE][0])
	}
}

// byKindCurrency is count and amount per issuer kind (a capture, void or
// refund; the rest, authorizations, card refunds and transfers, under
// PAYMENT_TYPE_UNSPECIFIED, as the issuer does not tell them apart) and
// currency.
type byKindCurrency map[[2]string][2]int64

func (s byKindCurrency) add(pt cellpayv1.PaymentType, currency string, n, amount int64) {
	switch pt {
	case cellpayv1.PaymentType_CAPTURE, cellpayv1.PaymentType_VOID, cellpayv1.PaymentType_REFUND:
	default:
		pt = cellpayv1.PaymentType_PAYMENT_TYPE_UNSPECIFIED
	}
	k := [2]string{pt.String(), currency}
	v := s[k]
	s[k] = [2]int64{v[0] + n, v[1] + amount}
}

// TestStatementUnderLoad: a partner of its own under the load tool's open
// loop (60 calls a second for 8 s in three markets and currencies, a tenth
// of the cards declined by the issuer, card refunds and bank transfers,
// half of the approved authorizations followed by a life: a capture or
// two then refunds, or a void). Once every PENDING has resolved and the
// checker has judged every answer, the partner's statement of the day (of
// every day the run touched), by kind and currency, equals the issuer's
// effects for its transactions, to the minor unit.
func TestStatementUnderLoad(t *testing.T) {
	ctx := ctxFor(t, 3*time.Minute)
	p := newCBPartner(t, "stmt-load")
	tlsOpt, err := client.TLS(env.p.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now().UTC()
	answers := &answerLog{}
	var (
		mu  sync.Mutex
		ids []string
	)
	made := func(partner, id string, txn *cellpayv1.Transaction, err error) {
		answers.add(partner, id, txn, err)
		mu.Lock()
		ids = append(ids, id)
		mu.Unlock()
	}
	rep, err := load.Run(ctx, load.Config{
		Target: load.TargetGTR, Addr: env.gtrAddr, Mode: load.ModeOpen, Rate: 60, Concurrency: 64, Count: 480, Duration: 8 * time.Second,
		Seed: uint64(time.Now().UnixNano()), RunID: runID + "-stl", Partners: []string{p.id}, Markets: []string{"GB", "DE", "US"},
		DeclineShare: 0.1, FollowUps: 0.5, PerRequestTimeout: 12 * time.Second,
		DialOptions: []grpc.DialOption{tlsOpt, grpc.WithChainUnaryInterceptor(client.PartnerKeys(map[string]string{p.id: p.key}))},
		OnResult:    func(r load.Result) { made(r.PartnerID, r.Request.GetTransactionId(), r.Transaction, r.Err) },
		OnFollowUp:  func(r load.FollowUpResult) { made(r.PartnerID, r.ID, r.Transaction, r.Err) },
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	finished := time.Now().UTC()
	if fu := rep.FollowUps; rep.Completed < 400 || fu == nil || fu.Answered < 50 {
		t.Fatalf("the load: %d completed, follow-ups %+v", rep.Completed, fu)
	}
	answers.judge(t, ctx, p.payments)

	stated := byKindCurrency{}
	approvedLines(t, ctx, p, started, finished, func(l *cellpayv1.StatementLine) {
		stated.add(l.GetPaymentType(), l.GetCurrency(), l.GetCount(), l.GetAmountMinorUnits())
	})
	issuer := byKindCurrency{}
	approvedEffects(t, ctx, p.id, ids, func(pt cellpayv1.PaymentType, e *issuerproto.Effect) {
		issuer.add(pt, e.GetCurrency(), int64(e.GetEffects()), e.GetAmountMinorUnits())
	})
	t.Logf("%d calls (%v), follow-ups %v; the statement's approvals by kind and currency %v", rep.Completed, rep.Statuses, rep.FollowUps.Calls, stated)
	if len(stated) < 4 || !maps.Equal(stated, issuer) {
		t.Fatalf("the statement's approvals by kind and currency %v, the issuer's effects %v", stated, issuer)
	}
}

// approvedLines calls add with every APPROVED line of p's statements of
// the days from started to finished (one, unless the run crossed midnight
// UTC).
func approvedLines(t *testing.T, ctx context.Context, p *cbPartner, started, finished time.Time, add func(*cellpayv1.StatementLine)) {
	t.Helper()
	for day := started.Truncate(24 * time.Hour); !day.After(finished); day = day.Add(24 * time.Hour) {
		st, err := p.payments.GetStatement(ctx, &cellpayv1.GetStatementRequest{PartnerId: p.id, Date: day.Format(time.DateOnly)})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range st.GetLines() {
			if l.GetStatus() == cellpayv1.TransactionStatus_APPROVED {
				add(l)
			}
		}
	}
}

// approvedEffects calls add with each effect the issuer approved for
// partner's transactions ids, and its payment type: CAPTURE, VOID or
// REFUND, or PAYMENT_TYPE_UNSPECIFIED for the rest (an authorization, card
// refund or transfer, which the issuer does not tell apart).
func approvedEffects(t *testing.T, ctx context.Context, partner string, ids []string, add func(cellpayv1.PaymentType, *issuerproto.Effect)) {
	t.Helper()
	refs := make([]*issuerproto.TransactionRef, len(ids))
	for i, id := range ids {
		refs[i] = &issuerproto.TransactionRef{PartnerId: partner, TransactionId: id}
	}
	eff, err := env.issuer.Effects(ctx, &issuerproto.EffectsRequest{Transactions: refs})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[issuerproto.AdjustKind]cellpayv1.PaymentType{
		issuerproto.AdjustKind_ADJUST_KIND_CAPTURE: cellpayv1.PaymentType_CAPTURE,
		issuerproto.AdjustKind_ADJUST_KIND_VOID:    cellpayv1.PaymentType_VOID,
		issuerproto.AdjustKind_ADJUST_KIND_REFUND:  cellpayv1.PaymentType_REFUND,
	}
	for _, e := range eff.GetEffects() {
		if e.GetPartnerId() == partner && e.GetApproved() {
			add(kinds[e.GetKind()], e)
		}
	}
}
