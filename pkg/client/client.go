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
//   - Given two access points (DialEndpoints: a primary and a backup,
//     standing for two cities), it rides through the loss of either by
//     the WeChat Pay cross-city rules (package failover): a success-rate
//     window over the primary and health probes of it decide which one
//     calls go to, a split keeps about 1% on the backup to keep it proven,
//     and a call that meets a connect or read timeout or UNAVAILABLE is
//     retried once, identical, on the other access point. Every switch is
//     an Event, logged, counted and passed to Config.OnSwitch.
package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/api/apierr"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client/failover"
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

	// Failover holds the numbers of the failover rules between the access
	// points of DialEndpoints; zero values take the guide's defaults
	// (package failover). Endpoints is set from the list.
	Failover failover.Config
	// ProbeTimeout bounds one health probe of the primary [1s].
	ProbeTimeout time.Duration
	// OnSwitch, if set, is called with every switch between access points,
	// from the goroutine that made it; it must be quick.
	OnSwitch func(Event)
	// Logger logs every switch [slog.Default()].
	Logger *slog.Logger
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
	def(&c.ProbeTimeout, time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
}

// Client talks to a GTR through one access point, or two with failover
// between them. It is safe for concurrent use.
type Client struct {
	cfg       Config
	endpoints []*endpoint
	fo        *switcher // nil with one access point

	stop chan struct{} // ends the prober
	done chan struct{} // closed when the prober has returned
	once sync.Once
}

// endpoint is one access point.
type endpoint struct {
	addr     string
	payments cellpayv1.PaymentsClient
	health   healthpb.HealthClient
	conn     *grpc.ClientConn // owned when made by Dial or DialEndpoints
}

// New returns a Client over conn, which the caller owns: one access point,
// no failover.
func New(conn grpc.ClientConnInterface, cfg Config) *Client {
	cfg.defaults()
	ep := &endpoint{addr: "", payments: cellpayv1.NewPaymentsClient(conn), health: healthpb.NewHealthClient(conn)}
	if cc, ok := conn.(*grpc.ClientConn); ok {
		ep.addr = cc.Target()
	}
	return &Client{cfg: cfg, endpoints: []*endpoint{ep}}
}

// Dial connects to the GTR at addr over TLS (trusting cfg.CAFile), sending
// cfg.APIKey with every call, unless opts say otherwise. Close releases the
// connection.
func Dial(addr string, cfg Config, opts ...grpc.DialOption) (*Client, error) {
	return DialEndpoints([]string{addr}, cfg, opts...)
}

// DialEndpoints connects to the access points in order, the primary first,
// then the backup, each as Dial would, and fails over between them by the
// rules of cfg.Failover: it probes the primary with gRPC health over the
// same connection, from a goroutine that Close ends. One address is Dial.
func DialEndpoints(addrs []string, cfg Config, opts ...grpc.DialOption) (*Client, error) {
	if len(addrs) == 0 || len(addrs) > 2 {
		return nil, fmt.Errorf("client: %d access points: want a primary and at most one backup", len(addrs))
	}
	cfg.defaults()
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
	// An access point that comes back must be found again within about a
	// second, not after gRPC's default back-off of up to two minutes;
	// opts may say otherwise.
	opts = append([]grpc.DialOption{grpc.WithConnectParams(connectParams)}, opts...)
	c := &Client{cfg: cfg}
	for _, addr := range addrs {
		conn, err := grpc.NewClient(addr, opts...)
		if err != nil {
			c.closeConns()
			return nil, err
		}
		c.endpoints = append(c.endpoints, &endpoint{addr: addr, payments: cellpayv1.NewPaymentsClient(conn), health: healthpb.NewHealthClient(conn), conn: conn})
	}
	if len(addrs) == 2 {
		fcfg := cfg.Failover
		fcfg.Endpoints = 2
		m, err := failover.New(fcfg, time.Now())
		if err != nil {
			c.closeConns()
			return nil, fmt.Errorf("client: %w", err)
		}
		c.fo = &switcher{m: m, client: c}
		c.stop, c.done = make(chan struct{}), make(chan struct{})
		go c.probeLoop()
	}
	return c, nil
}

