package refsync

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/refdata"
)

// TestInstancesApplyEveryVersion: two instances of a cell share its
// Postgres and its durable consumer, so each version reaches one of them.
// Both serve every version all the same (an update's base is the cell's
// stored version, never refused for a stale copy), and the cell reports
// the version all its live instances serve.
func TestInstancesApplyEveryVersion(t *testing.T) {
	checkLeaks(t)
	url := runNATS(t)
	pub := newPublisher(t, url)
	dbURL := pgtest.NewDatabase(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func(id string) *store.Store {
		st, err := store.Open(ctxT(t), dbURL, 4)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		st.SetInstance(id)
		return st
	}
	stores := map[string]*store.Store{"a": open("a"), "b": open("b")}
	syncers := map[string]*Syncer{}
	for id, st := range stores {
		s, err := New(ctxT(t), Config{CellID: "cell-t", Store: st, NATSURL: url, Log: log,
			StatusInterval: 50 * time.Millisecond, FollowInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		syncers[id] = s
		ctx, cancel := context.WithCancel(ctxT(t))
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}

	f := sample(t)
	f.Version = 1
	pub.publish(&refdata.Message{Version: 1, Kind: refdata.KindSnapshot, Snapshot: &f, Hash: refdata.ContentHash(f)}, nil)
	for v := uint64(2); v <= 5; v++ {
		u := refdata.Update{FXRates: map[string]string{"GBP": "0.9" + string(rune('0'+v))}}
		pub.publish(&refdata.Message{Version: v, Kind: refdata.KindUpdate, Base: v - 1, Update: &u, Hash: refdata.ContentHash(u)}, nil)
	}
	for id, s := range syncers {
		testutil.Eventually(t, 10*time.Second, id+" serves version 5", func() bool { return s.View().Version() == "5" })
		if n := s.Status().Refused; n != 0 {
			t.Fatalf("%s refused %d versions: %s", id, n, s.Status().LastRefused)
		}
		if got, _ := s.View().Convert(10000, "EUR", "GBP"); got != 9500 {
			t.Fatalf("%s converts with %d, want version 5's rate", id, got)
		}
	}

	// A third live instance still serves version 3: the cell reports 3
	// until it leaves. (Reports from here on: each instance reported every
	// version on its way to 5.)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	statuses, err := nc.SubscribeSync(refdata.StatusSubjectPrefix + "cell-t")
	if err != nil {
		t.Fatal(err)
	}
	for id, st := range stores {
		if err := st.RenewLease(ctxT(t), time.Minute, syncers[id].Served()); err != nil {
			t.Fatal(err)
		}
	}
	old := open("old")
	three := uint64(3)
	if err := old.RenewLease(ctxT(t), time.Minute, &three); err != nil {
		t.Fatal(err)
	}
	reported := func(want uint64) bool {
		for {
			m, err := statuses.NextMsg(2 * time.Second)
			if err != nil {
				return false
			}
			var st refdata.Status
			if json.Unmarshal(m.Data, &st) == nil && st.Version == want {
				return true
			}
		}
	}
	if !reported(3) {
		t.Fatal("the cell never reported version 3, the minimum over its live instances")
	}
	if err := old.DropLease(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if !reported(5) {
		t.Fatal("the cell never reported version 5 once every live instance served it")
	}
	// No report below 5 after the fact (a moment for those in flight).
	time.Sleep(100 * time.Millisecond)
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); {
		m, err := statuses.NextMsg(200 * time.Millisecond)
		if err != nil {
			break
		}
		var st refdata.Status
		if json.Unmarshal(m.Data, &st) == nil && st.Version != 5 {
			t.Fatalf("reported %d after every instance served 5", st.Version)
		}
	}
}
