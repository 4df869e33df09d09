package instance

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/internal/dev/testutil"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func openStore(t *testing.T, url, id string) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := store.Open(ctx, url, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	s.SetInstance(id)
	return s
}

// TestOneReconcilerAndTakeover: of two instances, one runs the
// reconciler at a time; when it stops, the other takes over within the
// bound.
func TestOneReconcilerAndTakeover(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, pgtest.IgnoreGoroutines()) }) // after the stores close
	url := pgtest.NewDatabase(t)
	log := slog.New(slog.DiscardHandler)
	var running, most atomic.Int32
	var mu sync.Mutex
	var leaders []string
	run := func(id string) func(ctx context.Context) {
		return func(ctx context.Context) {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			mu.Lock()
			leaders = append(leaders, id)
			mu.Unlock()
			<-ctx.Done()
		}
	}
	type inst struct {
		stop func()
		done chan struct{}
	}
	start := func(id string) inst {
		st := openStore(t, url, id)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { Lead(ctx, st, 100*time.Millisecond, run(id), log); close(done) }()
		return inst{func() { cancel(); <-done }, done}
	}
	a := start("a")
	testutil.Eventually(t, 5*time.Second, "a leads", func() bool { return running.Load() == 1 })
	b := start("b")
	time.Sleep(500 * time.Millisecond) // b tries several times meanwhile
	mu.Lock()
	first := strings.Join(leaders, ",")
	mu.Unlock()
	if running.Load() != 1 || first != "a" {
		t.Fatalf("with a leading: %d running, leaders %q; want 1, a", running.Load(), first)
	}
	stopped := time.Now()
	a.stop()
	testutil.Eventually(t, 2*time.Second, "b takes over", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(leaders) == 2 && leaders[1] == "b"
	})
	if took := time.Since(stopped); took > time.Second {
		t.Fatalf("takeover took %v; want within a second (a few tries)", took)
	}
	b.stop()
	if most.Load() != 1 {
		t.Fatalf("%d reconcilers ran at once", most.Load())
	}
}

// TestLeaseKeeper renews the lease with the served version and drops it
// at the end.
func TestLeaseKeeper(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, pgtest.IgnoreGoroutines()) }) // after the stores close
	url := pgtest.NewDatabase(t)
	st := openStore(t, url, "a")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	v := uint64(3)
	go func() {
		KeepLease(ctx, st, time.Minute, 50*time.Millisecond, func() *uint64 { return &v }, slog.New(slog.DiscardHandler))
		close(done)
	}()
	testutil.Eventually(t, 5*time.Second, "the lease with version 3", func() bool {
		got, ok, err := st.ServedRefdata(context.Background())
		return err == nil && ok && got == 3
	})
	cancel()
	<-done
	if _, ok, err := st.ServedRefdata(context.Background()); err != nil || ok {
		t.Fatalf("after stop: live instances %v, %v; want none", ok, err)
	}
}

func TestDefaultIDIsUniquePerCall(t *testing.T) {
	a, b := DefaultID(), DefaultID()
	if a == "" || a == b {
		t.Fatalf("DefaultID: %q, %q", a, b)
	}
}
