package state

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/cellpay/cellpay/cmd/gtr/internal/health"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/routing"
)

// TestEjectionCompilesOffTheCallersGoroutine wires the real health monitor
// to the state as the GTR does, ejects a cell by the payment path's
// Observe, and checks that Observe returned without compiling (the
// compiler is not running yet, so nothing may have been published), then
// that the compiler publishes the ejection once it runs.
func TestEjectionCompilesOffTheCallersGoroutine(t *testing.T) {
	var st *State
	mon, err := health.New(health.Config{OnChange: func(id string, share int) { st.HealthChanged(id, share) },
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if st, err = New(Config{Health: mon}); err != nil {
		t.Fatal(err)
	}
	d := testDoc()
	if err := st.Apply(d, 1); err != nil {
		t.Fatal(err)
	}
	var cells []health.Cell
	for _, c := range d.Cells {
		cells = append(cells, health.Cell{ID: c.ID, Addr: c.Addr, Pool: c.Pool})
	}
	mon.SetCells(cells)
	t.Cleanup(func() { mon.SetCells(nil) })

	published, compiles := st.Table(), st.compiles.Load()
	for range 3 { // the default run of consecutive failures
		mon.Observe("cell-b", false)
	}
	if mon.Share("cell-b") != 0 {
		t.Fatal("cell-b not ejected")
	}
	if st.compiles.Load() != compiles || st.Table() != published {
		t.Fatal("Observe compiled the table on the caller's goroutine")
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); st.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testutil.Eventually(t, 5*time.Second, "the compiler publishes cell-b down", func() bool {
		c, _ := st.Table().Cell("cell-b")
		return c.State == routing.CellDown
	})
	if d, _, _ := st.Doc(); d.Cell("cell-b").Weight != 100 {
		t.Fatal("the ejection reached the operator's table")
	}
}
