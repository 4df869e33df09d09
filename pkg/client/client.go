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
//   - Given several access points, it rides through the loss of any by
//     the WeChat Pay cross-city rules (package failover): either two
//     (DialEndpoints: a primary and a backup, standing for two cities), or
//     up to six with their sites and the partner's home site
//     (DialAccessPoints, Config.HomeSite), several per site. It prefers
//     the first listed of the home site; a success-rate window over it,
//     health probes of it, and a fast rule over the current access
//     point's last 5 s decide which one calls go to, and a move goes to
//     the best other, another of the home site before any other site. A
//     split keeps about 1% on the next in line to keep it proven, and a
//     call that meets a connect or read timeout or UNAVAILABLE is retried
//     once, identical, on the best other access point. Every switch is an
//     Event, logged, counted and passed to Config.OnSwitch.
package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
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

	// HomeSite is the partner's home site, one of the sites of the access
	// points given to DialAccessPoints: the client prefers its access
	// points. Required with sites, empty without.
	HomeSite string
	// Failover holds the numbers of the failover rules between the access
	// points of DialEndpoints and DialAccessPoints; zero values take the
	// guide's defaults (package failover). Endpoints is set from the list.
	Failover failover.Config
	// ProbeTimeout bounds one health probe of an access point (the
	// preferred one; while across, every one of the home site) [1s].
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

// Client talks to a GTR through one access point, or several with
// failover between them. It is safe for concurrent use.
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
	site     string // "" without sites
	payments cellpayv1.PaymentsClient
	health   healthpb.HealthClient
	conn     *grpc.ClientConn // owned when made by Dial, DialEndpoints or DialAccessPoints
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
// It is DialAccessPoints with no sites.
func DialEndpoints(addrs []string, cfg Config, opts ...grpc.DialOption) (*Client, error) {
	aps := make([]AccessPoint, len(addrs))
	for i, a := range addrs {
		aps[i].Addr = a
	}
	return DialAccessPoints(aps, cfg, opts...)
}

// AccessPoint is one of the partner's access points: its address and its
// site.
type AccessPoint struct {
	// Addr is the access point's gRPC address (host:port).
	Addr string
	// Site is the site it is in: lowercase letters, digits and hyphens,
	// starting with a letter and not ending with a hyphen, at most 32
	// bytes, such as site-a (the routing configuration's form). Every
	// access point has its site, or none has.
	Site string
}

// MaxAccessPoints is how many access points DialAccessPoints takes with
// their sites; without sites, two: a primary and a backup.
const MaxAccessPoints = failover.MaxEndpoints

// ErrInvalidAccessPoints wraps every refusal of a list of access points or
// of Config.HomeSite by DialEndpoints and DialAccessPoints; the error names
// the field.
var ErrInvalidAccessPoints = errors.New("client: invalid access points")

