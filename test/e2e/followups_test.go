package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/api/apierr"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// original is an approved authorization of a follow-up test, with the
// cell that decided it.
type original struct {
	req  *cellpayv1.SubmitTransactionRequest
	cell string
	txn  *cellpayv1.Transaction // its answer
}

// authorizeOriginals approves n authorizations of amount through
// payments, their IDs spread over the cells by a table hashing on the
// transaction.
func authorizeOriginals(t *testing.T, ctx context.Context, payments cellpayv1.PaymentsClient, prefix string, n int, amount int64) []original {
	t.Helper()
	out := make([]original, n)
	for i := range out {
		req := request(fmt.Sprintf("%s-%d", prefix, i), freshPAN())
		req.Amount.MinorUnits = amount
		txn, err := payments.SubmitTransaction(ctx, req)
		if err != nil || txn.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
			t.Fatalf("authorization %d: %v %v", i, txn.GetStatus(), err)
		}
		out[i] = original{req, txn.GetCellId(), txn}
	}
	return out
}

// followUpOnce sends one capture or refund of o; the answer, final.
func followUpOnce(ctx context.Context, p cellpayv1.PaymentsClient, kind cellpayv1.PaymentType, o original, id string, minor int64) (*cellpayv1.Transaction, error) {
	amount := &cellpayv1.Money{MinorUnits: minor, Currency: o.req.GetAmount().GetCurrency()}
	var (
		txn *cellpayv1.Transaction
		err error
	)
	switch kind {
	case cellpayv1.PaymentType_CAPTURE:
		txn, err = p.CaptureTransaction(ctx, &cellpayv1.CaptureTransactionRequest{TransactionId: id, PartnerId: o.req.GetPartnerId(),
			OriginalTransactionId: o.req.GetTransactionId(), Market: o.req.GetMarket(), Amount: amount})
	case cellpayv1.PaymentType_REFUND:
		txn, err = p.RefundTransaction(ctx, &cellpayv1.RefundTransactionRequest{TransactionId: id, PartnerId: o.req.GetPartnerId(),
			OriginalTransactionId: o.req.GetTransactionId(), Market: o.req.GetMarket(), Amount: amount})
	default:
		txn, err = p.VoidTransaction(ctx, &cellpayv1.VoidTransactionRequest{TransactionId: id, PartnerId: o.req.GetPartnerId(),
			OriginalTransactionId: o.req.GetTransactionId(), Market: o.req.GetMarket()})
	}
	return txn, err
}

// followUp sends a capture or refund of o as a partner does: the same ID
// again on UNAVAILABLE, ABORTED or a deadline, and a PENDING answer read
// until final; bounded by 60 s.
func followUp(t *testing.T, ctx context.Context, p cellpayv1.PaymentsClient, kind cellpayv1.PaymentType, o original, id string, minor int64) *cellpayv1.Transaction {
	t.Helper()
	var (
		txn *cellpayv1.Transaction
		err error
	)
	testutil.Eventually(t, 60*time.Second, fmt.Sprintf("%v %s of %s answered final", kind, id, o.req.GetTransactionId()), func() bool {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		txn, err = followUpOnce(cctx, p, kind, o, id, minor)
		switch status.Code(err) {
		case codes.Unavailable, codes.Aborted, codes.DeadlineExceeded:
			return false
		case codes.OK:
			return txn.GetStatus() != cellpayv1.TransactionStatus_PENDING
		}
		return true
	})
	if err != nil {
		t.Fatalf("%v %s of %s: %v", kind, id, o.req.GetTransactionId(), err)
	}
	return txn
}

