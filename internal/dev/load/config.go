// Package load drives synthetic payment traffic at a Cellpay GTR (the public
// Payments API) or straight at one cell (the internal Cell API), and reports
// throughput, outcomes and latency.
//
// It is a test tool: it must never send traffic anywhere but a loopback
// address, and every run is bounded both by a request count and by a
// duration. Requests carry generated, Luhn-valid test card numbers only.
//
// Two loops are offered. The open loop issues requests at a fixed rate
// whatever the responses, and measures latency from each request's scheduled
// send time so that a slow server cannot hide its queueing (coordinated
// omission); when Concurrency requests are outstanding a scheduled request is
// counted as dropped instead of delaying the schedule. The closed loop runs
// Concurrency workers back to back; a worker refused with a retry hint (a
// request the GTR shed) waits it, up to a second, before its next request.
//
// With FollowUps, a share of the approved authorizations gets a life, as a
// partner's would: a void, or captures in one or two parts then refunds in
// one or two parts, each a transaction of its own, chosen by the seed and
// kept within the authorization's limits (lives.go). Lives run on
// Concurrency more workers, through pkg/client as the submits go, within
// the run's Duration; OnFollowUp gets each answer as OnResult gets each
// submit's.
package load

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"time"

	"google.golang.org/grpc"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
)

// ErrInvalidConfig wraps every configuration error returned by Run, so that
// callers can tell a refused configuration from a failed run.
var ErrInvalidConfig = errors.New("load: invalid config")

// Targets and modes.
const (
	TargetGTR  = "gtr"
	TargetCell = "cell"

	ModeOpen   = "open"
	ModeClosed = "closed"
)

// Hard caps: a run is always bounded, and never by more than these.
const (
	MaxCount       = 10_000_000
	MaxDuration    = time.Hour
	MaxConcurrency = 100_000
	MaxRate        = 1_000_000
	MaxTimeout     = time.Minute
)

// DeclinePAN is the issuer simulator's declining test card.
const DeclinePAN = "4000000000000002"

// PaymentWeight is one entry of the payment type mix: Type is drawn with
// probability Weight / sum of all weights.
type PaymentWeight struct {
	Type   cellpayv1.PaymentType
	Weight int
}

// Config describes one load run. Zero fields take the defaults documented on
// each field; validate refuses the rest.
type Config struct {
	// Target is "gtr" (Payments.SubmitTransaction) or "cell" (Cell.Process,
	// attempt 1). Required.
	Target string
	// Addr is host:port of the target; the host must be loopback
	// (127.0.0.0/8, ::1 or "localhost"). Required.
	Addr string
	// Mode is "open" (fixed rate) or "closed" (fixed concurrency). Required.
	Mode string
	// Rate is requests per second in the open loop. Required there, ignored
	// in the closed loop.
	Rate float64
	// Concurrency is the number of workers in the closed loop and the most
	// outstanding requests in the open loop. Required.
	Concurrency int
	// Count is the most requests the run issues (scheduled slots in the open
	// loop, dropped ones included). Required, at most MaxCount.
	Count int64
	// Duration is the longest the run issues requests; requests in flight at
	// the end are still awaited, each bounded by PerRequestTimeout.
	// Required, at most MaxDuration.
	Duration time.Duration
	// Seed makes request payloads reproducible: the same seed and sequence
	// number give the same payload.
	Seed uint64
	// RunID prefixes transaction IDs ("RunID-seq"). Default: random.
	RunID string
	// Partners and Markets spread routing keys. Defaults: p-001..p-050 and
	// GB, DE, FR, US, NL. Markets must be ones with a known currency.
	Partners []string
	Markets  []string
	// PaymentMix weights payment types. Default: mostly CARD_AUTHORIZATION.
	PaymentMix []PaymentWeight
	// DeclineShare is the share (0..1) of card requests that use DeclinePAN.
	DeclineShare float64
	// PerRequestTimeout bounds each request. Default 5s, at most MaxTimeout.
	PerRequestTimeout time.Duration
	// DialOptions connect to the target; default plaintext. A GTR needs TLS
	// and the partners' API keys (pkg/client's TLS and PartnerKeys).
	DialOptions []grpc.DialOption
	// Endpoints, when set (a primary access point, then a backup), send
	// the GTR target's calls through pkg/client's failover between them
	// instead of straight to Addr, which then defaults to Endpoints[0].
	// Every one must be loopback.
	Endpoints []string
	// AccessPoints, when set instead of Endpoints, send the GTR target's
	// calls through pkg/client's failover between up to
	// client.MaxAccessPoints access points with their sites
	// (client.DialAccessPoints), preferring the first listed of
	// Client.HomeSite; Addr then defaults to that one. Every address must
	// be loopback; the client checks the sites and the home site, and its
	// refusal wraps ErrInvalidConfig too.
	AccessPoints []client.AccessPoint
	// Client tunes the client of Endpoints or AccessPoints: the failover
	// rules, its retries, HomeSite (with AccessPoints only) and
	// CallTimeout (default half of PerRequestTimeout, so that a read
	// timeout leaves time for the retry on another access point). Its
	// credentials are DialOptions.
	Client client.Config
	// OnResult, if set, is called once per finished request, from many
	// goroutines at once: it must be safe for concurrent use and quick.
	OnResult func(Result)
	// FollowUps is the share (0..1) of approved card authorizations
	// followed by a life (a void, or captures then refunds), the GTR
	// target only; Seed chooses which and by what life. Each follow-up is
	// bounded by PerRequestTimeout, none is sent after Duration, and Run
	// returns once the last has finished. RunID must leave room for a
	// follow-up's suffix (FollowUpSuffixLen).
	FollowUps float64
	// OnFollowUp, if set, is called once per finished follow-up, as
	// OnResult is per request, and before Run returns.
	OnFollowUp func(FollowUpResult)
}

