package routesync

import (
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/cmd/gtr/internal/state"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/kvsync"
)

// countingTarget counts the entries a Replica decodes.
type countingTarget struct {
	routingTarget
	decodes atomic.Int64
}

func (c *countingTarget) Decode(b []byte) (state.Doc, error) {
	c.decodes.Add(1)
	return c.routingTarget.Decode(b)
}

func startCounting(t *testing.T, url string, log io.Writer) (*countingTarget, *Syncer) {
	t.Helper()
	st, err := state.New(state.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ct := &countingTarget{routingTarget: routingTarget{st}}
	r, err := kvsync.StartReplica(kvsync.ReplicaConfig[state.Doc]{
		Target: ct, Seed: func() (state.Doc, error) { return seedDoc(), nil }, What: "routing table", Key: "routing",
		NATSURL: url, ReplicaID: t.Name(), PollInterval: 20 * time.Millisecond, OpTimeout: time.Second,
		Log: slog.New(slog.NewTextHandler(log, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return ct, r
}

// TestOnlyNewerRevisionsDecoded: polling an entry already applied decodes
// nothing; a refused entry is decoded and logged once, however often it is
// polled.
func TestOnlyNewerRevisionsDecoded(t *testing.T) {
	ns := startNATS(t)
	var log testutil.Buffer
	ct, r := startCounting(t, ns.url(), &log)
	testutil.Eventually(t, 5*time.Second, "synced", func() bool { return r.Status() == kvsync.StatusConnected && ct.decodes.Load() > 0 })
	testutil.Eventually(t, 2*time.Second, "applied", func() bool { _, rev, _ := ct.st.Doc(); return rev > 0 })
	n := ct.decodes.Load()
	time.Sleep(10 * (20 * time.Millisecond))
	if got := ct.decodes.Load(); got != n {
		t.Fatalf("%d decodes of an entry already applied over 10 polls", got-n)
	}

	nc, err := nats.Connect(ns.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctxFor(t), kvsync.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	before := ct.st.Table()
	if _, err := kv.Put(ctxFor(t), "routing", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Second, "the garbage entry seen", func() bool { return ct.decodes.Load() == n+1 })
	time.Sleep(10 * (20 * time.Millisecond))
	if got := ct.decodes.Load(); got != n+1 {
		t.Fatalf("a refused entry decoded %d times", got-n)
	}
	if c := strings.Count(log.String(), "refused an entry that does not decode"); c != 1 {
		t.Fatalf("refusal logged %d times, want once:\n%s", c, log.String())
	}
	if ct.st.Table() != before {
		t.Fatal("a garbage entry replaced the table")
	}
}

// TestBucketRecreatedWhileRunning: a bucket lost and recreated starts its
// revisions again at 1; replicas that ran through it keep taking changes
// (the document in force reseeds it, and later revisions are not ignored
// as older than the old bucket's).
func TestBucketRecreatedWhileRunning(t *testing.T) {
	ns := startNATS(t)
	r1 := startReplica(t, ns.url(), "")
	r2 := startReplica(t, ns.url(), "")
	testutil.Eventually(t, 5*time.Second, "connected", func() bool {
		return r1.sy.Status() == kvsync.StatusConnected && r2.sy.Status() == kvsync.StatusConnected
	})
	for pct := range 5 {
		if _, err := r1.sy.Update(ctxFor(t), drain("cell-a", 10+pct)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 2*time.Second, "replica 2 converged", func() bool { return weight(r2.st, "cell-a") == 86 })

	nc, err := nats.Connect(ns.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if err := js.DeleteKeyValue(ctxFor(t), kvsync.DefaultBucket); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "reseeded", func() bool {
		kv, err := js.KeyValue(ctxFor(t), kvsync.DefaultBucket)
		if err != nil {
			return false
		}
		_, err = kv.Get(ctxFor(t), "routing")
		return err == nil
	})
	if w := weight(r1.st, "cell-a"); w != 86 {
		t.Fatalf("the reseed rolled a change back: weight %d", w)
	}
	testutil.Eventually(t, 5*time.Second, "writable again", func() bool {
		_, err := r2.sy.Update(ctxFor(t), drain("cell-a", 50))
		return err == nil
	})
	testutil.Eventually(t, 2*time.Second, "both take the new change", func() bool {
		return weight(r1.st, "cell-a") == 50 && weight(r2.st, "cell-a") == 50
	})
}
