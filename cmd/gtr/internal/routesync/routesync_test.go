package routesync

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/cellpay/cellpay/cmd/gtr/internal/state"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/internal/kvsync"
	"github.com/cellpay/cellpay/pkg/routing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// natsServer is natstest's server (JetStream on a temp dir, which can be
// stopped and started again on the same port and store), with url for
// this package's tests.
type natsServer struct{ *natstest.Server }

func startNATS(t *testing.T) natsServer { return natsServer{natstest.Start(t)} }

func (n natsServer) url() string { return n.URL() }

func seedDoc() state.Doc {
	return state.FromSpec(routing.Spec{
		Version: 1,
		Cells: []routing.Cell{
			{ID: "cell-a", Addr: "127.0.0.1:1", Pool: "main", Weight: 100},
			{ID: "cell-b", Addr: "127.0.0.1:2", Pool: "main", Weight: 100},
			{ID: "cell-c", Addr: "127.0.0.1:3", Pool: "main", Weight: 100},
		},
		Rules: []routing.Rule{{Name: "everything", Pool: "main"}},
	})
}

type replica struct {
	st *state.State
	sy *Syncer
}

func startReplica(t *testing.T, url, file string) replica {
	t.Helper()
	st, err := state.New(state.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sy, err := Start(Config{
		State: st, Seed: func() (state.Doc, error) { return seedDoc(), nil },
		NATSURL: url, StateFile: file, ReplicaID: t.Name(),
		PollInterval: 200 * time.Millisecond, OpTimeout: time.Second,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sy.Close)
	return replica{st, sy}
}

func weight(st *state.State, id string) int {
	c, _ := st.Table().Cell(id)
	return c.Weight
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func drain(id string, pct int) func(*state.Doc) error {
	return func(d *state.Doc) error { return d.Drain(id, pct, time.Now(), 0) }
}

func TestSeedAndConverge(t *testing.T) {
	ns := startNATS(t)
	r1 := startReplica(t, ns.url(), filepath.Join(t.TempDir(), "r1.json"))
	r2file := filepath.Join(t.TempDir(), "r2.json")
	r2 := startReplica(t, ns.url(), r2file)
	testutil.Eventually(t, 5*time.Second, "both connected", func() bool {
		return r1.sy.Status() == kvsync.StatusConnected && r2.sy.Status() == kvsync.StatusConnected
	})
	if _, err := r1.sy.Update(ctxFor(t), drain("cell-b", 30)); err != nil {
		t.Fatal(err)
	}
	if w := weight(r1.st, "cell-b"); w != 70 {
		t.Fatalf("writer's own weight %d, want 70 at once", w)
	}
	start := time.Now()
	testutil.Eventually(t, time.Second, "replica 2 sees the drain", func() bool { return weight(r2.st, "cell-b") == 70 })
	t.Logf("converged in %v", time.Since(start))
	d1, rev1, _ := r1.st.Doc()
	d2, rev2, _ := r2.st.Doc()
	if rev1 != rev2 || d1.Version != d2.Version || d1.Version != 2 {
		t.Fatalf("replicas disagree: v%d rev %d vs v%d rev %d", d1.Version, rev1, d2.Version, rev2)
	}
	// The state file follows.
	b, err := os.ReadFile(r2file)
	if err != nil || len(b) == 0 {
		t.Fatalf("state file: %v", err)
	}
}

func TestOptimisticConcurrency(t *testing.T) {
	ns := startNATS(t)
	rs := []replica{startReplica(t, ns.url(), ""), startReplica(t, ns.url(), "")}
	testutil.Eventually(t, 5*time.Second, "connected", func() bool {
		return rs[0].sy.Status() == kvsync.StatusConnected && rs[1].sy.Status() == kvsync.StatusConnected
	})
	const each = 10
	var wg sync.WaitGroup
	errs := make(chan error, 2*each)
	for _, r := range rs {
		wg.Go(func() {
			for i := range each {
				_, err := r.sy.Update(ctxFor(t), func(d *state.Doc) error {
					return d.SetWeight("cell-c", i, time.Now(), 0)
				})
				if errors.Is(err, kvsync.ErrConflict) {
					continue // allowed under heavy contention; counted below
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// No lost update: every successful write raised the version by one, and
	// the version equals 1 + the number of writes the store accepted.
	testutil.Eventually(t, 2*time.Second, "replicas agree", func() bool {
		d0, r0, _ := rs[0].st.Doc()
		d1, r1, _ := rs[1].st.Doc()
		return r0 == r1 && d0.Version == d1.Version
	})
	d, rev, _ := rs[0].st.Doc()
	if d.Version != rev { // seeded at revision 1 with version 1, +1 each
		t.Fatalf("version %d at revision %d: an update was lost", d.Version, rev)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	ns := startNATS(t)
	r := startReplica(t, ns.url(), "")
	testutil.Eventually(t, 5*time.Second, "synced", func() bool { _, rev, _ := r.st.Doc(); return rev > 0 })
	_, rev, _ := r.st.Doc()
	_, err := r.sy.Update(ctxFor(t), func(d *state.Doc) error { return d.SetWeight("cell-a", 300, time.Now(), 0) })
	var fe *state.FieldError
	if !errors.As(err, &fe) || fe.Field != "weight" {
		t.Fatalf("got %v, want a weight FieldError", err)
	}
	_, err = r.sy.Update(ctxFor(t), func(d *state.Doc) error {
		d.Version++
		d.Rules = append(d.Rules, routing.Rule{Name: "x", Pool: "nowhere"})
		return nil
	})
	if err == nil {
		t.Fatal("an invalid doc was written")
	}
	if _, now, _ := r.st.Doc(); now != rev {
		t.Fatalf("revision moved from %d to %d", rev, now)
	}
	// Garbage written by someone else is ignored; the table stays.
	nc, err := nats.Connect(ns.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctxFor(t), "cellpay_gtr")
	if err != nil {
		t.Fatal(err)
	}
	before := r.st.Table()
	if _, err := kv.Put(ctxFor(t), "routing", []byte(`{"version": 9, "cells": []}`)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if r.st.Table() != before {
		t.Fatal("an invalid entry replaced the table")
	}
}

func TestNATSDownAndFileStart(t *testing.T) {
	ns := startNATS(t)
	dir := t.TempDir()
	file1 := filepath.Join(dir, "r1.json")
	r1 := startReplica(t, ns.url(), file1)
	r2 := startReplica(t, ns.url(), filepath.Join(dir, "r2.json"))
	testutil.Eventually(t, 5*time.Second, "connected", func() bool {
		return r1.sy.Status() == kvsync.StatusConnected && r2.sy.Status() == kvsync.StatusConnected
	})
	if _, err := r1.sy.Update(ctxFor(t), drain("cell-a", 50)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Second, "replica 2 sees the drain", func() bool { return weight(r2.st, "cell-a") == 50 })

	ns.Stop()
	testutil.Eventually(t, 5*time.Second, "disconnected", func() bool { return r1.sy.Status() == kvsync.StatusDisconnected })
	before := r1.st.Table()
	start := time.Now()
	if _, err := r1.sy.Update(ctxFor(t), drain("cell-a", 10)); !errors.Is(err, kvsync.ErrUnavailable) {
		t.Fatalf("update with NATS down: %v, want kvsync.ErrUnavailable", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("a write with NATS down took %v; it must fail fast", d)
	}
	if r1.st.Table() != before || weight(r1.st, "cell-a") != 50 {
		t.Fatal("the table changed while NATS was down")
	}

	// A replica restarting while NATS is down routes from its file at once.
	r1.sy.Close()
	start = time.Now()
	r3 := startReplica(t, ns.url(), file1)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("start with NATS down took %v", d)
	}
	if w := weight(r3.st, "cell-a"); w != 50 {
		t.Fatalf("restarted replica has weight %d for cell-a, want 50 from its file", w)
	}
	if r3.sy.Status() != kvsync.StatusDisconnected {
		t.Fatalf("status %q", r3.sy.Status())
	}

	// NATS comes back with its store: both converge on new changes.
	ns.Restart()
	testutil.Eventually(t, 10*time.Second, "reconnected", func() bool {
		return r2.sy.Status() == kvsync.StatusConnected && r3.sy.Status() == kvsync.StatusConnected
	})
	if _, err := r2.sy.Update(ctxFor(t), drain("cell-a", 0)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 3*time.Second, "replica 3 sees the restore", func() bool { return weight(r3.st, "cell-a") == 100 })
}

func TestStartWithoutFileWhileNATSDown(t *testing.T) {
	ns := startNATS(t)
	url := ns.url()
	ns.Stop()
	r := startReplica(t, url, filepath.Join(t.TempDir(), "none.json"))
	if r.st.Table() == nil || r.st.Table().Version() != 1 {
		t.Fatal("did not start from the seed")
	}
	if _, err := r.sy.Update(ctxFor(t), drain("cell-a", 10)); !errors.Is(err, kvsync.ErrUnavailable) {
		t.Fatalf("update: %v", err)
	}
	// When NATS arrives with an empty bucket, the seed is written.
	ns.Restart()
	testutil.Eventually(t, 10*time.Second, "connected", func() bool { return r.sy.Status() == kvsync.StatusConnected })
	if _, err := r.sy.Update(ctxFor(t), drain("cell-a", 10)); err != nil {
		t.Fatal(err)
	}
	if w := weight(r.st, "cell-a"); w != 90 {
		t.Fatalf("weight %d", w)
	}
}

func TestStandalone(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state.json")
	r := startReplica(t, "", file)
	if r.sy.Status() != kvsync.StatusStandalone {
		t.Fatal(r.sy.Status())
	}
	if _, err := r.sy.Update(ctxFor(t), drain("cell-c", 100)); err != nil {
		t.Fatal(err)
	}
	if w := weight(r.st, "cell-c"); w != 0 {
		t.Fatalf("weight %d", w)
	}
	r.sy.Close()
	again := startReplica(t, "", file)
	if w := weight(again.st, "cell-c"); w != 0 {
		t.Fatalf("restart from file: weight %d", w)
	}
}

func TestCorruptStateFileFallsBackToSeed(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state.json")
	if err := os.WriteFile(file, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, "", file)
	if r.st.Table().Version() != 1 {
		t.Fatal("did not fall back to the seed")
	}
}
