package checker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// CellRecord is the part of a cell's transactions row the checker reads.
type CellRecord struct {
	PartnerID     string `json:"partner_id"`
	TransactionID string `json:"transaction_id"`
	// Cell is the Config.Cells ID of the database it was read from.
	Cell          string    `json:"cell"`
	State         string    `json:"state"`
	DeclineReason string    `json:"decline_reason,omitempty"`
	AuthCode      string    `json:"auth_code,omitempty"`
	CellID        string    `json:"cell_id"`
	Attempt       int32     `json:"attempt"`
	UpdatedAt     time.Time `json:"updated_at"`
	// PaymentType and Amount are the record's; Original names a
	// follow-up's authorization.
	PaymentType cellpayv1.PaymentType `json:"payment_type,omitempty"`
	Amount      int64                 `json:"amount,omitempty"`
	Currency    string                `json:"currency,omitempty"`
	Original    string                `json:"original,omitempty"`
	// Ledger is an authorization's follow-up sums as its row keeps them
	// (captured, refunded, voided); Followed is the same sums computed
	// from its approved follow-ups' rows in the same cell. They must be
	// equal.
	Ledger   Sums `json:"ledger,omitzero"`
	Followed Sums `json:"followed,omitzero"`
}

// Sums are an authorization's approved follow-ups: captured and refunded
// in minor units, and whether it was voided.
type Sums struct {
	Captured int64 `json:"captured"`
	Refunded int64 `json:"refunded"`
	Voided   bool  `json:"voided"`
}

// pastPNR reports whether r says its cell passed the point of no return:
// sending, approved or declined, or failed for a reason not decided before
// the PNR. received and abandoned records are what a cell legitimately
// keeps for a transaction that went elsewhere.
func pastPNR(r CellRecord, prePNR map[string]bool) bool {
	switch r.State {
	case "sending", "approved", "declined":
		return true
	case "failed":
		return !prePNR[r.DeclineReason]
	}
	return false
}

// clients are the RPC clients a check uses, and how to release them.
type clients struct {
	payments cellpayv1.PaymentsClient
	issuer   issuerproto.IssuerClient
	conns    []*grpc.ClientConn
}

func dial(cfg Config) (*clients, error) {
	c := &clients{payments: cfg.Payments, issuer: cfg.Issuer}
	if c.payments == nil {
		conn, err := newConn(cfg.GTRAddr, cfg.GTRDialOptions...)
		if err != nil {
			return nil, fmt.Errorf("checker: dial GTR: %w", err)
		}
		c.conns = append(c.conns, conn)
		c.payments = cellpayv1.NewPaymentsClient(conn)
	}
	if c.issuer == nil {
		conn, err := newConn(cfg.IssuerAddr, cfg.IssuerDialOptions...)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("checker: dial issuer: %w", err)
		}
		c.conns = append(c.conns, conn)
		c.issuer = issuerproto.NewIssuerClient(conn)
	}
	return c, nil
}

// dialGTR returns the Payments client alone, for WaitResolved.
func dialGTR(cfg Config) (cellpayv1.PaymentsClient, func(), error) {
	if cfg.Payments != nil {
		return cfg.Payments, func() {}, nil
	}
	conn, err := newConn(cfg.GTRAddr, cfg.GTRDialOptions...)
	if err != nil {
		return nil, nil, fmt.Errorf("checker: dial GTR: %w", err)
	}
	return cellpayv1.NewPaymentsClient(conn), func() { _ = conn.Close() }, nil
}

func newConn(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	return grpc.NewClient(addr, opts...)
}

func (c *clients) close() {
	for _, conn := range c.conns {
		_ = conn.Close()
	}
}

