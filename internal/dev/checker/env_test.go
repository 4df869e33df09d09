package checker

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/dev/issuersim"
	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/internal/dev/testutil/grpctest"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testTimeout bounds every test.
const testTimeout = 60 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// migrationsDir holds the cell's migrations; the tests apply their
// "create" halves, since the store package is internal to cmd/cell.
const migrationsDir = "../../../cmd/cell/internal/store/migrations"

// newCellDB returns the URL of a fresh database holding the cell schema.
func newCellDB(t *testing.T) string {
	t.Helper()
	url := pgtest.NewDatabase(t)
	pgtest.ApplyMigrations(t, url, migrationsDir)
	return url
}

// testPartner is the partner of rows, answers and issuer requests that do
// not name one.
const testPartner = "p-1"

// key is testPartner's transaction id, unless id is "partner/id".
func key(id string) idempotency.Key {
	if p, i, ok := strings.Cut(id, "/"); ok {
		return idempotency.Key{PartnerID: p, TransactionID: i}
	}
	return idempotency.Key{PartnerID: testPartner, TransactionID: id}
}

// row is a seeded cell record; the columns the checker ignores get fixed
// values.
type row struct {
	cell    string // which seeded database
	partner string // testPartner when empty
	id      string
	state   string
	reason  string
	auth    string
	attempt int32
}

func insertRows(ctx context.Context, t *testing.T, urls map[string]string, rows []row) {
	t.Helper()
	now := time.Date(2026, 6, 15, 12, 0, 0, 0, time.UTC)
	for _, r := range rows {
		conn, err := pgx.Connect(ctx, urls[r.cell])
		if err != nil {
			t.Fatalf("connect %s: %v", r.cell, err)
		}
		_, err = conn.Exec(ctx, `INSERT INTO transactions (transaction_id, fingerprint, state, decline_reason,
			auth_code, payment_type, partner_id, market, amount, currency, settlement_amount, settlement_currency,
			risk_amount, merchant_id, mcc, merchant_country, masked_pan, refdata_version, route_rule, attempt,
			cell_id, created_at, updated_at, pan_hash_key_id, fingerprint_key_id)
			VALUES ($1, '\x00', $2, $3, $4, 1, $8, 'DE', 1000, 'EUR', 1000, 'EUR', 1000, 'm-1', '5411', 'DE',
			'', '1', 'everything', $5, $6, $7, $7, 'pan-test', 'fp-test')`,
			r.id, r.state, r.reason, r.auth, max(r.attempt, 1), r.cell, now, r.key().PartnerID)
		conn.Close(ctx)
		if err != nil {
			t.Fatalf("insert %s into %s: %v", r.id, r.cell, err)
		}
	}
}

// key is the transaction r records.
func (r row) key() idempotency.Key {
	if r.partner == "" {
		return idempotency.Key{PartnerID: testPartner, TransactionID: r.id}
	}
	return idempotency.Key{PartnerID: r.partner, TransactionID: r.id}
}

// stagedIssuer is the real simulator with one staged flaw: it reports an
// extra effect for the transactions in extra. The simulator itself can
// never apply two effects for a transaction, so a duplicate can only be
// staged.
type stagedIssuer struct {
	*issuersim.Server
	extra map[idempotency.Key]bool
}

func (s *stagedIssuer) Effects(ctx context.Context, req *issuerproto.EffectsRequest) (*issuerproto.EffectsResponse, error) {
	resp, err := s.Server.Effects(ctx, req)
	if err != nil {
		return nil, err
	}
	for _, e := range resp.GetEffects() {
		if s.extra[idempotency.Key{PartnerID: e.GetPartnerId(), TransactionID: e.GetTransactionId()}] {
			e.Effects++
			resp.TotalEffects++
		}
	}
	return resp, nil
}

// fakePayments answers GetTransaction from a map by (partner, transaction
// ID), as the GTR does; the other methods are unimplemented. Missing
// transactions are NOT_FOUND; those in broken answer UNAVAILABLE.
type fakePayments struct {
	cellpayv1.UnimplementedPaymentsServer
	mu     sync.Mutex
	txns   map[idempotency.Key]*cellpayv1.Transaction
	broken map[idempotency.Key]bool
	calls  int
}

