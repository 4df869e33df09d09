package audit

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/internal/natsauth"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func commit(t *testing.T, l *Log, rec Record) {
	t.Helper()
	res, err := l.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Commit(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
}

func methods(recs []Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Method)
	}
	return out
}

// TestStreamAndSpool: records go to the stream; while NATS is down they go
// to the spool, are listed from it, and reach the stream once it is back,
// once each; a full spool refuses reservations.
func TestStreamAndSpool(t *testing.T) {
	ns := natstest.Start(t)
	spool := filepath.Join(t.TempDir(), "spool.jsonl")
	l, err := Open(Config{NATSURL: ns.URL(), Replica: "gtr-1", File: spool, MaxSpool: 3, Timeout: 300 * time.Millisecond, RetryInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	start := time.Now()
	commit(t, l, Record{Actor: "alice", Role: "operator", Method: "Drain", Before: json.RawMessage(`{"weight":100}`), After: json.RawMessage(`{"weight":70}`), Outcome: "OK"})
	recs, err := l.List(ctx, start, 10)
	if err != nil || len(recs) != 1 || recs[0].Actor != "alice" || string(recs[0].After) != `{"weight":70}` || recs[0].Replica != "gtr-1" || recs[0].ID == "" {
		t.Fatalf("List: %+v, %v", recs, err)
	}
	// With NATS up the record is in the stream: at once, or (its ack
	// slower than the test's short Timeout on a loaded host: make test,
	// 2026-12-07) through the spool's retry a moment later.
	testutil.Eventually(t, 10*time.Second, "nothing pending with NATS up", func() bool { return l.Pending() == 0 })

	ns.Stop()
	commit(t, l, Record{Actor: "bob", Method: "Restore", Outcome: "OK"})
	commit(t, l, Record{Actor: "bob", Method: "SetWeight", Outcome: "OK"})
	if l.Pending() != 2 {
		t.Fatalf("pending %d, want 2", l.Pending())
	}
	res, err := l.Reserve() // the third and last place
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Reserve with a full spool: %v", err)
	}
	res.Release()

	ns.Restart()
	testutil.Eventually(t, 15*time.Second, "the spool reaches the stream", func() bool { return l.Pending() == 0 })
	recs, err = l.List(ctx, time.Time{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := methods(recs); len(got) != 3 || got[0] != "Drain" || got[1] != "Restore" || got[2] != "SetWeight" {
		t.Fatalf("after the outage: %v", got)
	}
	if recs, _ := l.List(ctx, time.Time{}, 2); len(recs) != 2 || recs[1].Method != "SetWeight" {
		t.Fatalf("limit 2: %v", methods(recs))
	}
	if recs, _ := l.List(ctx, time.Now().Add(time.Minute), 10); len(recs) != 0 {
		t.Fatalf("since the future: %v", methods(recs))
	}

	// No record can be deleted or purged through the stream's API, not
	// even by a connection with every permission (the test server's).
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, 1); err == nil {
		t.Fatal("a record of the audit stream was deleted")
	}
	if err := st.Purge(ctx); err == nil {
		t.Fatal("the audit stream was purged")
	}

	// Another replica's records are in the same stream.
	l2, err := Open(Config{NATSURL: ns.URL(), Replica: "gtr-2", File: filepath.Join(t.TempDir(), "s2")})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	commit(t, l2, Record{Actor: "carol", Method: "ApplyTable", Outcome: "OK"})
	if recs, err := l.List(ctx, time.Time{}, 10); err != nil || len(recs) != 4 || recs[3].Replica != "gtr-2" {
		t.Fatalf("both replicas: %+v, %v", recs, err)
	}
}

// TestFileOnly: without NATS the file is the log; without both, nothing
// can be reserved.
func TestFileOnly(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(Config{Replica: "solo", File: file, MaxSpool: 1})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // no bound without NATS
		commit(t, l, Record{Actor: "a", Method: "Drain", Outcome: "OK"})
	}
	l.Close()
	l, _ = Open(Config{Replica: "solo", File: file})
	defer l.Close()
	if recs, err := l.List(context.Background(), time.Time{}, 10); err != nil || len(recs) != 3 {
		t.Fatalf("reopened: %d records, %v", len(recs), err)
	}
	none, _ := Open(Config{Replica: "x"})
	defer none.Close()
	if _, err := none.Reserve(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no log configured: %v", err)
	}
}

// TestExistingStreamIsUsedAsItIs: a stream the administrator made with
// other limits takes the records, and the log never updates it (the GTR's
// NATS user may not).
func TestExistingStreamIsUsedAsItIs(t *testing.T) {
	ns := natstest.Start(t)
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	sc := natsauth.AuditStreamConfig(1)
	sc.MaxMsgs, sc.Description = 1000, "made by the administrator"
	st, err := js.CreateStream(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Open(Config{NATSURL: ns.URL(), Replica: "gtr-1", File: filepath.Join(t.TempDir(), "spool.jsonl"), StreamReplicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	commit(t, l, Record{Actor: "alice", Method: "Drain", Outcome: "OK"})
	if l.Pending() != 0 {
		t.Fatalf("pending %d: the record did not reach the existing stream", l.Pending())
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxMsgs != 1000 || info.Config.Description != sc.Description || info.Config.Replicas != 1 || info.State.Msgs != 1 {
		t.Fatalf("stream after the log's first record: %+v, %d msgs; want the administrator's configuration and 1 record", info.Config, info.State.Msgs)
	}
}
