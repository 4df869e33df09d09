package payments

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/cellpay/cellpay/pkg/cellproto"
)

// BenchmarkSubmitTransaction is the GTR's own cost per transaction: validate,
// coalesce, route and forward over a real gRPC stream (with the PNR
// handshake) to a fake cell on loopback that approves at once.
func BenchmarkSubmitTransaction(b *testing.B) {
	a := &fakeCell{}
	a.do = func(r *cellproto.ProcessRequest, s srv) error { return approve(r, s, a.id) }
	s, _ := setup(b, a)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if _, err := s.SubmitTransaction(ctx, req("b-"+strconv.Itoa(i)+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
