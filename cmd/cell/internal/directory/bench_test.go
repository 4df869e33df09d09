package directory

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// BenchmarkClaim is the directory's cost on a transaction's normal path:
// one Create of a new entry, on a real NATS server on loopback, one at a
// time and from many goroutines (as a cell's concurrent attempts do).
func BenchmarkClaim(b *testing.B) {
	ns := natstest.Start(b)
	d, err := Open(Config{NATSURL: ns.URL(), CellID: "cell-a"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(d.Close)
	if !testutil.Within(10*time.Second, d.Ready) {
		b.Fatal("directory not ready")
	}
	var n atomic.Int64
	claim := func(b *testing.B) {
		k := idempotency.Key{PartnerID: "p-001", TransactionID: "bench-" + strconv.FormatInt(n.Add(1), 10)}
		if _, ours, err := d.Claim(context.Background(), k, owned("cell-a", "c", 1, fpA)); err != nil || !ours {
			b.Fatalf("claim: ours=%v err=%v", ours, err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			claim(b)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				claim(b)
			}
		})
	})
}
