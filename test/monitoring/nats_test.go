package monitoring

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/natsauth"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// directoryStream is the stream of the cells' directory bucket.
const directoryStream = "KV_" + natsauth.DirectoryBucket

// TestAlertStreamFilling: payments through the GTR fill the cells'
// transaction directory, a bucket of directoryMaxBytes. Past 80% of it,
// CellpayNATSStreamFilling fires for KV_cellpay_txn, from natsmon's
// metrics, while every claim still succeeds; filled to the end, claims
// fail (the cells count unclaimed decisions, made at the natural home)
// and payments go on being approved. Then, as the runbook says, its max
// bytes is raised as NATS's administrator, and claims succeed again; the
// package's other tests find room (the bucket denies purges).
func TestAlertStreamFilling(t *testing.T) {
	const name = "CellpayNATSStreamFilling"
	pr := startPrometheus(t, env.p)
	forDur := ruleFor(t, name)
	js, stream := directory(t)
	// Whatever happens, the package's other tests find room in the
	// directory: its max bytes raised as NATS's administrator, as the
	// alert's runbook says (the bucket denies purges: an entry's history
	// is never erased).
	var restore sync.Once
	raise := func() {
		restore.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			info, err := stream.Info(ctx)
			if err == nil {
				cfg := info.Config
				cfg.MaxBytes = restoredMaxBytes
				_, err = js.UpdateStream(ctx, cfg)
			}
			if err != nil {
				t.Errorf("raising %s's max bytes: %v", directoryStream, err)
			}
		})
	}
	t.Cleanup(raise)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxBytes != directoryMaxBytes {
		t.Fatalf("%s max bytes %d, want the cells' -directory-max-bytes %d", directoryStream, info.Config.MaxBytes, directoryMaxBytes)
	}
	fill := func() float64 {
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return float64(info.State.Bytes) / float64(info.Config.MaxBytes)
	}
	testutil.Eventually(t, 30*time.Second, "natsmon's metrics of "+directoryStream+" in Prometheus", func() bool {
		return pr.query(t, `natsmon_stream_max_bytes{stream="`+directoryStream+`"}`, "stream")[directoryStream] == strconv.Itoa(directoryMaxBytes)
	})
	if a := pr.alerts(t, name); len(a) != 0 {
		t.Fatalf("%s active at %.0f%% full: %+v", name, 100*fill(), a)
	}

	pay := newPayer(t)
	// Up to 85%: the alert's threshold (80%) and some, short of full.
	sent := pay.until(ctx, t, 3000, time.Minute, func() bool { return fill() >= 0.85 })
	t.Logf("%d payments filled %s to %.1f%%", sent, directoryStream, 100*fill())
	if n := unclaimed(t); n != 0 {
		t.Fatalf("%d unclaimed decisions at %.1f%% full: the directory refused claims before it was full", n, 100*fill())
	}
	filled := time.Now()
	// natsmon polls every 5 s; then a scrape, the rule's for, an
	// evaluation, and this poll of the API.
	bound := forDur + 5*time.Second + 4*interval
	testutil.Eventually(t, bound, name+" firing for "+directoryStream, func() bool {
		for _, a := range pr.alerts(t, name) {
			if a.Labels["stream"] == directoryStream && a.State == "firing" {
				return true
			}
		}
		return false
	})
	t.Logf("%s fired %v after the bucket passed 85%% (for %v)", name, time.Since(filled).Round(100*time.Millisecond), forDur)
	// Fired before the bucket was full: no claim has failed yet.
	if n := unclaimed(t); n != 0 {
		t.Errorf("%d unclaimed decisions when %s fired: the bucket was full first", n, name)
	}

	// Fill it: claims fail, the natural home decides without one, and
	// payments are still approved.
	sent = pay.until(ctx, t, 3000, time.Minute, func() bool { return unclaimed(t) > 0 })
	t.Logf("%d more payments until claims failed, at %.1f%%", sent, 100*fill())
	before := pay.approved.Load()
	pay.until(ctx, t, 20, 30*time.Second, func() bool { return false })
	if got := pay.approved.Load() - before; got != 20 {
		t.Errorf("%d of 20 payments approved with the directory full, want all (decided at their natural home)", got)
	}
	full := unclaimed(t)
	if full < 20 {
		t.Errorf("%d unclaimed decisions after 20 payments with the directory full, want at least 20", full)
	}

	// The runbook's remedy: more room, and claims succeed again.
	raise()
	pay.until(ctx, t, 8, 30*time.Second, func() bool { return false })
	if n := unclaimed(t); n != full {
		t.Errorf("%d more unclaimed decisions after the bucket's max bytes was raised", n-full)
	}
}

