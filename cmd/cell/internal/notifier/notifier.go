// Package notifier delivers a cell's callback outbox to partners'
// endpoints over HTTPS, at least once, signed (Standard Webhooks, the
// partner's current secrets). It is the driver of package callback's
// policy: it claims due rows, makes the HTTP calls, and records what the
// policy decides.
//
// It is never on a transaction's path: transactions only write outbox rows
// (in the statement that records their outcome), and the notifier reads
// them in its own goroutines with its own database connections. Several
// instances of a cell may run it against one Postgres: rows are claimed
// with FOR UPDATE SKIP LOCKED under a lease longer than one attempt can
// take, and a result is recorded only while its lease holds, so an
// instance that dies mid-delivery leaves its rows to be claimed again when
// their lease runs out.
//
// Everything is bounded: the batch claimed, the deliveries in flight, each
// endpoint call (Timeout), the response body read, and the pass over a
// partner's endpoints (within the lease). It never logs a secret, a
// signature or a body.
package notifier

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellpay/cellpay/cmd/cell/internal/callback"
	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/pkg/webhook"
)

// Store is the outbox; *store.Store implements it, with the contracts
// documented there.
type Store interface {
	// ClaimCallbacks leases up to limit due pending rows to owner.
	ClaimCallbacks(ctx context.Context, owner string, now time.Time, lease time.Duration, limit int) ([]store.Callback, error)
	// RecordAttempt records an attempt's decision if owner still holds the
	// row's lease, else store.ErrLeaseLost.
	RecordAttempt(ctx context.Context, id int64, owner string, a store.Attempt) error
	// DisableEndpoint marks a partner's endpoint gone (410).
	DisableEndpoint(ctx context.Context, partnerID, endpoint, reason string, now time.Time) error
	// DisabledEndpoints lists every partner's disabled endpoints.
	DisabledEndpoints(ctx context.Context) (map[string][]string, error)
	// CallbackBacklog counts pending and dead rows.
	CallbackBacklog(ctx context.Context) (store.Backlog, error)
}

// Registry is the partner registry as the cell follows it;
// *partnerstate.Store implements it.
type Registry interface {
	// Index is the registry in force: never nil, never blocks.
	Index() *partners.Index
}

// Metrics records deliveries; *telemetry.Callbacks implements it. Its
// methods must not block.
type Metrics interface {
	// Attempt records one endpoint call: delivered, failed, gone, throttled.
	Attempt(result string, d time.Duration)
	// Delivered records the lag from the outcome's record to delivery.
	Delivered(lag time.Duration)
	// Dead counts a dead letter.
	Dead()
}

// Config configures a Notifier. Store and Registry are required.
type Config struct {
	Store    Store
	Registry Registry
	// Owner names this instance in leases; default the cell ID and a
	// random suffix (unique per process).
	Owner  string
	CellID string
	// Schedule is the delay before each attempt; default
	// callback.DefaultSchedule.
	Schedule callback.Schedule
	// Timeout bounds one endpoint call, connection included; default 10s.
	Timeout time.Duration
	// Lease is how long a claimed row is this instance's; default long
	// enough for a pass over the most endpoints a partner may have.
	Lease time.Duration
	// Batch is how many rows one claim takes [64]; Parallel how many are
	// delivered at once [16]. Idle is the longest pause when nothing is
	// due [1s]: rows it was not told of (another instance's, or theirs
	// after their lease ran out) are polled for 100 ms after a claim that
	// found some, the pause doubling with each empty claim up to Idle (so
	// every instance shares a backlog, and an idle cell polls once a
	// second); its own new rows (Wake) and the retries it scheduled itself
	// are taken when they are due.
	Batch, Parallel int
	Idle            time.Duration
	// MaxRetryAfter caps how far a 429/503's Retry-After pushes the next
	// attempt [1h].
	MaxRetryAfter time.Duration
	// RootCAs verifies endpoints' certificates; nil for the system roots.
	RootCAs *x509.CertPool
	// AllowHTTP lets plain http:// endpoints be called (tests of other
	// components only; the registry allows them, a production cell not).
	AllowHTTP bool
	Metrics   Metrics          // optional
	Now       func() time.Time // default time.Now
	Log       *slog.Logger
}