// captureAndRefund captures 300 and 200 of o through two access points,
// then refunds 100 and 150: each approved by o's own cell.
func captureAndRefund(t *testing.T, ctx context.Context, via [2]cellpayv1.PaymentsClient, o original, tag string, answers *answerLog) {
	t.Helper()
	steps := []struct {
		kind  cellpayv1.PaymentType
		minor int64
	}{{cellpayv1.PaymentType_CAPTURE, 300}, {cellpayv1.PaymentType_CAPTURE, 200}, {cellpayv1.PaymentType_REFUND, 100}, {cellpayv1.PaymentType_REFUND, 150}}
	for i, s := range steps {
		id := fmt.Sprintf("%s-%s-%d", o.req.GetTransactionId(), tag, i)
		txn := followUp(t, ctx, via[i%2], s.kind, o, id, s.minor)
		answers.add(o.req.GetPartnerId(), id, txn, nil)
		if txn.GetStatus() != cellpayv1.TransactionStatus_APPROVED || txn.GetCellId() != o.cell || txn.GetOriginalTransactionId() != o.req.GetTransactionId() {
			t.Fatalf("%s: %v from %s (original %s), want APPROVED by %s, the original's cell", id, txn.GetStatus(), txn.GetCellId(), txn.GetOriginalTransactionId(), o.cell)
		}
	}
}

// answerLog collects answers for the checker, safe for concurrent use.
type answerLog struct {
	mu  sync.Mutex
	all []checker.Answer
}

func (l *answerLog) add(partner, id string, txn *cellpayv1.Transaction, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, checker.AnswerOf(partner, id, txn, err))
}

// judge runs the checker over the answers, reading them back through
// payments: nothing lost, nothing twice, every amount equal in the cells
// and at the issuer.
func (l *answerLog) judge(t *testing.T, ctx context.Context, payments cellpayv1.PaymentsClient) {
	t.Helper()
	cfg := checkerConfig()
	cfg.Payments = payments
	// A follow-up or payment answered PENDING (its cell killed at the
	// wrong moment) is resolved by its cell's reconciler: wait for it.
	keys := make([]idempotency.Key, len(l.all))
	for i, a := range l.all {
		keys[i] = a.Key()
	}
	if took, err := checker.WaitResolved(ctx, cfg, keys, 60*time.Second); err != nil {
		t.Fatalf("after %v: %v", took, err)
	}
	report, err := checker.Check(ctx, cfg, l.all)
	if err != nil {
		t.Fatal(err)
	}
	if !report.OK() {
		t.Fatalf("invariants broken:\n%s", report.String())
	}
}

// checkSums: every original's answer shows exactly the captures and
// refunds approved, and the issuer holds the same amounts, each follow-up
// applied at most once. It finds the follow-ups in the issuer's record of
// the last 10 minutes (ListEffects, by pages: the issuer holds every test's
// transactions, more than one message carries), then reads their counters.
func checkSums(t *testing.T, ctx context.Context, p cellpayv1.PaymentsClient, want map[string][2]int64) {
	t.Helper()
	var refs []*issuerproto.TransactionRef
	for _, e := range recordedEffects(t, ctx, time.Now().Add(-10*time.Minute)) {
		if _, ours := want[e.GetOriginalTransactionId()]; ours && e.GetPartnerId() == "p-001" {
			refs = append(refs, &issuerproto.TransactionRef{PartnerId: e.GetPartnerId(), TransactionId: e.GetTransactionId()})
		}
	}
	resp := &issuerproto.EffectsResponse{}
	if len(refs) > 0 { // none would ask for every transaction the issuer has
		var err error
		if resp, err = env.issuer.Effects(ctx, &issuerproto.EffectsRequest{Transactions: refs}); err != nil {
			t.Fatal(err)
		}
	}
	issuer := map[string][2]int64{}
	for _, e := range resp.GetEffects() {
		if _, ours := want[e.GetOriginalTransactionId()]; !ours || e.GetPartnerId() != "p-001" {
			continue
		}
		if e.GetEffects() > 1 {
			t.Errorf("issuer: %s applied %d times", e.GetTransactionId(), e.GetEffects())
		}
		if !e.GetApproved() {
			continue
		}
		s := issuer[e.GetOriginalTransactionId()]
		switch e.GetKind() {
		case issuerproto.AdjustKind_ADJUST_KIND_CAPTURE:
			s[0] += e.GetAmountMinorUnits()
		case issuerproto.AdjustKind_ADJUST_KIND_REFUND:
			s[1] += e.GetAmountMinorUnits()
		}
		issuer[e.GetOriginalTransactionId()] = s
	}
	for id, w := range want {
		txn, err := p.GetTransaction(ctx, &cellpayv1.GetTransactionRequest{PartnerId: "p-001", TransactionId: id})
		if err != nil {
			t.Fatalf("read %s: %v", id, err)
		}
		got := [2]int64{txn.GetCapturedAmount().GetMinorUnits(), txn.GetRefundedAmount().GetMinorUnits()}
		if got != w || issuer[id] != w {
			t.Errorf("%s: captured, refunded %v in its answer, %v at the issuer, want %v", id, got, issuer[id], w)
		}
	}
}