// Result is one finished request, for OnResult.
type Result struct {
	// PartnerID is the partner that sent Request: with Request's
	// transaction ID, it names the transaction (transaction IDs are a
	// namespace per partner).
	PartnerID   string
	Request     *cellpayv1.SubmitTransactionRequest
	Transaction *cellpayv1.Transaction // nil on error or a re-routable answer
	Err         error
	Sent        time.Time // when it was scheduled (open loop) or sent
	Latency     time.Duration
	// Endpoint is the access point that answered (or gave the last
	// error), and FailedOver says the call waited for the retry on
	// another one; with Endpoints or AccessPoints only.
	Endpoint   string
	FailedOver bool
}

// marketCurrency is the currency generated for each supported market.
var marketCurrency = map[string]string{
	"GB": "GBP",
	"IE": "EUR",
	"DE": "EUR",
	"FR": "EUR",
	"NL": "EUR",
	"ES": "EUR",
	"IT": "EUR",
	"US": "USD",
}

var idCharset = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

func (c *Config) setDefaults() {
	if c.RunID == "" {
		var b [4]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand contract)
		c.RunID = "lg-" + hex.EncodeToString(b[:])
	}
	if len(c.Partners) == 0 {
		c.Partners = make([]string, 50)
		for i := range c.Partners {
			c.Partners[i] = fmt.Sprintf("p-%03d", i+1)
		}
	}
	if len(c.Markets) == 0 {
		c.Markets = []string{"GB", "DE", "FR", "US", "NL"}
	}
	if len(c.PaymentMix) == 0 {
		c.PaymentMix = []PaymentWeight{
			{cellpayv1.PaymentType_CARD_AUTHORIZATION, 90},
			{cellpayv1.PaymentType_CARD_REFUND, 5},
			{cellpayv1.PaymentType_BANK_TRANSFER, 5},
		}
	}
	if c.PerRequestTimeout == 0 {
		c.PerRequestTimeout = 5 * time.Second
	}
	if len(c.Endpoints) > 0 || len(c.AccessPoints) > 0 {
		if c.Addr == "" {
			c.Addr = c.preferred()
		}
		if c.Client.CallTimeout == 0 {
			c.Client.CallTimeout = c.PerRequestTimeout / 2
		}
	}
}

// preferred is the access point the client starts on: the primary of
// Endpoints, or the first of AccessPoints in Client.HomeSite (the first
// listed when none is, which the client refuses).
func (c Config) preferred() string {
	if len(c.Endpoints) > 0 {
		return c.Endpoints[0]
	}
	for _, ap := range c.AccessPoints {
		if ap.Site == c.Client.HomeSite {
			return ap.Addr
		}
	}
	return c.AccessPoints[0].Addr
}

// accessPointAddrs are the addresses of Endpoints or AccessPoints, in
// their order; nil without either.
func (c Config) accessPointAddrs() []string {
	if len(c.AccessPoints) == 0 {
		return c.Endpoints
	}
	addrs := make([]string, len(c.AccessPoints))
	for i, ap := range c.AccessPoints {
		addrs[i] = ap.Addr
	}
	return addrs
}

