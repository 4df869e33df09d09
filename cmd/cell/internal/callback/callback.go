// Package callback decides how a cell delivers a final outcome's callback:
// which of the partner's endpoints to try in an attempt and in what order
// (its mode), what each answer means, and what follows an attempt
// (delivered, retry at which time, or a dead letter). It is the notifier's
// policy with no I/O: the notifier (cmd/cell/internal/notifier) performs
// the HTTP calls and the writes, and passes the clock in.
//
// One attempt is one pass over the partner's endpoints in the mode's
// order, stopping at the first that takes the event (2xx): a failing
// endpoint moves the attempt to the next one at once, and the public
// endpoint comes last, used when every private one fails. Between attempts
// the Schedule's delays apply. Modes (the WeChat Pay guide's private
// callback modes):
//
//   - ordered: the endpoints as listed (the primary line first, then the
//     backup);
//   - reverse: the last first (the other line first);
//   - random: a pass starts at an endpoint picked by the event, and each
//     retry starts at the next one, so events spread over every endpoint
//     and a retry moves to another.
package callback

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cellpay/cellpay/internal/partners"
)

// Schedule is the delay before each attempt, the first included (usually
// 0): len(Schedule) attempts are made before an event is a dead letter.
type Schedule []time.Duration

// DefaultSchedule is Svix's schedule (0, 5 s, 5 min, 30 min, 2 h, 5 h,
// 10 h, 10 h: about 28 hours) compressed for local runs and tests to
// about 18 minutes. Production sets SvixSchedule (or its own) with the
// cell's -callback-schedule.
var DefaultSchedule = Schedule{0, time.Second, 5 * time.Second, 15 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute}

// SvixSchedule is Svix's retry schedule, the production default to copy.
var SvixSchedule = Schedule{0, 5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}

// MaxAttempts caps a schedule's length.
const MaxAttempts = 64

// ParseSchedule reads a comma-separated list of Go durations, e.g.
// "0s,5s,5m,30m,2h,5h,10h,10h".
func ParseSchedule(s string) (Schedule, error) {
	var out Schedule
	for part := range strings.SplitSeq(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("callback: schedule step %q: want a duration >= 0 such as 5s", part)
		}
		out = append(out, d)
	}
	if len(out) == 0 || len(out) > MaxAttempts {
		return nil, fmt.Errorf("callback: schedule: %d steps, want 1 to %d", len(out), MaxAttempts)
	}
	return out, nil
}

func (s Schedule) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

// Order returns the endpoints one attempt tries, in order: the partner's
// private endpoints that are not disabled, in its mode's order for the
// event's attempt (0 for the first), then its public endpoint. eventID
// seeds random mode's starting point.
func Order(cb partners.Callbacks, disabled []string, eventID string, attempt int) []string {
	var private []string
	for _, e := range cb.Endpoints {
		if !slices.Contains(disabled, e) {
			private = append(private, e)
		}
	}
	switch cb.Mode {
	case partners.ModeReverse:
		slices.Reverse(private)
	case partners.ModeRandom:
		if n := len(private); n > 1 {
			h := fnv.New64a()
			h.Write([]byte(eventID))
			start := int((h.Sum64() + uint64(attempt)) % uint64(n))
			private = append(private[start:], private[:start]...)
		}
	}
	if cb.Public != "" && !slices.Contains(disabled, cb.Public) && !slices.Contains(private, cb.Public) {
		private = append(private, cb.Public)
	}
	return private
}

// Verdict is what one endpoint's answer means.
type Verdict int

const (
	// Failed: an error, a timeout or an answer other than the ones below;
	// the attempt moves on to the next endpoint.
	Failed Verdict = iota
	// Delivered: 2xx. The attempt, and the event, are done.
	Delivered
	// Gone: 410. The endpoint is disabled for the partner; the attempt
	// moves on.
	Gone
	// Throttled: 429 or 503. The attempt moves on, and the next attempt
	// waits at least the answer's Retry-After.
	Throttled
)

// Classify reads an HTTP status (0 when there was no answer).
func Classify(status int) Verdict {
	switch {
	case status >= 200 && status < 300:
		return Delivered
	case status == http.StatusGone:
		return Gone
	case status == http.StatusTooManyRequests, status == http.StatusServiceUnavailable:
		return Throttled
	}
	return Failed
}

// RetryAfter reads a Retry-After header (seconds, or an HTTP date) at now;
// 0 when absent or malformed.
func RetryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if s, err := strconv.Atoi(h); err == nil {
		if s < 0 {
			return 0
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Result is one endpoint's answer within an attempt.
type Result struct {
	Endpoint   string
	HTTPStatus int           // 0: no answer
	Err        string        // why it failed, without secrets or bodies
	RetryAfter time.Duration // from a Throttled answer
}

// Verdict is the result's meaning.
func (r Result) Verdict() Verdict {
	if r.Err != "" && r.HTTPStatus == 0 {
		return Failed
	}
	return Classify(r.HTTPStatus)
}

// Decision is what follows an attempt.
type Decision struct {
	Delivered   bool
	Dead        bool
	Attempts    int       // attempts made, this one included
	NextAttempt time.Time // when neither delivered nor dead
	DeliveredTo string
	// Disable lists the endpoints that answered 410.
	Disable []string
	// Last is the last failure (or the delivery), for operators.
	Last Result
}

// ErrNoEndpoint is the failure of an attempt with nothing to try: the
// partner has no callback endpoint (left), or no signing secret.
var ErrNoEndpoint = errors.New("no callback endpoint")

// Decide returns what follows attempt number attempts+1 of an event, whose
// results are its endpoints' answers in the order tried, at now.
// maxRetryAfter caps how long a Retry-After may push the next attempt.
func Decide(s Schedule, attempts int, results []Result, now time.Time, maxRetryAfter time.Duration) Decision {
	d := Decision{Attempts: attempts + 1}
	if len(results) == 0 {
		d.Last = Result{Err: ErrNoEndpoint.Error()}
	}
	var wait time.Duration
	for _, r := range results {
		d.Last = r
		switch r.Verdict() {
		case Delivered:
			d.Delivered, d.DeliveredTo = true, r.Endpoint
			return d
		case Gone:
			d.Disable = append(d.Disable, r.Endpoint)
		case Throttled:
			wait = max(wait, min(r.RetryAfter, maxRetryAfter))
		}
	}
	if d.Attempts >= len(s) {
		d.Dead = true
		return d
	}
	d.NextAttempt = now.Add(max(s[d.Attempts], wait))
	return d
}
