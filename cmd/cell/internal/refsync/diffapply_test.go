package refsync

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"

	"github.com/cellpay/cellpay/cmd/cell/internal/store"
	"github.com/cellpay/cellpay/internal/dev/pgtest"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/internal/refdata"
)

// The property: a cell that serves base and receives next (written as the
// diff next.Diff(base) in Postgres, served as next) answers every lookup
// exactly as a fresh cell that receives next whole, and as next itself; a
// view taken before the apply still answers as base; and after a restart
// the cell's Postgres gives back next.

var _ cellside.RefData = View{}

// lookups is what the orchestrator reads (cellside.RefData); View,
// *refdata.Snapshot and a restarted cell's View all implement it.
type lookups interface {
	Version() string
	SettlementCurrency(partner string) string
	Convert(minor int64, from, to string) (int64, error)
	MCC(code string) (refdata.MCC, bool)
	Blocked(category string) bool
}

// The generator's universes, small so that base and next overlap. KWD and
// BHD have 3 minor units, JPY and ISK 0: an exponent change shows in
// Convert.
var (
	genCurrencies = []string{"EUR", "USD", "GBP", "JPY", "CHF", "KWD", "BHD", "ISK", "PLN"}
	genNames      = []string{"", "Euro", "Dollar", "renamed"}
	genRates      = []string{"0.0001", "0.5", "0.50", "0.8412", "1.0869", "3", "161.23", "1234.5678", "2/3"}
	genOnes       = []string{"1", "1.0", "1.000"}
	genPartners   = []string{"p-0", "p-1", "p-2", "p-3", "p-4", "p-5", "p-6"}
	genCodes      = []string{"0742", "1111", "4829", "5411", "5812", "5999", "6011", "7995", "9402"}
	genCategories = []string{"grocery", "gambling", "travel", "cash", "misc", "crypto"}
	genRisks      = []string{refdata.RiskLow, refdata.RiskMedium, refdata.RiskHigh}

	// Asked of every view, known and unknown keys alike.
	askCurrencies = append(slices.Clone(genCurrencies), "XXX", "SEK")
	askPartners   = append(slices.Clone(genPartners), "p-unknown", "")
	askCodes      = append(slices.Clone(genCodes), "0000", "")
	askCategories = append(slices.Clone(genCategories), "unknown", "")
	askAmounts    = []int64{0, 1, -1, 5, 12345, -987654321, 999_999_999_999, math.MaxInt64}
)

// entryOp draws what happens to one key of a section: it was there (had)
// and is kept, changed or removed, or it was not and is added or not.
func entryOp(t *rapid.T, label string, had bool) string {
	if had {
		return rapid.SampledFrom([]string{"keep", "keep", "change", "remove"}).Draw(t, label)
	}
	return rapid.SampledFrom([]string{"add", "skip"}).Draw(t, label)
}

// genNext draws a valid file of version version from prev: additions,
// changes and removals in every section, header included. From an empty
// prev it draws a file from scratch.
func genNext(t *rapid.T, prev refdata.File, version uint64, label string) refdata.File {
	f := refdata.File{Version: version}

	// Currencies: none (the compiled-in ISO list), or an explicit list
	// edited from prev's.
	if rapid.IntRange(0, 4).Draw(t, label+" iso currencies") > 0 {
		f.Currencies = map[string]refdata.Currency{}
		for _, c := range genCurrencies {
			old, had := prev.Currencies[c]
			switch entryOp(t, label+" currency "+c, had) {
			case "keep":
				f.Currencies[c] = old
			case "change", "add":
				f.Currencies[c] = refdata.Currency{
					MinorUnits: rapid.IntRange(0, 4).Draw(t, label+" minor "+c),
					Name:       rapid.SampledFrom(genNames).Draw(t, label+" name "+c),
				}
			}
		}
		if len(f.Currencies) == 0 {
			f.Currencies["EUR"] = refdata.Currency{MinorUnits: 2}
		}
	}
	var known []string // currencies with an exponent
	for _, c := range genCurrencies {
		if _, ok := f.Currencies[c]; ok || len(f.Currencies) == 0 {
			known = append(known, c)
		}
	}

	// Header: the base currency needs an exponent, and a rate of 1 if it
	// has one.
	f.BaseCurrency = prev.BaseCurrency
	if !slices.Contains(known, f.BaseCurrency) || rapid.IntRange(0, 3).Draw(t, label+" change base") == 0 {
		f.BaseCurrency = rapid.SampledFrom(known).Draw(t, label+" base")
	}

	f.FXRates = map[string]string{}
	for _, c := range known {
		old, had := prev.FXRates[c]
		switch entryOp(t, label+" rate "+c, had) {
		case "keep":
			f.FXRates[c] = old
		case "change", "add":
			f.FXRates[c] = rapid.SampledFrom(genRates).Draw(t, label+" rate value "+c)
		}
	}
	if r, ok := f.FXRates[f.BaseCurrency]; ok && !slices.Contains(genOnes, r) {
		f.FXRates[f.BaseCurrency] = rapid.SampledFrom(genOnes).Draw(t, label+" base rate")
	}
	if len(f.FXRates) == 0 {
		f.FXRates[f.BaseCurrency] = "1"
	}
	rated := slices.Sorted(maps.Keys(f.FXRates))

	f.DefaultSettlementCurrency = prev.DefaultSettlementCurrency
	if _, ok := f.FXRates[f.DefaultSettlementCurrency]; !ok || rapid.IntRange(0, 3).Draw(t, label+" change default") == 0 {
		f.DefaultSettlementCurrency = rapid.SampledFrom(rated).Draw(t, label+" default")
	}

	f.Partners = map[string]string{}
	for _, p := range genPartners {
		old, had := prev.Partners[p]
		op := entryOp(t, label+" partner "+p, had)
		if _, ok := f.FXRates[old]; op == "keep" && !ok {
			op = "change" // its currency lost its rate
		}
		switch op {
		case "keep":
			f.Partners[p] = old
		case "change", "add":
			f.Partners[p] = rapid.SampledFrom(rated).Draw(t, label+" partner currency "+p)
		}
	}

	f.MCC = map[string]refdata.MCC{}
	for _, code := range genCodes {
		old, had := prev.MCC[code]
		switch entryOp(t, label+" mcc "+code, had) {
		case "keep":
			f.MCC[code] = old
		case "change", "add":
			f.MCC[code] = refdata.MCC{
				Category: rapid.SampledFrom(genCategories).Draw(t, label+" category "+code),
				Risk:     rapid.SampledFrom(genRisks).Draw(t, label+" risk "+code),
			}
		}
	}

	// Blocked categories: a set edited from prev's, listed in any order.
	for _, c := range genCategories {
		had := slices.Contains(prev.BlockedCategories, c)
		switch entryOp(t, label+" blocked "+c, had) {
		case "keep", "change", "add": // a set member has nothing to change
			f.BlockedCategories = append(f.BlockedCategories, c)
		}
	}
	f.BlockedCategories = rapid.Permutation(f.BlockedCategories).Draw(t, label+" blocked order")
	return f
}

