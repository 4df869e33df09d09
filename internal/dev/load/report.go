package load

import (
	"errors"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
)

// Report is the outcome of one run. Latency covers completed requests only
// (those that got a Transaction or, from a cell, a Reroutable answer).
type Report struct {
	Target      string  `json:"target"`
	Mode        string  `json:"mode"`
	Addr        string  `json:"addr"`
	RunID       string  `json:"run_id"`
	Rate        float64 `json:"rate,omitempty"`
	Concurrency int     `json:"concurrency"`
	// StopReason is "count", "duration" or "interrupted".
	StopReason string `json:"stop_reason"`

	// Sent counts requests issued; each ends completed, as an error or as a
	// protocol error.
	Sent      int64 `json:"sent"`
	Completed int64 `json:"completed"`
	// Errors counts failed RPCs by gRPC code name (e.g. "UNAVAILABLE").
	Errors map[string]int64 `json:"errors"`
	// ProtocolErrors counts cell streams that ended without a terminal event.
	ProtocolErrors int64 `json:"protocol_errors"`
	// Statuses counts results by transaction status; APPROVED, DECLINED,
	// PENDING and FAILED are always present.
	Statuses map[string]int64 `json:"statuses"`
	// Reroutable counts cell answers that were Reroutable (cell target only).
	Reroutable int64 `json:"reroutable"`
	// PointOfNoReturn counts PNR events seen (cell target only).
	PointOfNoReturn int64 `json:"point_of_no_return"`
	// Dropped counts open-loop slots skipped because Concurrency requests
	// were outstanding.
	Dropped int64 `json:"dropped"`

	// Endpoints counts completed requests by the access point that
	// answered, FailedOver the requests that waited for the retry on
	// another one, and Switches are the client's switches between access
	// points, oldest first (Config.Endpoints or Config.AccessPoints only).
	Endpoints  map[string]int64 `json:"endpoints,omitempty"`
	FailedOver int64            `json:"failed_over,omitempty"`
	Switches   []client.Event   `json:"switches,omitempty"`

	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// Throughput is completed requests per second of elapsed time.
	Throughput float64        `json:"throughput"`
	Latency    LatencySummary `json:"latency_ms"`

	// FollowUps is the follow-ups' report, with Config.FollowUps only.
	FollowUps *FollowUpReport `json:"follow_ups,omitempty"`
}

// LatencySummary is in milliseconds. Percentiles use the nearest-rank method.
type LatencySummary struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// outcome is what one completed request answered.
type outcome struct {
	txn        *cellpayv1.Transaction // the answer, when there is one
	status     cellpayv1.TransactionStatus
	reroutable bool
	pnr        bool
	endpoint   string // the access point that answered (Endpoints or AccessPoints only)
	failedOver bool
}

// errNoTerminal: a cell stream ended before its terminal event.
var errNoTerminal = errors.New("load: cell stream ended without a terminal event")

const numCodes = 17 // codes.OK .. codes.Unauthenticated

// codeNames are the canonical gRPC code names, as docs/design/README.md spells them.
var codeNames = [numCodes]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
	"FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
	"INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}

// recorder collects results from many goroutines without locks: counters
// are atomic and each latency goes to its own slot of a latencies store.
type recorder struct {
	sent, completed, dropped      atomic.Int64
	reroutable, pnr, protocolErrs atomic.Int64
	codes                         [numCodes]atomic.Int64
	statuses                      [5]atomic.Int64 // by TransactionStatus
	lat                           latencies
	endpoints                     []string       // the addresses of Config.Endpoints or AccessPoints, fixed
	perEndpoint                   []atomic.Int64 // completed, by endpoints' index
	failedOver                    atomic.Int64
}

func newRecorder(count int64, endpoints []string) *recorder {
	return &recorder{lat: newLatencies(count), endpoints: endpoints, perEndpoint: make([]atomic.Int64, len(endpoints))}
}

// latChunk is how many latencies one chunk of a latencies store holds.
const latChunk = 1 << 14

// latencies holds up to a fixed count of latencies, written concurrently
// without locks, in chunks allocated when first written: a run's memory
// follows the requests it completes, not its Count (a slice for MaxCount
// is 80 MB, which every run used to clear before its first request).
type latencies struct {
	chunks []atomic.Pointer[[latChunk]time.Duration]
	n      atomic.Int64
}

func newLatencies(count int64) latencies {
	return latencies{chunks: make([]atomic.Pointer[[latChunk]time.Duration], (count+latChunk-1)/latChunk)}
}