// TestFollowUps: authorizations captured in two parts and refunded in two
// parts through both access points, with the original's cell (a) drained
// to 0%, (b) killed -9 and restarted, (c) its keys moved by a table
// change: every follow-up reaches the original's cell, the amounts are
// exact in the answers and at the issuer, and no follow-up is applied
// twice. Over-capture, refund beyond the captures, void after a capture
// and an unknown original are refused naming their rule.
func TestFollowUps(t *testing.T) {
	ctx := ctxFor(t, 5*time.Minute)
	_, _, gtrs, admins := twoReplicasOn(t, "fu", "transaction")
	via := [2]cellpayv1.PaymentsClient{gtrs[0].payments, gtrs[1].payments}
	a1 := admins[0]
	origs := authorizeOriginals(t, ctx, via[0], "fu-auth", 12, 1000)
	answers := &answerLog{}
	for _, o := range origs {
		answers.add(o.req.GetPartnerId(), o.req.GetTransactionId(), o.txn, nil)
	}
	stopLoad := backgroundLoad(t, ctx, via, answers)
	defer stopLoad()
	byCell := map[string][]original{}
	for _, o := range origs {
		byCell[o.cell] = append(byCell[o.cell], o)
	}
	want := map[string][2]int64{}
	for _, o := range origs {
		want[o.req.GetTransactionId()] = [2]int64{}
	}
	done := func(o original) { want[o.req.GetTransactionId()] = [2]int64{500, 250} }
	// One original per cell for each phase.
	pick := func(phase int) []original {
		var out []original
		for _, os := range byCell {
			if phase < len(os) {
				out = append(out, os[phase])
			}
		}
		return out
	}

	// (a) Each original's cell drained to 0% (one at a time): follow-ups
	// still reach it.
	for _, o := range pick(0) {
		if _, err := a1.Drain(ctx, &adminproto.DrainRequest{CellId: o.cell, Percent: 100}); err != nil {
			t.Fatal(err)
		}
		waitRoutedOff(t, ctx, admins, o)
		captureAndRefund(t, ctx, via, o, "drained", answers)
		done(o)
		if _, err := a1.Restore(ctx, &adminproto.RestoreRequest{CellId: o.cell}); err != nil {
			t.Fatal(err)
		}
	}

	// (b) The original's cell killed -9 and restarted while its
	// follow-ups are sent: they wait for it (or its sibling instance).
	if os := pick(1); len(os) > 0 {
		o := os[0]
		if err := env.p.Process(o.cell).Kill(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() { captureAndRefund(t, ctx, via, o, "killed", answers) })
		time.Sleep(500 * time.Millisecond)
		restartCell(t, ctx, o.cell)
		wg.Wait()
		done(o)
	}

	// (c) The table moves every key: the rule hashes on the partner now,
	// so p-001's follow-ups go to one cell first, which holds few of the
	// originals.
	tbl, err := a1.GetTable(ctx, &adminproto.GetTableRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tbl.Version++
	tbl.Rules[0].HashOn = "partner"
	if _, err := a1.ApplyTable(ctx, &adminproto.ApplyTableRequest{Table: tbl}); err != nil {
		t.Fatal(err)
	}
	var moved []original
	testutil.Eventually(t, 10*time.Second, "both replicas route every key of p-001 to one cell by the new table", func() bool {
		moved = moved[:0]
		homes := map[string]bool{}
		for _, o := range pick(2) {
			for _, a := range admins {
				r, err := a.RouteKeys(ctx, &adminproto.RouteKeysRequest{Attrs: []*adminproto.Attrs{attrsOf(o)}})
				if err != nil || len(r.GetHome()) != 1 {
					return false
				}
				homes[r.GetHome()[0]] = true
			}
			if !homes[o.cell] {
				moved = append(moved, o)
			}
		}
		return len(homes) == 1
	})
	if len(moved) == 0 {
		t.Fatal("the table change moved none of the originals")
	}
	t.Logf("originals per cell: %v; drained: %d, killed: %d, moved by the table: %d", cellsOf(byCell), len(pick(0)), min(1, len(pick(1))), len(moved))
	for _, o := range moved {
		captureAndRefund(t, ctx, via, o, "moved", answers)
		done(o)
	}

	// The rules, on an original captured and refunded in part.
	o := origs[0]
	for _, c := range []struct {
		kind   cellpayv1.PaymentType
		minor  int64
		reason apierr.Reason
	}{
		{cellpayv1.PaymentType_CAPTURE, 501, apierr.CaptureExceedsAuthorization},
		{cellpayv1.PaymentType_REFUND, 251, apierr.RefundExceedsCaptured},
		{cellpayv1.PaymentType_VOID, 0, apierr.VoidAfterCapture},
	} {
		_, err := followUpOnce(ctx, via[1], c.kind, o, fmt.Sprintf("%s-over-%v", o.req.GetTransactionId(), c.kind), c.minor)
		if status.Code(err) != codes.FailedPrecondition || apierr.Info(err).GetReason() != string(c.reason) {
			t.Errorf("%v beyond the limit: %v, want FAILED_PRECONDITION %s", c.kind, err, c.reason)
		}
	}
	// An original no transaction of the partner has: refused as a rule
	// broken too, after every cell was asked.
	unknown := original{req: &cellpayv1.SubmitTransactionRequest{PartnerId: o.req.GetPartnerId(), TransactionId: o.req.GetTransactionId() + "-never",
		Market: o.req.GetMarket(), Amount: o.req.GetAmount()}}
	if _, err := followUpOnce(ctx, via[1], cellpayv1.PaymentType_CAPTURE, unknown, o.req.GetTransactionId()+"-cap-unknown", 1); status.Code(err) != codes.FailedPrecondition ||
		apierr.Info(err).GetReason() != string(apierr.OriginalNotFound) {
		t.Errorf("a capture of an unknown original: %v, want FAILED_PRECONDITION %s", err, apierr.OriginalNotFound)
	}
	stopLoad()
	t.Logf("%d answers to judge, the background load's included", len(answers.all))
	checkSums(t, ctx, via[0], want)
	answers.judge(t, ctx, env.payments)
}

// backgroundLoad keeps 4 partners' workers busy through via until the
// returned stop is called (or 2,000 calls, or ctx ends): authorizations,
// each approved one captured in part and refunded in part, every answer
// logged for the checker. stop waits for the workers; it may be called
// more than once.
func backgroundLoad(t *testing.T, ctx context.Context, via [2]cellpayv1.PaymentsClient, answers *answerLog) (stop func()) {
	t.Helper()
	const maxCalls = 2000
	lctx, cancel := context.WithCancel(ctx)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		calls int
	)
	next := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return calls, calls <= maxCalls && lctx.Err() == nil
	}
	for w := range 4 {
		wg.Go(func() {
			p := via[w%2]
			for {
				n, ok := next()
				if !ok {
					return
				}
				req := request(fmt.Sprintf("fu-load-%d", n), freshPAN())
				txn, err := p.SubmitTransaction(lctx, req)
				if lctx.Err() != nil {
					return // the load's end, not an answer to judge
				}
				answers.add(req.GetPartnerId(), req.GetTransactionId(), txn, err)
				if err != nil || txn.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
					continue
				}
				o := original{req, txn.GetCellId(), txn}
				for i, step := range []struct {
					kind  cellpayv1.PaymentType
					minor int64
				}{{cellpayv1.PaymentType_CAPTURE, 700}, {cellpayv1.PaymentType_REFUND, 300}} {
					id := fmt.Sprintf("%s-%d", req.GetTransactionId(), i)
					txn, err := followUpOnce(lctx, p, step.kind, o, id, step.minor)
					if lctx.Err() != nil {
						return
					}
					answers.add(req.GetPartnerId(), id, txn, err)
					if err != nil || txn.GetStatus() != cellpayv1.TransactionStatus_APPROVED {
						break
					}
				}
			}
		})
	}
	var once sync.Once
	return func() { once.Do(func() { cancel(); wg.Wait() }) }
}

