package health

import (
	"log/slog"
	"strconv"
	"testing"
)

// BenchmarkObserve is the passive health signal's cost on the payment
// path: every attempt's outcome, from many goroutines at once, spread over
// ten cells of one pool (one failure in 50, below every threshold, so no
// cell is ejected and the outlier checks run on the failures).
func BenchmarkObserve(b *testing.B) {
	m, err := New(Config{OnChange: func(string, int) {}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	cells := make([]Cell, 10)
	ids := make([]string, len(cells))
	for i := range cells {
		ids[i] = "cell-" + strconv.Itoa(i)
		cells[i] = Cell{ID: ids[i], Addr: "127.0.0.1:1", Pool: "main"}
	}
	m.SetCells(cells)
	b.Cleanup(m.close)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			m.Observe(ids[i%len(ids)], i%50 != 49)
			i++
		}
	})
}