// readCells reads the records of keys from every cell, one query per cell,
// the cells concurrently.
func readCells(ctx context.Context, cells []Cell, keys []idempotency.Key) (map[idempotency.Key][]CellRecord, error) {
	recs := make([][]CellRecord, len(cells))
	errs := make([]error, len(cells))
	var wg sync.WaitGroup
	for i, cell := range cells {
		wg.Go(func() { recs[i], errs[i] = readCell(ctx, cell, keys) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := make(map[idempotency.Key][]CellRecord)
	for _, rs := range recs {
		for _, r := range rs {
			k := idempotency.Key{PartnerID: r.PartnerID, TransactionID: r.TransactionID}
			out[k] = append(out[k], r)
		}
	}
	return out, nil
}

func readCell(ctx context.Context, cell Cell, keys []idempotency.Key) ([]CellRecord, error) {
	conn, err := pgx.Connect(ctx, cell.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("checker: cell %s: connect: %w", cell.ID, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	partners, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		partners[i], ids[i] = k.PartnerID, k.TransactionID
	}
	// By the pair, never by the ID alone: another partner's record with an
	// asked ID is another transaction.
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT t.partner_id, t.transaction_id, t.state, t.decline_reason, t.auth_code, t.cell_id, t.attempt, t.updated_at,
			t.payment_type, t.amount, t.currency, t.original_transaction_id, t.captured, t.refunded, t.voided,
			coalesce(f.captured, 0), coalesce(f.refunded, 0), coalesce(f.voided, false)
		FROM transactions t LEFT JOIN LATERAL (
			SELECT sum(amount) FILTER (WHERE payment_type = %[1]d)::bigint AS captured,
				sum(amount) FILTER (WHERE payment_type = %[3]d)::bigint AS refunded,
				bool_or(payment_type = %[2]d) AS voided
			FROM transactions f
			WHERE f.partner_id = t.partner_id AND f.original_transaction_id = t.transaction_id AND f.state = 'approved'
		) f ON t.original_transaction_id = ''
		WHERE (t.partner_id, t.transaction_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`,
		cellpayv1.PaymentType_CAPTURE, cellpayv1.PaymentType_VOID, cellpayv1.PaymentType_REFUND), partners, ids)
	if err != nil {
		return nil, fmt.Errorf("checker: cell %s: query: %w", cell.ID, err)
	}
	var out []CellRecord
	for rows.Next() {
		r := CellRecord{Cell: cell.ID}
		var pt int16
		if err := rows.Scan(&r.PartnerID, &r.TransactionID, &r.State, &r.DeclineReason, &r.AuthCode, &r.CellID, &r.Attempt, &r.UpdatedAt,
			&pt, &r.Amount, &r.Currency, &r.Original, &r.Ledger.Captured, &r.Ledger.Refunded, &r.Ledger.Voided,
			&r.Followed.Captured, &r.Followed.Refunded, &r.Followed.Voided); err != nil {
			rows.Close()
			return nil, fmt.Errorf("checker: cell %s: scan: %w", cell.ID, err)
		}
		r.UpdatedAt, r.PaymentType = r.UpdatedAt.UTC(), cellpayv1.PaymentType(pt)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("checker: cell %s: query: %w", cell.ID, err)
	}
	return out, nil
}

// effect is one transaction's issuer counters and, when amounts were read,
// its applied outcome: approved, for amount.
type effect struct {
	effects, requests int32
	amounts           bool
	approved          bool
	amount            int64
	currency          string
}

// readEffects reads the issuer's counters for keys in batches.
func readEffects(ctx context.Context, issuer issuerproto.IssuerClient, keys []idempotency.Key, batch int, timeout time.Duration) (map[idempotency.Key]effect, error) {
	out := make(map[idempotency.Key]effect, len(keys))
	for start := 0; start < len(keys); start += batch {
		chunk := keys[start:min(start+batch, len(keys))]
		refs := make([]*issuerproto.TransactionRef, len(chunk))
		for i, k := range chunk {
			refs[i] = &issuerproto.TransactionRef{PartnerId: k.PartnerID, TransactionId: k.TransactionID}
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := issuer.Effects(cctx, &issuerproto.EffectsRequest{Transactions: refs})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("checker: issuer effects: %w", err)
		}
		for _, e := range resp.GetEffects() {
			k := idempotency.Key{PartnerID: e.GetPartnerId(), TransactionID: e.GetTransactionId()}
			out[k] = effect{effects: e.GetEffects(), requests: e.GetRequests(), amounts: true, approved: e.GetApproved(), amount: e.GetAmountMinorUnits(), currency: e.GetCurrency()}
		}
	}
	return out, nil
}

// lookup is one GetTransaction result: the transaction, or the error's code.
type lookup struct {
	txn  *cellpayv1.Transaction
	code codes.Code
	err  error
}

// transient codes are retried a few times before a lookup gives up.
func transient(c codes.Code) bool {
	return c == codes.Unavailable || c == codes.DeadlineExceeded || c == codes.ResourceExhausted
}

const (
	lookupTries   = 4
	lookupBackoff = 100 * time.Millisecond
	// lookupShedFor bounds the retries of a read the GTR shed
	// (RESOURCE_EXHAUSTED: the partner's rate or in-flight limit, the
	// read sent to no cell), which do not count as tries: the checker
	// reading back a loaded run's thousand transactions of one partner
	// meets that partner's limit, and retries as the answer asks.
	lookupShedFor = 30 * time.Second
)

// getAll calls GetTransaction for every transaction, each for its own
// partner, with at most n calls in flight. It stops early only when ctx
// ends.
func getAll(ctx context.Context, payments cellpayv1.PaymentsClient, keys []idempotency.Key, n int, timeout time.Duration) (map[idempotency.Key]lookup, error) {
	results := make([]lookup, len(keys))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(n, len(keys)) {
		wg.Go(func() {
			for i := range next {
				results[i] = get(ctx, payments, keys[i], timeout)
			}
		})
	}
feed:
	for i := range keys {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("checker: get transactions: %w", err)
	}
	out := make(map[idempotency.Key]lookup, len(keys))
	for i, k := range keys {
		out[k] = results[i]
	}
	return out, nil
}

// get reads k's transaction through payments: a shed read again after
// the answer's hint (client.RetryAfter) for up to lookupShedFor, another
// transient error up to lookupTries times with backoff.
func get(ctx context.Context, payments cellpayv1.PaymentsClient, k idempotency.Key, timeout time.Duration) lookup {
	var l lookup
	shedUntil := time.Now().Add(lookupShedFor)
	for try := 0; ; {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		txn, err := payments.GetTransaction(cctx, &cellpayv1.GetTransactionRequest{PartnerId: k.PartnerID, TransactionId: k.TransactionID})
		cancel()
		l = lookup{txn: txn, code: status.Code(err), err: err}
		var wait time.Duration
		switch {
		case l.code == codes.ResourceExhausted && time.Now().Before(shedUntil):
			hint, _ := client.RetryAfter(err)
			wait = min(max(hint, 10*time.Millisecond), time.Second)
		case transient(l.code) && try+1 < lookupTries:
			wait = lookupBackoff << try
			try++
		default:
			return l
		}
		select {
		case <-ctx.Done():
			return l
		case <-time.After(wait):
		}
	}
}