// add stores d in the next slot; at most count adds are made (one per
// request).
func (l *latencies) add(d time.Duration) {
	i := l.n.Add(1) - 1
	c := &l.chunks[i/latChunk]
	p := c.Load()
	if p == nil {
		c.CompareAndSwap(nil, new([latChunk]time.Duration)) // the first writer's chunk wins
		p = c.Load()
	}
	p[i%latChunk] = d
}

// all copies the latencies out; call it once every add has returned.
func (l *latencies) all() []time.Duration {
	n := l.n.Load()
	out := make([]time.Duration, 0, n)
	for i := int64(0); i < n; i += latChunk {
		out = append(out, l.chunks[i/latChunk].Load()[:min(latChunk, n-i)]...)
	}
	return out
}

// done is how many slots are resolved: finished requests plus drops.
func (r *recorder) done() int64 {
	n := r.completed.Load() + r.protocolErrs.Load() + r.dropped.Load()
	for i := range r.codes {
		n += r.codes[i].Load()
	}
	return n
}

func (r *recorder) record(o outcome, err error, latency time.Duration) {
	if o.pnr {
		r.pnr.Add(1)
	}
	if o.failedOver {
		r.failedOver.Add(1)
	}
	if err == nil {
		for i, e := range r.endpoints {
			if e == o.endpoint {
				r.perEndpoint[i].Add(1)
			}
		}
	}
	switch {
	case errors.Is(err, errNoTerminal):
		r.protocolErrs.Add(1)
	case err != nil:
		c := status.Code(err)
		if int(c) >= numCodes || c == codes.OK {
			c = codes.Unknown
		}
		r.codes[c].Add(1)
	default:
		if o.reroutable {
			r.reroutable.Add(1)
		} else {
			s := o.status
			if int(s) >= len(r.statuses) || s < 0 {
				s = cellpayv1.TransactionStatus_TRANSACTION_STATUS_UNSPECIFIED
			}
			r.statuses[s].Add(1)
		}
		r.lat.add(latency)
		r.completed.Add(1)
	}
}

// report summarises the recorder; call it only once every request is done.
func (r *recorder) report(elapsed time.Duration) Report {
	rep := Report{
		Sent:            r.sent.Load(),
		Completed:       r.completed.Load(),
		Errors:          map[string]int64{},
		ProtocolErrors:  r.protocolErrs.Load(),
		Statuses:        map[string]int64{},
		Reroutable:      r.reroutable.Load(),
		PointOfNoReturn: r.pnr.Load(),
		Dropped:         r.dropped.Load(),
		ElapsedSeconds:  elapsed.Seconds(),
		Latency:         summarize(r.lat.all()),
	}
	if len(r.endpoints) > 0 {
		rep.Endpoints = map[string]int64{}
		for i, e := range r.endpoints {
			rep.Endpoints[e] = r.perEndpoint[i].Load()
		}
		rep.FailedOver = r.failedOver.Load()
	}
	for i := range r.codes {
		if n := r.codes[i].Load(); n > 0 {
			rep.Errors[codeNames[i]] = n
		}
	}
	for i := range r.statuses {
		s := cellpayv1.TransactionStatus(i)
		n := r.statuses[i].Load()
		if n > 0 || s != cellpayv1.TransactionStatus_TRANSACTION_STATUS_UNSPECIFIED {
			rep.Statuses[s.String()] = n
		}
	}
	if elapsed > 0 {
		rep.Throughput = float64(rep.Completed) / elapsed.Seconds()
	}
	return rep
}

// summarize sorts lat in place and returns its percentiles and mean.
func summarize(lat []time.Duration) LatencySummary {
	if len(lat) == 0 {
		return LatencySummary{}
	}
	slices.Sort(lat)
	var sum float64
	for _, d := range lat {
		sum += float64(d)
	}
	return LatencySummary{
		P50:  ms(percentile(lat, 50)),
		P90:  ms(percentile(lat, 90)),
		P99:  ms(percentile(lat, 99)),
		Max:  ms(lat[len(lat)-1]),
		Mean: sum / float64(len(lat)) / float64(time.Millisecond),
	}
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of a
// sorted, non-empty slice: the smallest value with at least p% of the values
// at or below it.
func percentile(sorted []time.Duration, p float64) time.Duration {
	// p*n/100 rather than p/100*n: exact for integer p and n, so 90% of
	// 100 values is rank 90, not 91.
	rank := int(math.Ceil(p * float64(len(sorted)) / 100))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