// answers is every lookup of v the orchestrator can make over the
// generator's universe, known and unknown keys alike, as text.
func answers(v lookups) []string {
	out := []string{"version " + v.Version()}
	for _, p := range askPartners {
		out = append(out, fmt.Sprintf("settlement %q: %s", p, v.SettlementCurrency(p)))
	}
	for _, from := range askCurrencies {
		for _, to := range askCurrencies {
			for _, a := range askAmounts {
				got, err := v.Convert(a, from, to)
				out = append(out, fmt.Sprintf("convert %d %s->%s: %d %v", a, from, to, got, err))
			}
		}
	}
	for _, code := range askCodes {
		m, ok := v.MCC(code)
		out = append(out, fmt.Sprintf("mcc %q: %+v %v", code, m, ok))
	}
	for _, c := range askCategories {
		out = append(out, fmt.Sprintf("blocked %q: %v", c, v.Blocked(c)))
	}
	return out
}

// sameAnswers fails t with the first lookup where got and want differ.
func sameAnswers(t *rapid.T, what string, got, want []string) {
	t.Helper()
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("%s: got %s, want %s", what, got[i], want[i])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d answers, want %d", what, len(got), len(want))
	}
}

// normalize makes files that mean the same compare equal: an absent map
// and an empty one are the same, the blocked categories are a set.
func normalize(f refdata.File) refdata.File {
	if f.Currencies == nil {
		f.Currencies = map[string]refdata.Currency{}
	}
	if f.FXRates == nil {
		f.FXRates = map[string]string{}
	}
	if f.MCC == nil {
		f.MCC = map[string]refdata.MCC{}
	}
	if f.Partners == nil {
		f.Partners = map[string]string{}
	}
	f.BlockedCategories = slices.Compact(slices.Sorted(slices.Values(f.BlockedCategories)))
	if len(f.BlockedCategories) == 0 {
		f.BlockedCategories = nil
	}
	return f
}

// applyMsg hands version f to s as a snapshot message from NATS, through
// the consumer's handle, and fails unless it is acked.
func applyMsg(ctx context.Context, t *rapid.T, s *Syncer, f refdata.File, publishedAt time.Time) {
	t.Helper()
	m := &refdata.Message{Version: f.Version, Kind: refdata.KindSnapshot, Snapshot: &f,
		PublishedAt: publishedAt, Hash: refdata.ContentHash(f)}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	msg := &benchMsg{data: data}
	s.handle(ctx, msg)
	if msg.result != "ack" {
		t.Fatalf("version %d: %s (last refused: %v)", f.Version, msg.result, s.lastRefused.Load())
	}
}

