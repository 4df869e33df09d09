package refsync

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/internal/refdata"
)

// benchMsg is a JetStream message as handle sees it; only the calls handle
// makes are implemented.
type benchMsg struct {
	jetstream.Msg
	data   []byte
	result string
}

func (m *benchMsg) Data() []byte                     { return m.data }
func (m *benchMsg) Ack() error                       { m.result = "ack"; return nil }
func (m *benchMsg) Term() error                      { m.result = "term"; return nil }
func (m *benchMsg) NakWithDelay(time.Duration) error { m.result = "nak"; return nil }

// bigFile is the sample with every four-digit MCC: 10,000 codes, as in the
// end-to-end benchmark (test/e2e/refdata_bench_test.go).
func bigFile(tb testing.TB) refdata.File {
	tb.Helper()
	f, err := refdata.ReadSource("../../../../config/refdata")
	if err != nil {
		tb.Fatal(err)
	}
	risks := []string{refdata.RiskLow, refdata.RiskMedium, refdata.RiskHigh}
	for i := range 10000 {
		code := fmt.Sprintf("%04d", i)
		if _, ok := f.MCC[code]; !ok {
			f.MCC[code] = refdata.MCC{Category: fmt.Sprintf("generated_%02d", i/100), Risk: risks[i%3]}
		}
	}
	return f
}

// BenchmarkApplySnapshot10k applies 10,000-entry snapshots back to back, in
// process, on a real Postgres: decode, validate, the Postgres transaction,
// the pointer swap. "one_rate" changes one rate per snapshot (what the
// end-to-end benchmark publishes); "all_mcc" changes every MCC.
func BenchmarkApplySnapshot10k(b *testing.B) {
	for _, mode := range []string{"one_rate", "all_mcc"} {
		b.Run(mode, func(b *testing.B) { benchApply(b, mode) })
	}
}

func benchApply(b *testing.B, mode string) {
	ctx := context.Background()
	st, err := store.Open(ctx, pgtest.NewDatabase(b), 4)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	s, err := New(ctx, Config{CellID: "bench", Store: st, NATSURL: "nats://127.0.0.1:1",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	f := bigFile(b)
	body := func(v uint64) []byte {
		f.Version = v
		f.FXRates["USD"] = "1.0" + strconv.Itoa(800+int(v)%100)
		if mode == "all_mcc" {
			for code, m := range f.MCC {
				m.Category = fmt.Sprintf("c%d_%s", v%2, code[:2])
				f.MCC[code] = m
			}
		}
		m := &refdata.Message{Version: v, Kind: refdata.KindSnapshot, Snapshot: &f,
			PublishedAt: time.Now().UTC(), Hash: refdata.ContentHash(f)}
		out, err := json.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		return out
	}
	apply := func(data []byte) {
		msg := &benchMsg{data: data}
		s.handle(ctx, msg)
		if msg.result != "ack" {
			b.Fatalf("apply: %s (last refused: %v)", msg.result, s.lastRefused.Load())
		}
	}
	apply(body(1)) // the served version the next ones follow
	bodies := make([][]byte, b.N)
	for i := range bodies {
		bodies[i] = body(uint64(i + 2))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		apply(bodies[i])
	}
	b.StopTimer()
	if got := s.View().Seq(); got != uint64(b.N+1) {
		b.Fatalf("serving %d, want %d", got, b.N+1)
	}
}