var connectParams = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 2 * time.Second,
}

// Close stops the prober and closes the connections made by Dial or
// DialEndpoints.
func (c *Client) Close() error {
	c.once.Do(func() {
		if c.stop != nil {
			close(c.stop)
			<-c.done
		}
	})
	return c.closeConns()
}

func (c *Client) closeConns() error {
	var errs []error
	for _, ep := range c.endpoints {
		if ep.conn != nil {
			errs = append(errs, ep.conn.Close())
		}
	}
	return errors.Join(errs...)
}

// Retryable reports whether an error from Submit is worth sending the same
// request again for: the transaction ID makes the resend safe. A
// RESOURCE_EXHAUSTED is, when the GTR shed the call (its reason a limit,
// or a retry hint); one about the request itself (REQUEST_TOO_LARGE, or
// gRPC's own refusal of an oversized message) fails the same way again.
func Retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted, codes.DeadlineExceeded:
		return true
	case codes.ResourceExhausted:
		switch apierr.ReasonOf(err) {
		case apierr.RateLimited, apierr.TooManyInFlight, apierr.Overloaded:
			return true
		}
		_, hinted := RetryAfter(err)
		return hinted
	}
	return false
}

// MaxRetryHint bounds how long Submit waits on the GTR's retry hint.
const MaxRetryHint = 30 * time.Second

// RetryAfter returns the retry hint of an error: the delay of the
// google.rpc.RetryInfo detail that the GTR attaches to every
// RESOURCE_EXHAUSTED it sheds (the request was not sent to any cell; a
// resend after the delay is safe). It is false when the error carries
// none, or a negative one.
func RetryAfter(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().IsValid() {
			if h := ri.GetRetryDelay().AsDuration(); h >= 0 {
				return h, true
			}
		}
	}
	return 0, false
}

// Submit sends req, resending it unchanged on retryable answers until it
// gets an answer, MaxAttempts is reached or ctx ends. With two access
// points, a connect or read timeout or UNAVAILABLE is retried at once on
// the other one (once per Submit), and later attempts go where the
// failover rules say. A refusal with a retry hint (RetryAfter) is resent
// no sooner than the hint says (at most MaxRetryHint), whatever the
// back-off. The answer may be PENDING: see WaitFinal.
func (c *Client) Submit(ctx context.Context, req *cellpayv1.SubmitTransactionRequest) (*cellpayv1.Transaction, error) {
	txn, _, err := c.SubmitWithInfo(ctx, req)
	return txn, err
}

// CallInfo says how a call was served.
type CallInfo struct {
	// Endpoint is the address of the access point that gave the answer
	// (or the last error).
	Endpoint string
	// Attempts is the number of calls made.
	Attempts int
	// FailedOver is set when the call waited for the retry on the other
	// access point.
	FailedOver bool
}

// SubmitWithInfo is Submit, also saying which access point answered and
// whether the call failed over.
func (c *Client) SubmitWithInfo(ctx context.Context, req *cellpayv1.SubmitTransactionRequest) (*cellpayv1.Transaction, CallInfo, error) {
	var txn *cellpayv1.Transaction
	info, err := c.invoke(ctx, c.cfg.MaxAttempts, func(ctx context.Context, ep *endpoint) error {
		var err error
		txn, err = ep.payments.SubmitTransaction(ctx, req)
		return err
	})
	if err != nil {
		return nil, info, err
	}
	return txn, info, nil
}

