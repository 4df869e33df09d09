package routesync

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellpay/cellpay/cmd/gtr/internal/state"
	"github.com/cellpay/cellpay/pkg/routing"
)

// routingSeeds are realistic routing KV entries: the seed, one with a ramp
// and a freshness rule, and hostile ones.
func routingSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	d := seedDoc()
	plain, _ := routingTarget{}.Encode(d)
	d.Version = 9
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := d.SetWeight("cell-b", 30, at, 10*time.Minute); err != nil {
		tb.Fatal(err)
	}
	d.Cells[2].Addr = "dns:///cell.cell-c.svc.cluster.local:7081"
	d.Rules = append([]routing.Rule{{Name: "gb-cards", Markets: []string{"GB"}, PaymentTypes: []string{routing.PaymentCardAuthorization}, Pool: "main", HashOn: routing.HashMerchant, MinRefdataVersion: 12}}, d.Rules...)
	ramped, _ := routingTarget{}.Encode(d)
	d.Version = 10
	d.Cells[0].Addr, d.Cells[0].Addrs = "", []string{"127.0.0.1:7081", "127.0.0.1:7181"}
	d.Pools = []routing.Pool{{Name: d.Cells[0].Pool, Balancer: routing.BalancePriority}}
	instances, _ := routingTarget{}.Encode(d)
	return [][]byte{
		plain, ramped, instances,
		[]byte(`{"version":2,"cells":[{"id":"a","addr":"a:1","addrs":["a:2","a:2"],"pool":"p","table_weight":100,"weight":100}],"pools":[{"Name":"p","Balancer":"least_request"},{"Name":"q","Balancer":"random"}]}`),
		[]byte(`{"version":2,"cells":[{"id":"a","addr":"a:1","pool":"p","table_weight":100,"weight":100}],"rules":[{"Name":"r","Pool":"p","HashOn":"transaction"}]}`),
		[]byte(`{"version":2,"cells":[{"id":"a","addr":"unix:///x","pool":"p","table_weight":100,"weight":100}],"rules":[]}`),
		[]byte(`{"version":18446744073709551615,"cells":null,"rules":null}`),
		[]byte(`{"version":2,"cells":[{"id":"a","addr":"a:1","pool":"p","table_weight":100,"weight":100,"ramp":{"from":0,"start":"2026-01-01T00:00:00Z","end":"2025-01-01T00:00:00Z"}}]}`),
		[]byte(`null`),
	}
}

// FuzzDecodeRoutingEntry feeds the routing table's KV entry decoder
// anything: Decode and Validate must never panic; what validates applies
// to a fresh state, is within routing's caps, and encodes and decodes to
// the same bytes.
func FuzzDecodeRoutingEntry(f *testing.F) {
	for _, b := range routingSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tg := routingTarget{}
		d, err := tg.Decode(b)
		if err != nil {
			return
		}
		if tg.Validate(d) != nil {
			return
		}
		if len(d.Cells) > routing.MaxCells || len(d.Rules) > routing.MaxRules || len(d.Pools) > routing.MaxCells {
			t.Fatalf("validated %d cells, %d rules, %d pools", len(d.Cells), len(d.Rules), len(d.Pools))
		}
		for _, c := range d.Cells {
			if len(c.Addrs) > routing.MaxInstances {
				t.Fatalf("validated cell %q with %d instances", c.ID, len(c.Addrs))
			}
		}
		st, err := state.New(state.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := (routingTarget{st}).Apply(d.Clone(), 1); err != nil {
			t.Fatalf("a valid entry does not apply: %v", err)
		}
		enc, err := tg.Encode(d)
		if err != nil {
			t.Fatal(err)
		}
		d2, err := tg.Decode(enc)
		if err != nil {
			t.Fatalf("re-encoded entry refused: %v", err)
		}
		if enc2, _ := tg.Encode(d2); !bytes.Equal(enc, enc2) {
			t.Fatalf("round trip differs:\n%s\n%s", enc, enc2)
		}
	})
}

// stateFile is the state file's shape (internal/kvsync writes it).
type stateFile struct {
	Revision uint64          `json:"revision"`
	Replica  string          `json:"replica"`
	SavedAt  time.Time       `json:"saved_at"`
	Doc      json.RawMessage `json:"doc"`
}

// FuzzLoadStateFile feeds a replica's start anything as its state file:
// it must never panic or fail to start; a file it takes validates and
// sets the revision in force, and any other falls back to the seed.
func FuzzLoadStateFile(f *testing.F) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, doc := range routingSeeds(f) {
		b, _ := json.MarshalIndent(stateFile{Revision: 7, Replica: "gtr-0", SavedAt: at, Doc: json.RawMessage(doc)}, "", "  ")
		f.Add(b)
	}
	f.Add([]byte(`{"revision":18446744073709551615,"doc":{"version":1}}`))
	f.Add([]byte(`{"revision":3,"doc":"not an object"}`))
	f.Add([]byte(``))
	dir := f.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "state.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		st, err := state.New(state.Config{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := Start(Config{State: st, Seed: func() (state.Doc, error) { return seedDoc(), nil }, StateFile: path, Log: quiet})
		if err != nil {
			t.Fatalf("start with a bad state file: %v", err)
		}
		defer r.Close()
		d, rev, ok := st.Doc()
		if !ok {
			t.Fatal("nothing applied")
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("the document in force does not validate: %v", err)
		}
		var ff stateFile
		fromFile := json.Unmarshal(b, &ff) == nil && rev == ff.Revision && rev != 0
		if !fromFile && rev != 0 {
			t.Fatalf("revision %d in force, neither the file's nor the seed's", rev)
		}
	})
}
