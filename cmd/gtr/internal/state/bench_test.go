package state

import (
	"strconv"
	"testing"

	"github.com/cellpay/cellpay/pkg/routing"
)

// benchState is the shape of pkg/routing's benchmark: 10 rules, 10 cells.
func benchState(b *testing.B) (*State, *fakeHealth, []routing.Attrs) {
	s := routing.Spec{Version: 1}
	for i := range 10 {
		s.Cells = append(s.Cells, routing.Cell{ID: "cell-" + strconv.Itoa(i), Addr: "10.0.0.1:7000", Pool: "main", Weight: 100 - 25*(i%3)})
	}
	markets := []string{"DE", "FR", "IT", "ES", "NL", "BE", "AT", "PL", "SE"}
	for i, m := range markets {
		s.Rules = append(s.Rules, routing.Rule{Name: "rule-" + strconv.Itoa(i), Markets: []string{m}, Pool: "main", HashOn: routing.HashField(i % 4)})
	}
	s.Rules = append(s.Rules, routing.Rule{Name: "default", Pool: "main"})
	h := &fakeHealth{}
	st, err := New(Config{Health: h})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Apply(FromSpec(s), 1); err != nil {
		b.Fatal(err)
	}
	attrs := make([]routing.Attrs, 1024)
	for i := range attrs {
		attrs[i] = routing.Attrs{TransactionID: "t-" + strconv.Itoa(i), PartnerID: "p-" + strconv.Itoa(i%37),
			Market: []string{"DE", "FR", "GB", "US"}[i%4], PaymentType: routing.PaymentCardAuthorization, MerchantID: "m-" + strconv.Itoa(i%101)}
	}
	return st, h, attrs
}

// BenchmarkRoute compares routing on a table held directly with routing
// through State.Table's atomic load: the load should cost next to nothing.
func BenchmarkRoute(b *testing.B) {
	st, h, attrs := benchState(b)
	dst := make([]routing.Choice, 0, 16)
	b.Run("direct", func(b *testing.B) {
		tbl := st.Table()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			_, _ = tbl.Route(&attrs[i&1023], dst)
			i++
		}
	})
	b.Run("state.Table", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			_, _ = st.Table().Route(&attrs[i&1023], dst)
			i++
		}
	})
	b.Run("state.Table/parallel-with-writer", func(b *testing.B) {
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { // a health flapper, compiled as fast as it can
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
					h.set(st, "cell-1", up(i%2 == 0))
				}
			}
		}()
		// Allocations reported here are the writer's (Compile), not Route's.
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			dst := make([]routing.Choice, 0, 16)
			i := 0
			for pb.Next() {
				_, _ = st.Table().Route(&attrs[i&1023], dst)
				i++
			}
		})
		close(stop)
		<-done
	})
}