func (c *Config) validate() error {
	if c.Store == nil || c.Registry == nil {
		return errors.New("notifier: Store and Registry are required")
	}
	if len(c.Schedule) == 0 {
		c.Schedule = callback.DefaultSchedule
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Lease <= 0 {
		c.Lease = time.Duration(partners.MaxEndpoints+1)*c.Timeout + 5*time.Second
	}
	if c.Batch <= 0 {
		c.Batch = 64
	}
	if c.Parallel <= 0 {
		c.Parallel = 16
	}
	if c.Idle <= 0 {
		c.Idle = time.Second
	}
	if c.MaxRetryAfter <= 0 {
		c.MaxRetryAfter = time.Hour
	}
	if c.Owner == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		c.Owner = c.CellID + "/" + hex.EncodeToString(b[:])
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// Notifier delivers the outbox.
type Notifier struct {
	cfg    Config
	client *http.Client
	// backlog is the last sample, for metrics (which must not block).
	pending, dead, oldestNanos atomic.Int64
	// wake holds a signal that a row was written (Wake); soonest is the
	// earliest retry this notifier scheduled since its last claim, in
	// Unix nanoseconds (0: none). Only the earliest is kept: one due after
	// it is found by a later claim, at most Idle after its time.
	wake    chan struct{}
	soonest atomic.Int64
}

// New returns a Notifier.
func New(cfg Config) (*Notifier, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tr := &http.Transport{
		TLSClientConfig:       &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost:   cfg.Parallel,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   cfg.Timeout,
		ResponseHeaderTimeout: cfg.Timeout,
		ForceAttemptHTTP2:     true,
	}
	client := &http.Client{
		Transport: tr,
		Timeout:   cfg.Timeout,
		// A redirect is a misconfigured endpoint, not a delivery: never
		// follow one (it could send the signed event elsewhere).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &Notifier{cfg: cfg, client: client, wake: make(chan struct{}, 1)}, nil
}

// Wake tells the notifier that a row is due now (this instance committed
// a final outcome), so that it claims at once rather than at its next
// poll. It never blocks: wakes before the notifier gets to them coalesce
// into one claim.
func (n *Notifier) Wake() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// pause is how long Run waits with nothing claimed: poll, or less when a
// retry it scheduled itself falls due sooner.
func (n *Notifier) pause(poll time.Duration) time.Duration {
	d := poll
	if at := n.soonest.Load(); at != 0 {
		d = min(d, max(0, time.Unix(0, at).Sub(n.cfg.Now())))
	}
	return d
}

// scheduled notes a retry this notifier decided for at.
func (n *Notifier) scheduled(at time.Time) {
	v := at.UnixNano()
	for {
		cur := n.soonest.Load()
		if cur != 0 && cur <= v {
			return
		}
		if n.soonest.CompareAndSwap(cur, v) {
			return
		}
	}
}

// SetMetrics sets the notifier's Metrics (built from Backlog, so after
// New); call it before Run.
func (n *Notifier) SetMetrics(m Metrics) { n.cfg.Metrics = m }

// Backlog is the last sample of the outbox: pending and dead rows, and the
// age of the oldest pending one. It never blocks.
func (n *Notifier) Backlog() (pending, dead int64, oldest time.Duration) {
	return n.pending.Load(), n.dead.Load(), time.Duration(n.oldestNanos.Load())
}

// Run delivers until ctx ends, then waits for the deliveries in flight
// (each bounded by its timeouts). Failures of the database only delay
// delivery; they are logged, once per kind in a row.
func (n *Notifier) Run(ctx context.Context) {
	sample := time.NewTicker(time.Second)
	defer sample.Stop()
	n.sample(ctx)
	var lastErr string
	poll := min(busyPoll, n.cfg.Idle)
	for ctx.Err() == nil {
		did, err := n.Once(ctx)
		if err != nil && ctx.Err() == nil && err.Error() != lastErr {
			lastErr = err.Error()
			n.cfg.Log.Warn("notifier: round failed; retrying", "error", err)
		} else if err == nil {
			lastErr = ""
		}
		select {
		case <-sample.C:
			n.sample(ctx)
		default:
		}
		if did > 0 && err == nil {
			poll = min(busyPoll, n.cfg.Idle)
			continue
		}
		t := time.NewTimer(n.pause(poll))
		select {
		case <-ctx.Done():
		case <-n.wake:
		case <-t.C:
		}
		t.Stop()
		poll = min(2*poll, n.cfg.Idle)
	}
}

// busyPoll is the pause after a claim that found rows and then nothing:
// other instances' rows are likely still coming.
const busyPoll = 100 * time.Millisecond

func (n *Notifier) sample(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	b, err := n.cfg.Store.CallbackBacklog(sctx)
	if err != nil {
		return
	}
	n.pending.Store(b.Pending)
	n.dead.Store(b.Dead)
	var age time.Duration
	if !b.OldestPending.IsZero() {
		age = max(0, n.cfg.Now().Sub(b.OldestPending))
	}
	n.oldestNanos.Store(int64(age))
}

// Once claims one batch of due rows and delivers it, Parallel at a time,
// returning how many rows it claimed.
func (n *Notifier) Once(ctx context.Context) (int, error) {
	now := n.cfg.Now()
	// Every row due by now, the retries noted in soonest among them, is
	// claimed here or was already taken by another instance.
	if at := n.soonest.Load(); at != 0 && at <= now.UnixNano() {
		n.soonest.CompareAndSwap(at, 0)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	rows, err := n.cfg.Store.ClaimCallbacks(cctx, n.cfg.Owner, now, n.cfg.Lease, n.cfg.Batch)
	cancel()
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	disabled, err := n.cfg.Store.DisabledEndpoints(dctx)
	cancel()
	if err != nil {
		return len(rows), err // the leases run out; the rows come back
	}
	// A pass must end, and be recorded, within its lease.
	passCtx, cancelPass := context.WithDeadline(context.WithoutCancel(ctx), now.Add(n.cfg.Lease-2*time.Second))
	defer cancelPass()
	sem := make(chan struct{}, n.cfg.Parallel)
	var wg sync.WaitGroup
	for _, row := range rows {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			n.deliver(passCtx, row, disabled[row.PartnerID])
		})
	}
	wg.Wait()
	return len(rows), nil
}

// deliver makes one attempt at row and records its decision.
func (n *Notifier) deliver(ctx context.Context, row store.Callback, disabled []string) {
	var results []callback.Result
	p, ok := n.cfg.Registry.Index().Partner(row.PartnerID)
	switch {
	case !ok:
		results = []callback.Result{{Err: "partner not in the registry"}}
	case len(p.Callbacks.Secrets) == 0:
		results = []callback.Result{{Err: "partner has no signing secret"}}
	default:
		for _, ep := range callback.Order(p.Callbacks, disabled, row.EventID, row.Attempts) {
			r := n.call(ctx, ep, row, p.Callbacks.Secrets)
			results = append(results, r)
			if r.Verdict() == callback.Delivered || ctx.Err() != nil {
				break
			}
		}
	}
	now := n.cfg.Now()
	d := callback.Decide(n.cfg.Schedule, row.Attempts, results, now, n.cfg.MaxRetryAfter)
	for _, ep := range d.Disable {
		if err := n.cfg.Store.DisableEndpoint(ctx, row.PartnerID, ep, "410 Gone", now); err != nil {
			n.cfg.Log.Warn("notifier: disabling an endpoint", "partner_id", row.PartnerID, "endpoint", redact(ep), "error", err)
		} else {
			n.cfg.Log.Warn("notifier: endpoint answered 410 Gone; disabled for the partner until a replay", "partner_id", row.PartnerID, "endpoint", redact(ep))
		}
	}
	a := store.Attempt{Status: store.CallbackPending, Attempts: d.Attempts, NextAttemptAt: d.NextAttempt,
		LastError: d.Last.Err, LastHTTPStatus: d.Last.HTTPStatus, LastEndpoint: d.Last.Endpoint, DeliveredTo: d.DeliveredTo, Now: now}
	switch {
	case d.Delivered:
		a.Status, a.LastError, a.NextAttemptAt = store.CallbackDelivered, "", now
	case d.Dead:
		a.Status, a.NextAttemptAt = store.CallbackDead, now
	}
	err := n.cfg.Store.RecordAttempt(ctx, row.ID, n.cfg.Owner, a)
	if err == nil && a.Status == store.CallbackPending {
		n.scheduled(a.NextAttemptAt)
	}
	switch {
	case errors.Is(err, store.ErrLeaseLost):
		n.cfg.Log.Warn("notifier: lease ran out before the attempt was recorded; another instance retries", "event_id", row.EventID)
		return
	case err != nil:
		n.cfg.Log.Warn("notifier: recording an attempt; the row comes back when its lease runs out", "event_id", row.EventID, "error", err)
		return
	}
	if n.cfg.Metrics != nil {
		switch {
		case d.Delivered:
			n.cfg.Metrics.Delivered(now.Sub(row.CreatedAt))
		case d.Dead:
			n.cfg.Metrics.Dead()
		}
	}
	if d.Dead {
		n.cfg.Log.Warn("notifier: dead letter: the last attempt failed", "event_id", row.EventID, "partner_id", row.PartnerID,
			"transaction_id", row.TransactionID, "attempts", d.Attempts, "last_error", d.Last.Err, "last_status", d.Last.HTTPStatus)
	}
}

// maxResponse is how much of an answer's body is read (and discarded), so
// that the connection can be reused.
const maxResponse = 4 << 10

// call POSTs the event to one endpoint, signed at this moment.
func (n *Notifier) call(ctx context.Context, ep string, row store.Callback, secrets []string) (r callback.Result) {
	r.Endpoint = ep
	start := n.cfg.Now()
	defer func() {
		if n.cfg.Metrics != nil {
			n.cfg.Metrics.Attempt(resultName(r.Verdict()), n.cfg.Now().Sub(start))
		}
	}()
	u, err := url.Parse(ep)
	if err != nil || (u.Scheme != "https" && !(n.cfg.AllowHTTP && u.Scheme == "http")) {
		r.Err = "endpoint is not an https URL"
		return r
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep, bytes.NewReader(row.Body))
	if err != nil {
		r.Err = "bad request: " + err.Error()
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "cellpay-notifier/1 ("+n.cfg.CellID+")")
	if err := webhook.Headers(req.Header, row.EventID, start, row.Body, secrets); err != nil {
		r.Err = "signing: " + err.Error() // webhook's errors never quote a secret
		return r
	}
	resp, err := n.client.Do(req)
	if err != nil {
		r.Err = callError(err)
		return r
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponse))
	resp.Body.Close()
	r.HTTPStatus = resp.StatusCode
	if callback.Classify(resp.StatusCode) == callback.Throttled {
		r.RetryAfter = callback.RetryAfter(resp.Header.Get("Retry-After"), n.cfg.Now())
	}
	if r.Verdict() != callback.Delivered {
		r.Err = fmt.Sprintf("HTTP %d", resp.StatusCode)
	}
	return r
}

// callError names a failed call without the URL's query (which could hold
// a token the partner put there).
func callError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Client.Timeout") {
		return "timeout"
	}
	return err.Error()
}

func resultName(v callback.Verdict) string {
	switch v {
	case callback.Delivered:
		return "delivered"
	case callback.Gone:
		return "gone"
	case callback.Throttled:
		return "throttled"
	}
	return "failed"
}

// redact is an endpoint for a log line: scheme, host and path only.
func redact(ep string) string {
	u, err := url.Parse(ep)
	if err != nil {
		return "(malformed)"
	}
	return u.Scheme + "://" + u.Host + u.Path
}
