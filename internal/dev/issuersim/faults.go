package issuersim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cellpay/cellpay/pkg/issuerproto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxLatencyMS bounds latency_ms so the conversion to a Duration cannot
// overflow; an hour is far past any caller's deadline.
const maxLatencyMS = int64(time.Hour / time.Millisecond)

// errInjected is what a call failed by error_rate returns.
var errInjected = status.Error(codes.Unavailable, "issuersim: injected fault")

// faults holds the injected faults and the seeded source error_rate draws
// from. rand.Rand is not safe for concurrent use, hence mu.
type faults struct {
	mu  sync.Mutex
	cur faultSet
	rng *rand.Rand
}

type faultSet struct {
	latency     time.Duration
	errorRate   float64
	afterEffect bool
	hang        bool
}

// plan is what one Authorize or Adjust call suffers.
type plan struct {
	latency    time.Duration
	hang       bool
	failBefore bool
	failAfter  bool
}

func newFaults(seed uint64) *faults {
	return &faults{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// callPlan snapshots the faults for one Authorize or Adjust call. It draws
// from the random source only when error_rate is set, so runs without a
// partial error rate do not move the sequence.
func (f *faults) callPlan() plan {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := plan{latency: f.cur.latency, hang: f.cur.hang}
	if f.cur.errorRate > 0 && f.rng.Float64() < f.cur.errorRate {
		if f.cur.afterEffect {
			p.failAfter = true
		} else {
			p.failBefore = true
		}
	}
	return p
}

func (f *faults) latency() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur.latency
}

// set validates and installs p, returning what is now in force.
func (f *faults) set(p *issuerproto.Faults) (*issuerproto.Faults, error) {
	rate := p.GetErrorRate()
	if math.IsNaN(rate) || rate < 0 || rate > 1 {
		return nil, status.Error(codes.InvalidArgument, "issuersim: error_rate must be in [0, 1]")
	}
	ms := p.GetLatencyMs()
	if ms < 0 || ms > maxLatencyMS {
		return nil, status.Error(codes.InvalidArgument,
			fmt.Sprintf("issuersim: latency_ms must be in [0, %d]", maxLatencyMS))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cur = faultSet{
		latency:     time.Duration(ms) * time.Millisecond,
		errorRate:   rate,
		afterEffect: p.GetAfterEffect(),
		hang:        p.GetHang(),
	}
	return &issuerproto.Faults{
		LatencyMs:   ms,
		ErrorRate:   rate,
		AfterEffect: f.cur.afterEffect,
		Hang:        f.cur.hang,
	}, nil
}

// sleep waits d or until ctx ends, whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctxStatus(ctx)
	}
}

// ctxStatus turns an ended context into the matching gRPC status.
func ctxStatus(ctx context.Context) error {
	return status.FromContextError(ctx.Err()).Err()
}
