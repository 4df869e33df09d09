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
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// CellRecord is the part of a cell's transactions row the checker reads.
type CellRecord struct {
	TransactionID string `json:"transaction_id"`
	// Cell is the Config.Cells ID of the database it was read from.
	Cell          string    `json:"cell"`
	State         string    `json:"state"`
	DeclineReason string    `json:"decline_reason,omitempty"`
	AuthCode      string    `json:"auth_code,omitempty"`
	CellID        string    `json:"cell_id"`
	Attempt       int32     `json:"attempt"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// pastPNR reports whether r says its cell passed the point of no return:
// sending, approved or declined, or failed for a reason not decided before
// the PNR. received and abandoned records are what a cell legitimately
// keeps for an ID that went elsewhere.
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
		conn, err := newConn(cfg.IssuerAddr)
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

// readCells reads the records of ids from every cell, one query per cell,
// the cells concurrently.
func readCells(ctx context.Context, cells []Cell, ids []string) (map[string][]CellRecord, error) {
	recs := make([][]CellRecord, len(cells))
	errs := make([]error, len(cells))
	var wg sync.WaitGroup
	for i, cell := range cells {
		wg.Go(func() { recs[i], errs[i] = readCell(ctx, cell, ids) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := make(map[string][]CellRecord)
	for _, rs := range recs {
		for _, r := range rs {
			out[r.TransactionID] = append(out[r.TransactionID], r)
		}
	}
	return out, nil
}

func readCell(ctx context.Context, cell Cell, ids []string) ([]CellRecord, error) {
	conn, err := pgx.Connect(ctx, cell.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("checker: cell %s: connect: %w", cell.ID, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT transaction_id, state, decline_reason, auth_code, cell_id, attempt, updated_at
		FROM transactions WHERE transaction_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("checker: cell %s: query: %w", cell.ID, err)
	}
	var out []CellRecord
	for rows.Next() {
		r := CellRecord{Cell: cell.ID}
		if err := rows.Scan(&r.TransactionID, &r.State, &r.DeclineReason, &r.AuthCode, &r.CellID, &r.Attempt, &r.UpdatedAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("checker: cell %s: scan: %w", cell.ID, err)
		}
		r.UpdatedAt = r.UpdatedAt.UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("checker: cell %s: query: %w", cell.ID, err)
	}
	return out, nil
}

// effect is one ID's issuer counters.
type effect struct{ effects, requests int32 }

// readEffects reads the issuer's counters for ids in batches.
func readEffects(ctx context.Context, issuer issuerproto.IssuerClient, ids []string, batch int, timeout time.Duration) (map[string]effect, error) {
	out := make(map[string]effect, len(ids))
	for start := 0; start < len(ids); start += batch {
		chunk := ids[start:min(start+batch, len(ids))]
		cctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := issuer.Effects(cctx, &issuerproto.EffectsRequest{TransactionIds: chunk})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("checker: issuer effects: %w", err)
		}
		for _, e := range resp.GetEffects() {
			out[e.GetTransactionId()] = effect{effects: e.GetEffects(), requests: e.GetRequests()}
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
)

// getAll calls GetTransaction for every ID with at most n calls in flight.
// It stops early only when ctx ends.
func getAll(ctx context.Context, payments cellpayv1.PaymentsClient, ids []string, n int, timeout time.Duration) (map[string]lookup, error) {
	results := make([]lookup, len(ids))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(n, len(ids)) {
		wg.Go(func() {
			for i := range next {
				results[i] = get(ctx, payments, ids[i], timeout)
			}
		})
	}
feed:
	for i := range ids {
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
	out := make(map[string]lookup, len(ids))
	for i, id := range ids {
		out[id] = results[i]
	}
	return out, nil
}

func get(ctx context.Context, payments cellpayv1.PaymentsClient, id string, timeout time.Duration) lookup {
	var l lookup
	for try := range lookupTries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return l
			case <-time.After(lookupBackoff << (try - 1)):
			}
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		txn, err := payments.GetTransaction(cctx, &cellpayv1.GetTransactionRequest{TransactionId: id})
		cancel()
		l = lookup{txn: txn, code: status.Code(err), err: err}
		if !transient(l.code) {
			return l
		}
	}
	return l
}
