package refdata

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"strconv"
	"testing"
	"time"
)

// seedMessages are realistic messages on the reference data subject: the
// sample snapshot, updates, and the poisoned versions issue 12 found.
func seedMessages(tb testing.TB) [][]byte {
	tb.Helper()
	f, err := ReadSource(sampleDir())
	if err != nil {
		tb.Fatal(err)
	}
	f.Version = 3
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	snap, _ := json.Marshal(Message{Version: 3, Kind: KindSnapshot, Snapshot: &f, PublishedAt: at, Hash: ContentHash(f)})
	u := Update{FXRates: map[string]string{"GBP": "0.85"}, MCC: map[string]MCC{"5411": {Category: "grocery", Risk: RiskLow}}}
	upd, _ := json.Marshal(Message{Version: 4, Kind: KindUpdate, Base: 3, Update: &u, PublishedAt: at, Hash: ContentHash(u)})
	small := File{Version: 1, BaseCurrency: "EUR", DefaultSettlementCurrency: "EUR", FXRates: map[string]string{"EUR": "1"}}
	smallMsg, _ := json.Marshal(Message{Version: 1, Kind: KindSnapshot, Snapshot: &small, PublishedAt: at, Hash: ContentHash(small)})
	return [][]byte{
		snap, upd, smallMsg,
		[]byte(`{"version":18446744073709551615,"kind":"update","base":1,"update":{"fx_rates":{"GBP":"0.9"}},"published_at":"2026-01-01T00:00:00Z","hash":"x"}`),
		[]byte(`{"version":9223372036854775807,"kind":"update","base":1,"update":{"fx_rates":{"GBP":"0.9"}},"published_at":"2026-01-01T00:00:00Z","hash":"x"}`),
		[]byte(`{"version":9007199254740991,"kind":"snapshot","snapshot":{"version":9007199254740991,"base_currency":"EUR","default_settlement_currency":"EUR","fx_rates":{"EUR":"1"}},"hash":"x"}`),
		[]byte(`{"version":2,"kind":"update","base":1,"update":{"fx_rates":{"GBP":"1e999999"}}}`),
		[]byte(`{"version":-1,"kind":"snapshot"}`),
		[]byte(`{"version": 4, "kind": "snap`),
		[]byte(`null`),
	}
}

// FuzzDecodeMessage feeds DecodeMessage, the cell's edge for bytes from
// NATS, anything. It must never panic; what it accepts has a version in
// 1..MaxVersion and a body of its kind, builds (a snapshot) or validates (an
// update) without panicking, and decodes the same again once re-encoded.
func FuzzDecodeMessage(f *testing.F) {
	for _, b := range seedMessages(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMessage(b)
		if err != nil {
			if m != nil {
				t.Fatal("a refused message came back too")
			}
			return
		}
		if m.Version == 0 || m.Version > MaxVersion {
			t.Fatalf("accepted version %d", m.Version)
		}
		switch m.Kind {
		case KindSnapshot:
			if m.Snapshot == nil || m.Update != nil || m.Snapshot.Version != m.Version {
				t.Fatalf("snapshot message of the wrong shape: %+v", m)
			}
			if s, err := FromFile(*m.Snapshot); err == nil && s.Seq() != m.Version {
				t.Fatalf("snapshot %d built as %d", m.Version, s.Seq())
			}
		case KindUpdate:
			if m.Update == nil || m.Snapshot != nil || m.Base == 0 || m.Base >= m.Version {
				t.Fatalf("update message of the wrong shape: %+v", m)
			}
			_ = m.Update.Validate()
		default:
			t.Fatalf("accepted kind %q", m.Kind)
		}
		enc, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := DecodeMessage(enc)
		if err != nil {
			t.Fatalf("re-encoded message refused: %v\n%s", err, enc)
		}
		if enc2, _ := json.Marshal(m2); !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip differs:\n%s\n%s", enc, enc2)
		}
	})
}