func (f *fakePayments) GetTransaction(_ context.Context, req *cellpayv1.GetTransactionRequest) (*cellpayv1.Transaction, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	k := idempotency.Key{PartnerID: req.GetPartnerId(), TransactionID: req.GetTransactionId()}
	if k.PartnerID == "" {
		return nil, status.Error(codes.InvalidArgument, "partner_id: is required")
	}
	if f.broken[k] {
		return nil, status.Error(codes.Unavailable, "cell down")
	}
	if txn, ok := f.txns[k]; ok {
		return txn, nil
	}
	return nil, status.Error(codes.NotFound, "transaction not found")
}

func (f *fakePayments) set(txn *cellpayv1.Transaction) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.txns[idempotency.Key{PartnerID: txn.GetPartnerId(), TransactionID: txn.GetTransactionId()}] = txn
}

// visible builds what the GTR's GetTransaction would return for rows: the
// partner-visible records, a final one preferred over PENDING.
func visible(rows []row) map[idempotency.Key]*cellpayv1.Transaction {
	statuses := map[string]cellpayv1.TransactionStatus{
		"sending":  cellpayv1.TransactionStatus_PENDING,
		"approved": cellpayv1.TransactionStatus_APPROVED,
		"declined": cellpayv1.TransactionStatus_DECLINED,
		"failed":   cellpayv1.TransactionStatus_FAILED,
	}
	out := make(map[idempotency.Key]*cellpayv1.Transaction)
	for _, r := range rows {
		st, ok := statuses[r.state]
		if !ok {
			continue
		}
		k := r.key()
		if best, ok := out[k]; ok && best.GetStatus() != cellpayv1.TransactionStatus_PENDING {
			continue
		}
		out[k] = &cellpayv1.Transaction{PartnerId: k.PartnerID, TransactionId: r.id, Status: st, DeclineReason: r.reason, AuthCode: r.auth, CellId: r.cell}
	}
	return out
}

// env is one seeded run: two cell databases, a real issuer simulator and a
// fake GTR, all on loopback.
type env struct {
	cfg      Config
	issuer   issuerproto.IssuerClient
	payments *fakePayments
}

type setup struct {
	rows        []row
	authorize   []*issuerproto.AuthorizeRequest // sent to the issuer before the check
	extraEffect []string                        // transactions, as key takes them
	broken      []string                        // transactions, as key takes them
}

func newEnv(ctx context.Context, t *testing.T, s setup) *env {
	t.Helper()
	urls := map[string]string{"cell-a": newCellDB(t), "cell-b": newCellDB(t)}
	insertRows(ctx, t, urls, s.rows)

	iss := &stagedIssuer{Server: issuersim.New(issuersim.Config{
		Now: func() time.Time { return time.Date(2026, 6, 15, 12, 0, 0, 0, time.UTC) },
	}), extra: make(map[idempotency.Key]bool)}
	for _, id := range s.extraEffect {
		iss.extra[key(id)] = true
	}
	issuerAddr := grpctest.Serve(t, func(gs *grpc.Server) { issuerproto.RegisterIssuerServer(gs, iss) })
	fp := &fakePayments{txns: visible(s.rows), broken: make(map[idempotency.Key]bool)}
	for _, id := range s.broken {
		fp.broken[key(id)] = true
	}
	gtrAddr := grpctest.Serve(t, func(gs *grpc.Server) { cellpayv1.RegisterPaymentsServer(gs, fp) })

	e := &env{
		cfg: Config{
			GTRAddr:    gtrAddr,
			IssuerAddr: issuerAddr,
			Cells: []Cell{
				{ID: "cell-a", DatabaseURL: urls["cell-a"]},
				{ID: "cell-b", DatabaseURL: urls["cell-b"]},
			},
			Concurrency:  4,
			EffectsBatch: 2, // several batches even in small scenarios
			PollInterval: 20 * time.Millisecond,
		},
		payments: fp,
	}
	conn, err := newConn(issuerAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e.issuer = issuerproto.NewIssuerClient(conn)
	for _, req := range s.authorize {
		if _, err := e.issuer.Authorize(ctx, req); err != nil {
			t.Fatalf("authorize %s: %v", req.GetTransactionId(), err)
		}
	}
	return e
}

// auth is an issuer request for the transaction id (as key takes it) with
// pan, approved unless pan declines.
func auth(id, pan string) *issuerproto.AuthorizeRequest {
	k := key(id)
	return &issuerproto.AuthorizeRequest{
		PartnerId: k.PartnerID, TransactionId: k.TransactionID, Pan: pan, ExpiryMonth: 12, ExpiryYear: 2030,
		AmountMinorUnits: 1000, Currency: "EUR", MerchantId: "m-1", Mcc: "5411",
	}
}