// restoredMaxBytes is the directory's max bytes once the test is done.
const restoredMaxBytes = 64 << 20

// directory returns the directory bucket's stream, through a connection
// with NATS's administrator identity closed when the test ends.
func directory(t *testing.T) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	opts, err := env.p.NATSOptions()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(env.p.NATSURL(), append(opts, nats.Name("test/monitoring"))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, directoryStream)
	if err != nil {
		t.Fatalf("%s (created by the first cell): %v", directoryStream, err)
	}
	return js, s
}

// unclaimed is how many transactions the cells decided without a
// directory claim (cellpay_cell_directory_total{result="unclaimed"}),
// scraped from every cell now.
func unclaimed(t *testing.T) int {
	t.Helper()
	n := 0
	for _, c := range env.cells {
		resp, err := http.Get("http://" + platform.MetricsAddr(c.Addr) + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "cellpay_cell_directory_total{") && strings.Contains(line, `result="unclaimed"`) {
				f := strings.Fields(line)
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				n += int(v)
			}
		}
		resp.Body.Close()
	}
	return n
}

// payer submits card authorizations through the GTR, each a new
// transaction on a new card.
type payer struct {
	client   cellpayv1.PaymentsClient
	seq      atomic.Int64
	approved atomic.Int64
}

func newPayer(t *testing.T) *payer {
	t.Helper()
	opts, err := env.p.GTRDialOptions()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(env.gtrAddr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &payer{client: cellpayv1.NewPaymentsClient(conn)}
}

// until sends payments, four at a time, until done says so after a
// round, at most max payments or for d; it fails the test on a payment
// that errs or on reaching either bound first, and returns how many it
// sent.
func (p *payer) until(ctx context.Context, t *testing.T, max int, d time.Duration, done func() bool) int {
	t.Helper()
	const workers = 4
	deadline := time.Now().Add(d)
	sent := 0
	for sent < max && time.Now().Before(deadline) {
		var wg sync.WaitGroup
		errs := make([]error, workers)
		n := min(workers, max-sent)
		for i := range n {
			wg.Go(func() { errs[i] = p.pay(ctx) })
		}
		wg.Wait()
		sent += n
		for _, err := range errs {
			if err != nil {
				t.Fatalf("payment %d: %v", sent, err)
			}
		}
		if done() {
			return sent
		}
	}
	if max == sent && !done() {
		return sent // the caller's count was the bound (done never true)
	}
	t.Fatalf("not done after %d payments in %v", sent, d)
	return sent
}

// pay submits one authorization and counts it if approved.
func (p *payer) pay(ctx context.Context) error {
	n := p.seq.Add(1)
	body := fmt.Sprintf("4921%011d", (time.Now().UnixNano()/1000+n)%100_000_000_000)
	req := &cellpayv1.SubmitTransactionRequest{
		TransactionId: fmt.Sprintf("fill-%d-%d", time.Now().UnixNano(), n),
		PaymentType:   cellpayv1.PaymentType_CARD_AUTHORIZATION,
		PartnerId:     "p-001",
		Market:        "GB",
		Amount:        &cellpayv1.Money{MinorUnits: 1000, Currency: "GBP"},
		Merchant:      &cellpayv1.Merchant{Id: "m-fill", Mcc: "5411", Country: "GB"},
		Card:          &cellpayv1.Card{Pan: body + string(card.CheckDigit(body)), ExpiryMonth: 12, ExpiryYear: 2030},
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// As a partner does: UNAVAILABLE retried under the same ID. A full
	// bucket refuses every claim, and for its first second a natural home
	// cannot tell that from a slow claim (docs/design/transaction-directory.md).
	txn, err := p.client.SubmitTransaction(rctx, req)
	for i := 0; status.Code(err) == codes.Unavailable && i < 20; i++ {
		time.Sleep(250 * time.Millisecond)
		txn, err = p.client.SubmitTransaction(rctx, req)
	}
	if err != nil {
		return err
	}
	if txn.GetStatus() == cellpayv1.TransactionStatus_APPROVED {
		p.approved.Add(1)
	}
	return nil
}