// FuzzApply applies an arbitrary update (its JSON body, as it arrives in a
// message) at an arbitrary version to the sample snapshot: Update.Validate
// and Snapshot.Apply must never panic, must leave the base unchanged, and
// what they accept is a whole valid snapshot at that version holding the
// update's entries.
func FuzzApply(f *testing.F) {
	src, err := ReadSource(sampleDir())
	if err != nil {
		f.Fatal(err)
	}
	src.Version = 7
	base, err := FromFile(src)
	if err != nil {
		f.Fatal(err)
	}
	before, _ := json.Marshal(base.File())
	for _, seed := range []struct {
		u string
		v uint64
	}{
		{`{"fx_rates":{"GBP":"0.85"}}`, 8},
		{`{"mcc":{"5411":{"category":"grocery","risk":"low"}}}`, 8},
		{`{"fx_rates":{"JPY":"162.5","USD":"1.09"},"mcc":{"7995":{"category":"gambling","risk":"high"}}}`, 9},
		{`{"fx_rates":{"GBP":"0.9"}}`, 7},
		{`{"fx_rates":{"GBP":"0.9"}}`, 1<<64 - 1},
		{`{"fx_rates":{"GBP":"0.9"}}`, 1<<63 - 1},
		{`{"fx_rates":{"GBP":"1e999999"}}`, 8},
		{`{"fx_rates":{"GBP":"1/3"}}`, 8},
		{`{"fx_rates":{"EUR":"2"}}`, 8},
		{`{"mcc":{"12345":{"category":"x","risk":"low"}}}`, 8},
		{`{}`, 8},
	} {
		f.Add([]byte(seed.u), seed.v)
	}
	f.Fuzz(func(t *testing.T, b []byte, version uint64) {
		var u Update
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if dec.Decode(&u) != nil {
			return
		}
		verr := u.Validate()
		next, err := base.Apply(version, u)
		if after, _ := json.Marshal(base.File()); !bytes.Equal(before, after) {
			t.Fatal("Apply changed its base")
		}
		if err != nil {
			if next != nil {
				t.Fatal("a refused update returned a snapshot")
			}
			if version > MaxVersion && !errors.Is(err, ErrVersionRange) {
				t.Fatalf("version %d refused for another reason: %v", version, err)
			}
			return
		}
		if verr != nil {
			t.Fatalf("Apply accepted an update that does not validate: %v", verr)
		}
		if next.Seq() != version || version <= base.Seq() || version > MaxVersion {
			t.Fatalf("applied %d on %d as %d", version, base.Seq(), next.Seq())
		}
		if next.Version() != strconv.FormatUint(version, 10) {
			t.Fatalf("version string %q", next.Version())
		}
		nf := next.File()
		for cur, r := range u.FXRates {
			if nf.FXRates[cur] != r {
				t.Fatalf("rate %s: %q, want %q", cur, nf.FXRates[cur], r)
			}
		}
		for code, m := range u.MCC {
			if nf.MCC[code] != m {
				t.Fatalf("mcc %s: %+v, want %+v", code, nf.MCC[code], m)
			}
		}
		if _, err := FromFile(nf); err != nil {
			t.Fatalf("the applied snapshot does not validate: %v", err)
		}
		if len(nf.FXRates) < len(src.FXRates) || !maps.Equal(nf.Partners, src.Partners) {
			t.Fatal("an update removed entries")
		}
	})
}

func TestRateFormat(t *testing.T) {
	for s, ok := range map[string]bool{
		"1": true, "0.8412": true, "156": true, "2/3": true, "0.0001": true,
		"": false, "0": false, "0/1": false, "1/0": false, "-1": false, "+1": false, "1e999999": false, "1E3": false,
		"0x10": false, ".5": false, "5.": false, "1.2.3": false, "1/2/3": false, "1.5/2": false, " 1": false,
		"1" + string(make([]byte, MaxRateLen)): false,
	} {
		if _, got := parseRate(s); got != ok {
			t.Errorf("parseRate(%q) = %v, want %v", s, got, ok)
		}
	}
}

func TestVersionBound(t *testing.T) {
	for _, v := range []uint64{0, MaxVersion + 1, 1<<63 - 1, 1<<64 - 1} {
		if err := CheckVersion("v", v); !errors.Is(err, ErrVersionRange) {
			t.Errorf("CheckVersion(%d) = %v", v, err)
		}
		if _, err := FromFile(File{Version: v, BaseCurrency: "EUR", DefaultSettlementCurrency: "EUR", FXRates: map[string]string{"EUR": "1"}}); v != 0 && !errors.Is(err, ErrVersionRange) {
			t.Errorf("FromFile(version %d) = %v", v, err)
		}
	}
	if err := CheckVersion("v", MaxVersion); err != nil {
		t.Error(err)
	}
}