func TestSnapshotDiffApplyEqualsFullRewrite(t *testing.T) {
	checkLeaks(t)
	// A hundred cases against a real Postgres: under -race on a loaded
	// 2-core machine that can take well over the usual 20 s.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t)
	st, err := store.Open(ctx, url, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// NATSURL lets New start with nothing stored; Run is never called, so
	// nothing connects.
	newSyncer := func(t *rapid.T, s Store) *Syncer {
		sy, err := New(ctx, Config{CellID: "prop", Store: s, NATSURL: "nats://127.0.0.1:1", Log: log})
		if err != nil {
			t.Fatal(err)
		}
		return sy
	}
	published := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

	rapid.Check(t, func(t *rapid.T) {
		// Every case starts from an empty Postgres.
		if _, err := conn.Exec(ctx, `TRUNCATE refdata_state, refdata_currencies, refdata_fx_rates,
			refdata_mcc, refdata_partners, refdata_blocked_categories, refdata_history`); err != nil {
			t.Fatal(err)
		}
		v1 := rapid.Uint64Range(1, 1000).Draw(t, "base version")
		baseF := genNext(t, refdata.File{}, v1, "base")
		nextF := genNext(t, baseF, v1+rapid.Uint64Range(1, 3).Draw(t, "version step"), "next")
		base, err := refdata.FromFile(baseF)
		if err != nil {
			t.Fatalf("generated base does not validate: %v", err)
		}
		next, err := refdata.FromFile(nextF)
		if err != nil {
			t.Fatalf("generated next does not validate: %v", err)
		}
		t.Logf("diff: %+v", next.Diff(base))

		// The cell: base written whole (nothing served), then next as
		// its diff from base, served from NATS or, after a restart, as
		// loaded from Postgres.
		cell := newSyncer(t, st)
		applyMsg(ctx, t, cell, baseF, published)
		if rapid.Bool().Draw(t, "restart before next") {
			cell = newSyncer(t, st)
			if got := cell.Status(); got.Source != SourcePostgres || got.Version != base.Seq() {
				t.Fatalf("restart after base: %+v", got)
			}
		}
		before := cell.View()
		sameAnswers(t, "cell serving base vs base", answers(before), answers(base))
		applyMsg(ctx, t, cell, nextF, published.Add(time.Minute))

		// The reference: a fresh cell, next written whole.
		fresh := newSyncer(t, &fakeStore{})
		applyMsg(ctx, t, fresh, nextF, published.Add(time.Minute))

		want := answers(fresh.View())
		sameAnswers(t, "full rewrite vs next itself", want, answers(next))
		after := cell.View()
		sameAnswers(t, "diff apply vs full rewrite", answers(after), want)
		if after.Seq() != next.Seq() || fresh.View().Seq() != next.Seq() || cell.Status().Version != next.Seq() {
			t.Fatalf("seq: diff %d, full %d, status %d, want %d", after.Seq(), fresh.View().Seq(), cell.Status().Version, next.Seq())
		}
		// A view taken before the apply still answers as base.
		sameAnswers(t, "view taken before the apply vs base", answers(before), answers(base))

		// Postgres holds next: read directly, and as a restarted cell
		// serves it.
		stored, meta, err := st.LoadRefdata(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := normalize(stored), normalize(next.File()); !reflect.DeepEqual(got, want) {
			t.Fatalf("stored after the diff apply:\n got %+v\nwant %+v", got, want)
		}
		if meta.Kind != refdata.KindSnapshot || meta.Hash != refdata.ContentHash(nextF) || !meta.PublishedAt.Equal(published.Add(time.Minute)) {
			t.Fatalf("stored meta: %+v", meta)
		}
		restarted := newSyncer(t, st)
		if got := restarted.Status(); got.Source != SourcePostgres || got.Version != next.Seq() {
			t.Fatalf("after restart: %+v", got)
		}
		sameAnswers(t, "restarted cell vs full rewrite", answers(restarted.View()), want)
	})
}

// TestDuplicateBlockedCategoryIsApplied: refdata.FromFile accepts a blocked
// category listed twice, but refdata_blocked_categories has it as its
// primary key, so the Postgres write fails (unique violation), handle takes
// that for Postgres being away and naks: the version is redelivered forever
// and, with MaxAckPending 1, holds up every later version. Skipped until
// that is fixed (refuse or dedupe in FromFile, or dedupe in the store).
// TestDuplicateBlockedCategoryIsRefused: a version listing a blocked
// category twice is refused whole (it would otherwise fail the store's
// primary key on every redelivery and hold up every later version).
func TestDuplicateBlockedCategoryIsRefused(t *testing.T) {
	checkLeaks(t)
	ctx := ctxT(t)
	st, err := store.Open(ctx, pgtest.NewDatabase(t), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	s, err := New(ctx, Config{CellID: "dup", Store: st, NATSURL: "nats://127.0.0.1:1",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	f := refdata.File{Version: 1, BaseCurrency: "EUR", DefaultSettlementCurrency: "EUR",
		FXRates: map[string]string{"EUR": "1"}, BlockedCategories: []string{"gambling", "gambling"}}
	data, _ := json.Marshal(&refdata.Message{Version: 1, Kind: refdata.KindSnapshot, Snapshot: &f,
		PublishedAt: time.Now().UTC(), Hash: refdata.ContentHash(f)})
	msg := &benchMsg{data: data}
	s.handle(ctx, msg)
	if msg.result != "term" {
		t.Fatalf("a duplicate blocked category: %s, want the version refused (term)", msg.result)
	}
}