// invoke makes up to attempts calls of fn: the first where the failover
// rules pick, one retry on the other access point at once after a
// failover error, the others after a back-off where the rules pick.
func (c *Client) invoke(ctx context.Context, attempts int, fn func(context.Context, *endpoint) error) (CallInfo, error) {
	wait := c.cfg.Backoff
	var info CallInfo
	ep := c.pick()
	for {
		info.Attempts++
		info.Endpoint = c.endpoints[ep].addr
		cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		err := fn(cctx, c.endpoints[ep])
		cancel()
		fail := endpointFailed(ctx, err)
		c.observe(ep, err, fail)
		if err == nil {
			return info, nil
		}
		if info.Attempts >= attempts {
			return info, err
		}
		if fail && !info.FailedOver && c.fo != nil {
			info.FailedOver = true
			ep = c.fo.other(ep)
			continue
		}
		if !Retryable(err) || ctx.Err() != nil {
			return info, err
		}
		d := jitter(wait)
		if h, ok := RetryAfter(err); ok {
			d = max(d, min(h, MaxRetryHint))
		}
		if serr := sleep(ctx, d); serr != nil {
			return info, errors.Join(err, serr)
		}
		wait = min(wait*2, c.cfg.MaxBackoff)
		ep = c.pick()
	}
}

// endpointFailed reports whether err says the access point did not answer
// (connect or read timeout, UNAVAILABLE), rather than answering about the
// request. The caller's own deadline or cancellation is neither.
func endpointFailed(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// Get reads the recorded outcome of Config.PartnerID's transaction id.
func (c *Client) Get(ctx context.Context, id string) (*cellpayv1.Transaction, error) {
	return c.get(ctx, c.cfg.PartnerID, id)
}

// get reads once, or twice with the retry on the other access point.
func (c *Client) get(ctx context.Context, partner, id string) (*cellpayv1.Transaction, error) {
	attempts := 1
	if c.fo != nil {
		attempts = 2
	}
	var txn *cellpayv1.Transaction
	_, err := c.invoke(ctx, attempts, func(ctx context.Context, ep *endpoint) error {
		var err error
		txn, err = ep.payments.GetTransaction(ctx, &cellpayv1.GetTransactionRequest{PartnerId: partner, TransactionId: id})
		return err
	})
	if err != nil {
		return nil, err
	}
	return txn, nil
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

// Capture captures req.Amount of the authorization
// req.OriginalTransactionId, with Submit's retries and failover: a
// capture is a transaction of its own, idempotent by its own
// transaction_id. The answer may be PENDING (see WaitFinal).
func (c *Client) Capture(ctx context.Context, req *cellpayv1.CaptureTransactionRequest) (*cellpayv1.Transaction, error) {
	return c.call(ctx, func(ctx context.Context, p cellpayv1.PaymentsClient) (*cellpayv1.Transaction, error) {
		return p.CaptureTransaction(ctx, req)
	})
}

// Void voids the authorization req.OriginalTransactionId, as Capture.
func (c *Client) Void(ctx context.Context, req *cellpayv1.VoidTransactionRequest) (*cellpayv1.Transaction, error) {
	return c.call(ctx, func(ctx context.Context, p cellpayv1.PaymentsClient) (*cellpayv1.Transaction, error) {
		return p.VoidTransaction(ctx, req)
	})
}

// Refund refunds req.Amount of what was captured of the authorization
// req.OriginalTransactionId, as Capture.
func (c *Client) Refund(ctx context.Context, req *cellpayv1.RefundTransactionRequest) (*cellpayv1.Transaction, error) {
	return c.call(ctx, func(ctx context.Context, p cellpayv1.PaymentsClient) (*cellpayv1.Transaction, error) {
		return p.RefundTransaction(ctx, req)
	})
}

// call makes a call that records a transaction with Submit's retries.
func (c *Client) call(ctx context.Context, fn func(context.Context, cellpayv1.PaymentsClient) (*cellpayv1.Transaction, error)) (*cellpayv1.Transaction, error) {
	var txn *cellpayv1.Transaction
	_, err := c.invoke(ctx, c.cfg.MaxAttempts, func(ctx context.Context, ep *endpoint) error {
		var err error
		txn, err = fn(ctx, ep.payments)
		return err
	})
	if err != nil {
		return nil, err
	}
	return txn, nil
}