// DialAccessPoints connects to the access points, each as Dial would, and
// fails over between them by the rules of cfg.Failover. With their sites
// (up to MaxAccessPoints, several per site) and cfg.HomeSite, the client
// prefers the first listed of the home site: it starts there, probes it
// with gRPC health while away from it, and returns to it when the probes
// pass; a failing access point hands over to the best other, another of
// the home site before any of another site, and a call's one retry goes to
// the best other too. Without sites, the list is a primary and at most one
// backup, as DialEndpoints. The prober is a goroutine that Close ends. No
// address may be listed twice.
func DialAccessPoints(aps []AccessPoint, cfg Config, opts ...grpc.DialOption) (*Client, error) {
	sited, err := checkAccessPoints(aps, cfg.HomeSite)
	if err != nil {
		return nil, err
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
	for _, ap := range aps {
		conn, err := grpc.NewClient(ap.Addr, opts...)
		if err != nil {
			c.closeConns()
			return nil, err
		}
		c.endpoints = append(c.endpoints, &endpoint{addr: ap.Addr, site: ap.Site, payments: cellpayv1.NewPaymentsClient(conn), health: healthpb.NewHealthClient(conn), conn: conn})
	}
	if len(aps) > 1 {
		fcfg := cfg.Failover
		fcfg.Endpoints = len(aps)
		var m *failover.Machine
		if sited {
			sites := make([]string, len(aps))
			for i, ap := range aps {
				sites[i] = ap.Site
			}
			m, err = failover.NewSites(fcfg, sites, cfg.HomeSite, time.Now())
		} else {
			m, err = failover.New(fcfg, time.Now())
		}
		if err != nil {
			c.closeConns()
			return nil, fmt.Errorf("client: %w", err)
		}
		c.fo = newSwitcher(c, m)
		c.stop, c.done = make(chan struct{}), make(chan struct{})
		go c.probeLoop()
	}
	return c, nil
}

// checkAccessPoints reports the first problem with aps and the home site,
// naming the field, wrapped in ErrInvalidAccessPoints, and whether the
// access points have their sites.
func checkAccessPoints(aps []AccessPoint, home string) (sited bool, err error) {
	bad := func(format string, args ...any) (bool, error) {
		return false, fmt.Errorf("%w: "+format, append([]any{ErrInvalidAccessPoints}, args...)...)
	}
	if len(aps) == 0 {
		return bad("no access point")
	}
	if len(aps) > MaxAccessPoints {
		return bad("%d access points: at most %d", len(aps), MaxAccessPoints)
	}
	var sites []string
	for i, ap := range aps {
		if ap.Addr == "" {
			return bad("AccessPoint[%d].Addr is empty", i)
		}
		for j := range i {
			if aps[j].Addr == ap.Addr {
				return bad("AccessPoint[%d].Addr %q: AccessPoint[%d]'s too: each access point once", i, ap.Addr, j)
			}
		}
		if err := checkSite(ap.Site); err != nil {
			return bad("AccessPoint[%d].Site: %w", i, err)
		}
		if ap.Site != "" && !slices.Contains(sites, ap.Site) {
			sites = append(sites, ap.Site)
		}
	}
	if len(sites) == 0 {
		switch {
		case len(aps) > 2:
			return bad("%d access points without sites: want a primary and at most one backup, or each one's Site (up to %d)", len(aps), MaxAccessPoints)
		case home != "":
			return bad("Config.HomeSite %q: no access point has a site", home)
		}
		return false, nil
	}
	for i, ap := range aps {
		if ap.Site == "" {
			return bad("AccessPoint[%d].Site is empty: give every access point its site, or none", i)
		}
	}
	switch {
	case home == "":
		return bad("Config.HomeSite is empty: want the partner's home site, one of %q", sites)
	case !slices.Contains(sites, home):
		return bad("Config.HomeSite %q: no access point is in it (sites %q)", home, sites)
	}
	return true, nil
}

// maxSiteLen is the routing configuration's bound on a site's name
// (routing.MaxSiteLen).
const maxSiteLen = 32

// checkSite checks a site's name by routing.CheckSite's rule ("" passes):
// partners' code may not import pkg/routing (imports_test.go), so the rule
// is repeated here, and a test holds the two to the same answers.
func checkSite(site string) error {
	if site == "" {
		return nil
	}
	if len(site) > maxSiteLen {
		return fmt.Errorf("site of %d bytes, longer than %d", len(site), maxSiteLen)
	}
	ok := site[0] >= 'a' && site[0] <= 'z' && site[len(site)-1] != '-'
	for i := 0; ok && i < len(site); i++ {
		c := site[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
	}
	if !ok {
		return fmt.Errorf("site %.40q: want lowercase letters, digits and hyphens, starting with a letter and not ending with a hyphen (such as site-a)", site)
	}
	return nil
}

var connectParams = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 2 * time.Second,
}

// Close stops the prober and closes the connections made by Dial,
// DialEndpoints or DialAccessPoints.
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
// gets an answer, MaxAttempts is reached or ctx ends. With several access
// points, a connect or read timeout or UNAVAILABLE is retried at once on
// the best other one (once per Submit: another of the home site first),
// and later attempts go where the failover rules say. A refusal with a
// retry hint (RetryAfter) is resent no sooner than the hint says (at most
// MaxRetryHint), whatever the back-off. The answer may be PENDING: see
// WaitFinal.
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
	// FailedOver is set when the call waited for the retry on another
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
// rules pick, one retry on the best other access point at once after a
// failover error, the others after a back-off where the rules pick.
func (c *Client) invoke(ctx context.Context, attempts int, fn func(context.Context, *endpoint) error) (CallInfo, error) {
	wait := c.cfg.Backoff
	var info CallInfo
	ep := c.pick()
	for {
		info.Attempts++
		info.Endpoint = c.endpoints[ep].addr
		cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		start := time.Now()
		err := fn(cctx, c.endpoints[ep])
		cancel()
		took := time.Since(start)
		fail := endpointFailed(ctx, err)
		if fail || ctx.Err() != nil {
			took = 0 // no answer, or one cut short by the caller
		}
		c.observe(ep, took, fail)
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

// get reads once, or twice with the retry on another access point.
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
