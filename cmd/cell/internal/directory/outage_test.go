package directory

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
)

// TestOutage: the directory counts as unavailable only once every
// operation seen for OutageAfter failed, counted from the first failure
// seen after the last success, at the time it was seen; a success, or a
// refusal (the directory answered), ends it; the caller's own cancelled
// context is not the directory's failure.
func TestOutage(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	o := outage{after: time.Second, now: func() time.Time { return now }}
	ctx := context.Background()
	failed := unavailable(errors.New("nats: timeout"))
	step := func(d time.Duration, err error, want bool) {
		t.Helper()
		now = now.Add(d)
		o.observe(ctx, err)
		if got := o.down(); got != want {
			t.Fatalf("at +%v after %v: outage %v, want %v", d, err, got, want)
		}
	}
	step(0, failed, false)                    // one failed claim
	step(500*time.Millisecond, failed, false) // two, within the bound
	step(600*time.Millisecond, failed, true)  // failing for 1.1 s
	step(10*time.Millisecond, nil, false)     // answered: over
	step(100*time.Millisecond, failed, false) // a new first failure
	step(time.Second, ErrNotOwner, false)     // a refusal is an answer
	step(5*time.Second, failed, false)        // after a long quiet (a pause): a first failure, not an outage
	step(999*time.Millisecond, failed, false) // still inside the bound
	step(time.Millisecond, failed, true)      // and past it

	// The caller's own context ending says nothing of the directory.
	o = outage{after: time.Second, now: func() time.Time { return now }}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	o.observe(gone, failed)
	now = now.Add(2 * time.Second)
	o.observe(ctx, failed)
	if o.down() {
		t.Fatal("a failure seen on a cancelled context counted")
	}
}

// TestUsable: a directory that has not opened is not usable until it has
// been unavailable for OutageAfter (a cell with it would re-route what it
// cannot claim); once open, it stays usable (an outage then is the
// natural homes' to decide in).
func TestUsable(t *testing.T) {
	ns := natstest.Start(t)
	ns.Stop()
	d, err := Open(Config{NATSURL: ns.URL(), CellID: "cell-a", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	if d.Usable() {
		t.Fatal("usable at once with NATS down, before an outage of OutageAfter")
	}
	testutil.Eventually(t, 5*time.Second, "usable in an outage", d.Usable)
	ns.Restart()
	select {
	case <-d.Opened():
	case <-time.After(20 * time.Second):
		t.Fatal("not open 20 s after NATS returned")
	}
	ns.Stop()
	testutil.Eventually(t, 10*time.Second, "NATS lost", func() bool { return !d.Ready() })
	if !d.Usable() {
		t.Fatal("an open directory not usable when NATS is lost")
	}
}
