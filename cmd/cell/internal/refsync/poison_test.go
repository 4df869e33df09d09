package refsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/internal/refdata/refnats"
)

// TestPoisonedVersionsAreRefusedAndLaterVersionsApply is issue 12's
// poisoned reference data version, with a real NATS and a real Postgres:
// 2^64-1 (which the table's CHECK refused, so it was redelivered forever)
// and 2^63-1 (which fit, and made the cell drop every later real version)
// are refused at decode, logged, terminated (delivered once, never again),
// counted in the cell's status, and the replicator's next versions, numbered
// after the last good one, still apply, in memory and in Postgres.
func TestPoisonedVersionsAreRefusedAndLaterVersionsApply(t *testing.T) {
	checkLeaks(t)
	ctx := ctxT(t)
	srv := natstest.Start(t)
	st, err := store.Open(ctx, pgtest.NewDatabase(t), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	logs := &testutil.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	s, err := New(ctx, Config{CellID: "cell-p", Store: st, NATSURL: srv.URL(), Log: log, StatusInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	defer func() { cancel(); <-done }()

	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	pub := &refnats.Publisher{JS: js}
	if res, err := pub.Snapshot(ctx, sample(t), true); err != nil || res.Version != 1 {
		t.Fatalf("snapshot: %+v, %v", res, err)
	}
	testutil.Eventually(t, 10*time.Second, "version 1", func() bool { return s.View().Version() == "1" })

	stream, _, err := refnats.EnsureStream(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	poisons := []uint64{1<<64 - 1, 1<<63 - 1, refdata.MaxVersion + 1}
	for i, v := range poisons {
		kind, body := refdata.KindUpdate, fmt.Sprintf(`{"version":%d,"kind":"update","base":1,"update":{"fx_rates":{"GBP":"0.5"}},"published_at":"2026-01-01T00:00:00Z","hash":"poison"}`, v)
		if i == 1 {
			kind, body = refdata.KindSnapshot, fmt.Sprintf(`{"version":%d,"kind":"snapshot","snapshot":{"version":%d,"base_currency":"EUR","default_settlement_currency":"EUR","fx_rates":{"EUR":"1"}},"published_at":"2026-01-01T00:00:00Z","hash":"poison"}`, v, v)
		}
		_, seq, _ := refnats.Last(ctx, stream)
		m := &refdata.Message{Version: v, Kind: kind, Hash: fmt.Sprintf("poison%d", i)}
		if _, _, err := refnats.Publish(ctx, js, m, seq, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "three refusals", func() bool { return s.Status().Refused == uint64(len(poisons)) })
	if got := s.Status(); got.Version != 1 || !strings.Contains(got.LastRefused, "out of range") {
		t.Fatalf("status after the poison: %+v", got)
	}
	for _, v := range poisons {
		if want := fmt.Sprintf("version %d is not in 1..", v); !strings.Contains(logs.String(), want) {
			t.Fatalf("the log does not say %q:\n%s", want, logs.String())
		}
	}

	// The replicator numbers after the last good version, not after the
	// poison, and the cell applies what follows.
	u := refdata.Update{FXRates: map[string]string{"GBP": "0.9"}}
	if res, err := pub.Update(ctx, u); err != nil || res.Version != 2 {
		t.Fatalf("update after the poison: %+v, %v", res, err)
	}
	f := sample(t)
	f.FXRates["USD"] = "1.2"
	if res, err := pub.Snapshot(ctx, f, true); err != nil || res.Version != 3 {
		t.Fatalf("snapshot after the poison: %+v, %v", res, err)
	}
	testutil.Eventually(t, 10*time.Second, "version 3", func() bool { return s.View().Version() == "3" })
	if got, _ := s.View().Convert(10000, "EUR", "USD"); got != 12000 {
		t.Fatalf("convert after version 3: %d", got)
	}
	stored, _, err := st.LoadRefdata(ctx)
	if err != nil || stored.Version != 3 || stored.FXRates["GBP"] != f.FXRates["GBP"] || stored.FXRates["USD"] != "1.2" {
		t.Fatalf("stored: version %d, %v", stored.Version, err)
	}

	// Terminated, not redelivered: every message was delivered once.
	cons, err := stream.Consumer(ctx, "cell-cell-p")
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumRedelivered != 0 || info.NumAckPending != 0 || info.Delivered.Consumer != 6 {
		t.Fatalf("consumer: delivered %d, redelivered %d, pending %d", info.Delivered.Consumer, info.NumRedelivered, info.NumAckPending)
	}
}

// TestReplicatorRefusesVersionsBeyondMax: with the newest good version at
// refdata.MaxVersion, there is no next version to publish, and the
// replicator says so instead of publishing one no cell can store.
func TestReplicatorRefusesVersionsBeyondMax(t *testing.T) {
	checkLeaks(t)
	ctx := ctxT(t)
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	stream, _, err := refnats.EnsureStream(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	f := sample(t)
	f.Version = refdata.MaxVersion
	m := &refdata.Message{Version: f.Version, Kind: refdata.KindSnapshot, Snapshot: &f, Hash: refdata.ContentHash(f), PublishedAt: time.Now().UTC()}
	if _, _, err := refnats.Publish(ctx, js, m, 0, nil); err != nil {
		t.Fatal(err)
	}
	pub := &refnats.Publisher{JS: js}
	_, err = pub.Update(ctx, refdata.Update{FXRates: map[string]string{"GBP": "0.9"}})
	if !errors.Is(err, refdata.ErrVersionRange) {
		t.Fatalf("update past MaxVersion: %v", err)
	}
	f.FXRates["GBP"] = "0.7"
	if _, err := pub.Snapshot(ctx, f, true); !errors.Is(err, refdata.ErrVersionRange) {
		t.Fatalf("snapshot past MaxVersion: %v", err)
	}
	if _, seq, _ := refnats.Last(ctx, stream); seq != 1 {
		t.Fatalf("something was published: last sequence %d", seq)
	}
}