func cellsOf(byCell map[string][]original) map[string]int {
	out := map[string]int{}
	for c, os := range byCell {
		out[c] = len(os)
	}
	return out
}

// attrsOf is o's routing key.
func attrsOf(o original) *adminproto.Attrs {
	return &adminproto.Attrs{PartnerId: o.req.GetPartnerId(), Market: o.req.GetMarket(), PaymentType: "CARD_AUTHORIZATION",
		TransactionId: o.req.GetTransactionId()}
}

// waitRoutedOff waits until no replica routes o's key to its cell.
func waitRoutedOff(t *testing.T, ctx context.Context, admins [2]adminproto.AdminClient, o original) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, o.cell+" drained on both replicas", func() bool {
		for _, a := range admins {
			r, err := a.RouteKeys(ctx, &adminproto.RouteKeysRequest{Attrs: []*adminproto.Attrs{attrsOf(o)}})
			if err != nil || len(r.GetHome()) != 1 || r.GetHome()[0] == o.cell {
				return false
			}
		}
		return true
	})
}

// TestFollowUpRace: 40 captures of 50 race on one authorization of 1000
// through both access points, then 40 refunds of 50: exactly 20 of each
// are approved, the others refused naming the limit, and the issuer
// holds the same sums.
func TestFollowUpRace(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	via := [2]cellpayv1.PaymentsClient{env.payments, cellpayv1.NewPaymentsClient(dialGTR(env.backupAddr))}
	o := authorizeOriginals(t, ctx, via[0], "fu-race", 1, 1000)[0]
	answers := &answerLog{}
	answers.add(o.req.GetPartnerId(), o.req.GetTransactionId(), o.txn, nil)
	for _, step := range []struct {
		kind   cellpayv1.PaymentType
		reason apierr.Reason
	}{{cellpayv1.PaymentType_CAPTURE, apierr.CaptureExceedsAuthorization}, {cellpayv1.PaymentType_REFUND, apierr.RefundExceedsCaptured}} {
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			approved int
		)
		for i := range 40 {
			wg.Go(func() {
				id := fmt.Sprintf("%s-%v-%d", o.req.GetTransactionId(), step.kind, i)
				var (
					txn *cellpayv1.Transaction
					err error
				)
				for range 20 { // the same ID again while the answer is not known
					txn, err = followUpOnce(ctx, via[i%2], step.kind, o, id, 50)
					if c := status.Code(err); c != codes.Unavailable && c != codes.Aborted && c != codes.DeadlineExceeded &&
						(err != nil || txn.GetStatus() != cellpayv1.TransactionStatus_PENDING) {
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
				answers.add(o.req.GetPartnerId(), id, txn, err)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && txn.GetStatus() == cellpayv1.TransactionStatus_APPROVED:
					approved++
				case status.Code(err) == codes.FailedPrecondition && apierr.Info(err).GetReason() == string(step.reason):
				default:
					t.Errorf("%s: %v %v", id, txn.GetStatus(), err)
				}
			})
		}
		wg.Wait()
		if approved != 20 {
			t.Fatalf("%v: %d of 40 approved, want exactly 20 (1000 in parts of 50)", step.kind, approved)
		}
	}
	checkSums(t, ctx, via[0], map[string][2]int64{o.req.GetTransactionId(): {1000, 1000}})
	answers.judge(t, ctx, env.payments)
}