// validate reports the first problem with c, wrapped in ErrInvalidConfig.
func (c Config) validate() error {
	if err := c.validateShape(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

func (c Config) validateShape() error {
	switch c.Target {
	case TargetGTR, TargetCell:
	default:
		return fmt.Errorf("target %q: want %q or %q", c.Target, TargetGTR, TargetCell)
	}
	if err := c.validateAccessPoints(); err != nil {
		return err
	}
	if err := checkLoopback(c.Addr); err != nil {
		return err
	}
	if len(c.Endpoints) > 0 && c.Target != TargetGTR {
		return errors.New("endpoints: failover is between GTR access points only")
	}
	if len(c.Endpoints) > 2 {
		return fmt.Errorf("endpoints: %d, want a primary and at most one backup", len(c.Endpoints))
	}
	for _, e := range c.Endpoints {
		if err := checkLoopback(e); err != nil {
			return err
		}
	}
	switch c.Mode {
	case ModeOpen:
		if !(c.Rate > 0 && c.Rate <= MaxRate) {
			return fmt.Errorf("rate %v: open loop needs 0 < rate <= %d per second", c.Rate, MaxRate)
		}
	case ModeClosed:
	default:
		return fmt.Errorf("mode %q: want %q or %q", c.Mode, ModeOpen, ModeClosed)
	}
	if c.Concurrency <= 0 || c.Concurrency > MaxConcurrency {
		return fmt.Errorf("concurrency %d: want 1..%d", c.Concurrency, MaxConcurrency)
	}
	if c.Count <= 0 || c.Count > MaxCount {
		return fmt.Errorf("count %d: want 1..%d", c.Count, MaxCount)
	}
	if c.Duration <= 0 || c.Duration > MaxDuration {
		return fmt.Errorf("duration %v: want > 0 and <= %v", c.Duration, MaxDuration)
	}
	if c.PerRequestTimeout <= 0 || c.PerRequestTimeout > MaxTimeout {
		return fmt.Errorf("per-request timeout %v: want > 0 and <= %v", c.PerRequestTimeout, MaxTimeout)
	}
	// IDs are RunID-seq, and a follow-up's RunID-seq-suffix; they must
	// stay within 64 characters of [A-Za-z0-9._-].
	maxRunID := 64 - 1 - len(strconv.FormatInt(c.Count, 10))
	if c.FollowUps > 0 {
		maxRunID -= FollowUpSuffixLen
	}
	if !idCharset.MatchString(c.RunID) || len(c.RunID) > maxRunID {
		return fmt.Errorf("run ID %q: want 1..%d characters of [A-Za-z0-9._-]", c.RunID, maxRunID)
	}
	for _, p := range c.Partners {
		if p == "" {
			return errors.New("partners: empty partner ID")
		}
	}
	for _, m := range c.Markets {
		if _, ok := marketCurrency[m]; !ok {
			return fmt.Errorf("market %q: no known currency", m)
		}
	}
	total := 0
	for _, w := range c.PaymentMix {
		if _, ok := cellpayv1.PaymentType_name[int32(w.Type)]; !ok || w.Type == cellpayv1.PaymentType_PAYMENT_TYPE_UNSPECIFIED {
			return fmt.Errorf("payment mix: invalid type %v", w.Type)
		}
		if w.Weight < 0 {
			return fmt.Errorf("payment mix: negative weight %d for %v", w.Weight, w.Type)
		}
		total += w.Weight
	}
	if total == 0 {
		return errors.New("payment mix: weights sum to zero")
	}
	if !(c.DeclineShare >= 0 && c.DeclineShare <= 1) {
		return fmt.Errorf("decline share %v: want 0..1", c.DeclineShare)
	}
	if !(c.FollowUps >= 0 && c.FollowUps <= 1) {
		return fmt.Errorf("follow-ups share %v: want 0..1", c.FollowUps)
	}
	if c.FollowUps > 0 && c.Target != TargetGTR {
		return fmt.Errorf("follow-ups: through the Payments API, the %q target only", TargetGTR)
	}
	return nil
}

// validateAccessPoints checks what the load tool asks of AccessPoints
// and Client.HomeSite: pkg/client checks the rest when Run dials them
// (the sites' form, each address once, the home site among the sites).
func (c Config) validateAccessPoints() error {
	if len(c.AccessPoints) == 0 {
		if c.Client.HomeSite != "" {
			return fmt.Errorf("client home site %q: with access points only", c.Client.HomeSite)
		}
		return nil
	}
	if len(c.Endpoints) > 0 {
		return errors.New("endpoints and access points: give one list, a primary and a backup or the access points with their sites")
	}
	if c.Target != TargetGTR {
		return errors.New("access points: failover is between GTR access points only")
	}
	if len(c.AccessPoints) > client.MaxAccessPoints {
		return fmt.Errorf("access points: %d, want at most %d", len(c.AccessPoints), client.MaxAccessPoints)
	}
	for i, ap := range c.AccessPoints {
		if err := checkLoopback(ap.Addr); err != nil {
			return fmt.Errorf("access points[%d]: %w", i, err)
		}
	}
	return nil
}

// checkLoopback refuses any address whose host is not a loopback literal or
// "localhost": this tool never sends load off the machine.
func checkLoopback(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("addr %q: %w", addr, err)
	}
	if port == "" {
		return fmt.Errorf("addr %q: missing port", addr)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("addr %q: load may only target a loopback address (127.0.0.0/8, ::1, localhost)", addr)
}
