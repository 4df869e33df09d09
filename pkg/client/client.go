// Package client is the Go client for Cellpay's partners. It submits
// transactions to the GTR and reads them back, and it does the two things
// every partner integration needs and gets wrong by hand:
//
//   - Retries are safe because the partner and transaction ID are the
//     idempotency key: Submit resends the identical request, under the same
//     partner and ID, when the
//     answer is UNAVAILABLE, ABORTED or a per-call DEADLINE_EXCEEDED, with
//     jittered exponential back-off, until the caller's context ends. It
//     never retries an answer about the request itself (INVALID_ARGUMENT,
//     ALREADY_EXISTS, authentication).
//   - A PENDING answer (the transaction passed its point of no return and
//     its outcome at the issuer is not known yet) is resolved by the owning
//     cell; WaitFinal polls GetTransaction until it is.
package client

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// Config tunes a Client. Zero values take the defaults in brackets.
type Config struct {
	// PartnerID is the partner the client reads for: transaction IDs are a
	// namespace per partner, and Get and WaitFinal read this partner's
	// transactions. Required for Get and WaitFinal.
	PartnerID string
	// CallTimeout bounds one call to the GTR [10s]; the whole Submit is
	// bounded by the caller's context.
	CallTimeout time.Duration
	// MaxAttempts bounds the calls one Submit makes [5].
	MaxAttempts int
	// Backoff is the first wait between attempts, doubling up to
	// MaxBackoff [100ms, 2s], each with up to 50% random jitter.
	Backoff, MaxBackoff time.Duration
	// PollInterval is how often WaitFinal reads a PENDING transaction [500ms].
	PollInterval time.Duration
	// APIKey is the partner's API key, sent with every call by Dial's
	// default options (see APIKey).
	APIKey string
	// CAFile is the CA that Dial's default options trust (PEM; "" for the
	// system's roots).
	CAFile string
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.CallTimeout, 10*time.Second)
	def(&c.Backoff, 100*time.Millisecond)
	def(&c.MaxBackoff, 2*time.Second)
	def(&c.PollInterval, 500*time.Millisecond)
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
}

// Client talks to a GTR. It is safe for concurrent use.
type Client struct {
	payments cellpayv1.PaymentsClient
	conn     *grpc.ClientConn // owned when made by Dial
	cfg      Config
}

// New returns a Client over conn, which the caller owns.
func New(conn grpc.ClientConnInterface, cfg Config) *Client {
	cfg.defaults()
	return &Client{payments: cellpayv1.NewPaymentsClient(conn), cfg: cfg}
}

// Dial connects to the GTR at addr over TLS (trusting cfg.CAFile), sending
// cfg.APIKey with every call, unless opts say otherwise. Close releases the
// connection.
func Dial(addr string, cfg Config, opts ...grpc.DialOption) (*Client, error) {
	if len(opts) == 0 {
		tlsOpt, err := TLS(cfg.CAFile)
		if err != nil {
			return nil, err
		}
		opts = []grpc.DialOption{tlsOpt}
		if cfg.APIKey != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(APIKey(cfg.APIKey)))
		}
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, err
	}
	c := New(conn, cfg)
	c.conn = conn
	return c, nil
}

// Close closes a connection made by Dial.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Retryable reports whether an error from Submit is worth sending the same
// request again for: the transaction ID makes the resend safe.
func Retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted, codes.DeadlineExceeded, codes.ResourceExhausted:
		return true
	}
	return false
}

// Submit sends req, resending it unchanged on retryable answers until it
// gets an answer, MaxAttempts is reached or ctx ends. The answer may be
// PENDING: see WaitFinal.
func (c *Client) Submit(ctx context.Context, req *cellpayv1.SubmitTransactionRequest) (*cellpayv1.Transaction, error) {
	wait := c.cfg.Backoff
	var last error
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		txn, err := c.payments.SubmitTransaction(cctx, req)
		cancel()
		if err == nil {
			return txn, nil
		}
		last = err
		if !Retryable(err) || attempt == c.cfg.MaxAttempts {
			return nil, err
		}
		if err := sleep(ctx, jitter(wait)); err != nil {
			return nil, errors.Join(last, err)
		}
		wait = min(wait*2, c.cfg.MaxBackoff)
	}
}

// Get reads the recorded outcome of Config.PartnerID's transaction id.
func (c *Client) Get(ctx context.Context, id string) (*cellpayv1.Transaction, error) {
	return c.get(ctx, c.cfg.PartnerID, id)
}

func (c *Client) get(ctx context.Context, partner, id string) (*cellpayv1.Transaction, error) {
	cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	return c.payments.GetTransaction(cctx, &cellpayv1.GetTransactionRequest{PartnerId: partner, TransactionId: id})
}

// WaitFinal reads Config.PartnerID's transaction id until it is no longer
// PENDING, or ctx ends. Retryable read errors are retried.
func (c *Client) WaitFinal(ctx context.Context, id string) (*cellpayv1.Transaction, error) {
	return c.waitFinal(ctx, c.cfg.PartnerID, id)
}

func (c *Client) waitFinal(ctx context.Context, partner, id string) (*cellpayv1.Transaction, error) {
	for {
		txn, err := c.get(ctx, partner, id)
		switch {
		case err == nil && txn.GetStatus() != cellpayv1.TransactionStatus_PENDING:
			return txn, nil
		case err != nil && !Retryable(err):
			return nil, err
		}
		if err := sleep(ctx, c.cfg.PollInterval); err != nil {
			return txn, err
		}
	}
}

// SubmitAndWait is Submit, then WaitFinal when the answer is PENDING. It
// reads back req's own partner and ID, whatever Config.PartnerID says.
func (c *Client) SubmitAndWait(ctx context.Context, req *cellpayv1.SubmitTransactionRequest) (*cellpayv1.Transaction, error) {
	txn, err := c.Submit(ctx, req)
	if err != nil || txn.GetStatus() != cellpayv1.TransactionStatus_PENDING {
		return txn, err
	}
	return c.waitFinal(ctx, req.GetPartnerId(), req.GetTransactionId())
}

func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
