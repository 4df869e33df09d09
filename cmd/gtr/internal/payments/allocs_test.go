package payments

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/cellproto"
)

// submitAllocBudget bounds the allocations of one transaction through the
// GTR's payments server to a fake cell over a real gRPC stream on loopback
// (the PNR handshake included), counting both ends, since they share the
// process: docs/benchmarks/log/gtr-overhead-and-pgbench.md has the figures. Most of it is gRPC's and
// protobuf's; what is the GTR's own is held here, so that a change that
// adds to the path shows. Lower it when the path gets cheaper.
const submitAllocBudget = 285

// TestSubmitAllocationBudget holds the GTR's path to its allocation budget.
// Allocation counts are not timings: they do not depend on the machine's
// load, so this is no timed assertion.
func TestSubmitAllocationBudget(t *testing.T) {
	if testutil.Race {
		t.Skip("allocation counts differ under the race detector")
	}
	a := &fakeCell{}
	a.do = func(r *cellproto.ProcessRequest, s srv) error { return approve(r, s, a.id) }
	s, _ := setup(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	i := 0
	submit := func() {
		i++
		if _, err := s.SubmitTransaction(ctx, req("alloc-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	for range 50 { // warm: connections, pools, caches
		submit()
	}
	n := testing.AllocsPerRun(500, submit)
	t.Logf("%.1f allocations per transaction, budget %d", n, submitAllocBudget)
	if n > submitAllocBudget {
		t.Fatalf("%.1f allocations per transaction through the GTR, over the budget of %d", n, submitAllocBudget)
	}
}
