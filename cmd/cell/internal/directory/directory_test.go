package directory

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/cardkeys"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

func open(t *testing.T, url, cell string) *Directory {
	t.Helper()
	d, err := Open(Config{NATSURL: url, CellID: cell, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	testutil.Eventually(t, 10*time.Second, "directory ready", d.Ready)
	return d
}

var (
	key = idempotency.Key{PartnerID: "p-001", TransactionID: "t-1"}
	fpA = idempotency.Fingerprint{1}
	fpB = idempotency.Fingerprint{2}
)

func owned(cell, call string, attempt int32, fp idempotency.Fingerprint) Entry {
	return Entry{Owner: cell, Call: call, Attempt: attempt, Fingerprint: fp, State: Owned}
}

// Claims over a real NATS server: the first claim wins, a second cell
// reads the winner's entry, a takeover is conditional on the revision
// read, and a lost takeover returns the winner.
func TestClaimAndTakeOver(t *testing.T) {
	ns := natstest.Start(t)
	a, b, c := open(t, ns.URL(), "cell-a"), open(t, ns.URL(), "cell-b"), open(t, ns.URL(), "cell-c")
	ctx := context.Background()

	got, ours, err := a.Claim(ctx, key, owned("cell-a", "c1", 1, fpA))
	if err != nil || !ours || got.Revision == 0 {
		t.Fatalf("first claim: %+v ours=%v err=%v", got, ours, err)
	}
	held, ours, err := b.Claim(ctx, key, owned("cell-b", "c1", 2, fpA))
	if err != nil || ours || held.Owner != "cell-a" || held.Call != "c1" || held.Attempt != 1 || held.Revision != got.Revision {
		t.Fatalf("second claim: %+v ours=%v err=%v", held, ours, err)
	}
	again, ours, err := a.Claim(ctx, key, owned("cell-a", "c2", 1, fpA))
	if err != nil || !ours || again.Call != "c1" {
		t.Fatalf("the owner's own claim again: %+v ours=%v err=%v (want the entry as it is, ours)", again, ours, err)
	}

	// b and c race to take over at the same revision: exactly one wins,
	// and the loser is handed the winner's entry.
	var wg sync.WaitGroup
	res := make([]Entry, 2)
	won := make([]bool, 2)
	for i, d := range []*Directory{b, c} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			res[i], won[i], err = d.Take(ctx, key, owned(d.cfg.CellID, "c1", 2, fpA), held.Revision)
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if won[0] == won[1] {
		t.Fatalf("takeover race: won %v, want exactly one", won)
	}
	winner := res[0]
	if won[1] {
		winner = res[1]
	}
	for i := range res {
		if res[i].Owner != winner.Owner {
			t.Errorf("takeover %d: sees owner %s, the winner is %s", i, res[i].Owner, winner.Owner)
		}
	}
	if cur, ok, err := a.Get(ctx, key); err != nil || !ok || cur.Owner != winner.Owner {
		t.Fatalf("after the takeover: %+v %v %v", cur, ok, err)
	}
	// The old owner can no longer finalize or abandon.
	if err := a.Finalize(ctx, key, "cell-a", fpA, "fp-1", &cellpayv1.Transaction{TransactionId: "t-1"}); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("finalize by the old owner: %v, want ErrNotOwner", err)
	}
	if err := a.Abandon(ctx, key, "cell-a", "c1", 1); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("abandon by the old owner: %v, want ErrNotOwner", err)
	}
}

// Finalize and Abandon by the owner; Finalize of a transaction decided
// without a claim creates its entry; a final entry is never rewritten.
func TestFinalizeAndAbandon(t *testing.T) {
	ns := natstest.Start(t)
	a := open(t, ns.URL(), "cell-a")
	ctx := context.Background()
	if _, _, err := a.Claim(ctx, key, owned("cell-a", "c1", 1, fpA)); err != nil {
		t.Fatal(err)
	}
	if err := a.Abandon(ctx, key, "cell-a", "c9", 1); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("abandon for another call: %v, want ErrNotOwner", err)
	}
	if err := a.Abandon(ctx, key, "cell-a", "c1", 1); err != nil {
		t.Fatal(err)
	}
	if cur, _, _ := a.Get(ctx, key); cur.State != Abandoned || cur.Owner != "cell-a" {
		t.Fatalf("after abandon: %+v", cur)
	}
	approved := &cellpayv1.Transaction{TransactionId: "t-1", Status: cellpayv1.TransactionStatus_APPROVED, AuthCode: "A1"}
	if err := a.Finalize(ctx, key, "cell-a", fpA, "fp-1", approved); err != nil {
		t.Fatal(err)
	}
	declined := &cellpayv1.Transaction{TransactionId: "t-1", Status: cellpayv1.TransactionStatus_DECLINED}
	if err := a.Finalize(ctx, key, "cell-a", fpA, "fp-1", declined); err != nil {
		t.Fatal(err)
	}
	if cur, _, _ := a.Get(ctx, key); cur.State != Final || cur.Answer.GetAuthCode() != "A1" {
		t.Fatalf("final entry rewritten: %+v", cur)
	}
	k2 := idempotency.Key{PartnerID: "p-001", TransactionID: "unclaimed"}
	if err := a.Finalize(ctx, k2, "cell-a", fpB, "fp-1", approved); err != nil {
		t.Fatal(err)
	}
	if cur, ok, _ := a.Get(ctx, k2); !ok || cur.State != Final || cur.Fingerprint != fpB {
		t.Fatalf("finalize without a claim: %+v %v", cur, ok)
	}
}

// With NATS gone, every operation fails fast with ErrUnavailable (never
// "no entry"), and the directory comes back with NATS.
func TestUnavailable(t *testing.T) {
	ns := natstest.Start(t)
	a := open(t, ns.URL(), "cell-a")
	ns.Stop()
	testutil.Eventually(t, 10*time.Second, "directory sees NATS gone", func() bool { return !a.Ready() })
	start := time.Now()
	if _, _, err := a.Claim(context.Background(), key, owned("cell-a", "c1", 1, fpA)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("claim with NATS down: %v, want ErrUnavailable", err)
	}
	if _, _, err := a.Get(context.Background(), key); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("get with NATS down: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("failing took %v; the bound is OpTimeout", d)
	}
	ns.Restart()
	testutil.Eventually(t, 20*time.Second, "directory back", a.Ready)
	if _, ours, err := a.Claim(context.Background(), key, owned("cell-a", "c1", 1, fpA)); err != nil || !ours {
		t.Fatalf("claim after NATS returned: ours=%v err=%v", ours, err)
	}
}

// encode renders e for key k unsigned, as a directory on plaintext NATS
// writes it.
func encode(t testing.TB, k string, e Entry) []byte {
	t.Helper()
	p, err := encodeEntry(k, e)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Seal(p, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEncodeDecode(t *testing.T) {
	e := Entry{Owner: "cell-a", Call: "c1", Attempt: 2, Fingerprint: fpA, FingerprintKeyID: "fp-0a1b2c3d", State: Final,
		Answer: &cellpayv1.Transaction{TransactionId: "t-1", Status: cellpayv1.TransactionStatus_APPROVED, MaskedPan: "424242******4242"}}
	s, err := Decode(encode(t, "t.1", e))
	got := s.Entry
	if err != nil || s.Key != "t.1" || got.Owner != e.Owner || got.Call != e.Call || got.Attempt != 2 || got.Fingerprint != fpA ||
		got.FingerprintKeyID != "fp-0a1b2c3d" || got.State != Final || got.Answer.GetMaskedPan() != "424242******4242" {
		t.Fatalf("round trip: %+v %v", s, err)
	}
	// An entry without a key ID is under the legacy key.
	old, err := Decode([]byte(`{"e":{"v":2,"k":"t.1","owner":"a","fp":"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=","state":"owned"}}`))
	if err != nil || old.Entry.FingerprintKeyID != cardkeys.LegacyKeyID {
		t.Fatalf("entry without fk: key ID %q, %v", old.Entry.FingerprintKeyID, err)
	}
	const fp = `"fp":"AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA="`
	for _, bad := range []string{
		`{"e":{"v":2,"k":"t.1","owner":"a",` + fp + `,"fk":"` + strings.Repeat("k", 65) + `","state":"owned"}}`,
		`{}`, `{"e":{"v":2}}`, `{"e":{"v":2,"k":"t.1","owner":"a","fp":"AQ==","state":"owned"}}`,
		`{"e":{"v":1,"k":"t.1","owner":"a",` + fp + `,"state":"owned"}}`,
		`{"v":1,"owner":"a",` + fp + `,"state":"owned"}`, // version 1, unsigned: not taken
		`{"e":{"v":2,"owner":"a",` + fp + `,"state":"owned"}}`,
		`{"e":{"v":2,"k":"t.1","owner":"",` + fp + `,"state":"owned"}}`,
		`{"e":{"v":2,"k":"t.1","owner":"a",` + fp + `,"state":"final"}}`,
		`{"e":{"v":2,"k":"t.1","owner":"a",` + fp + `,"state":"weird"}}`,
		`{"e":{"v":2,"k":"t.1","owner":"a","attempt":-1,` + fp + `,"state":"owned"}}`,
		`{"e":{"v":2,"k":"t.1","owner":"a",` + fp + `,"state":"owned"},"s":"` + strings.Repeat("A", 400) + `"}`,
	} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%s) accepted", bad)
		}
	}
}

// FuzzDecode: whatever is in the bucket, Decode refuses it with an error
// or returns an entry that encodes again to one that decodes the same.
func FuzzDecode(f *testing.F) {
	f.Add(encode(f, "t.1", Entry{Owner: "cell-a", Call: "c1", Attempt: 1, Fingerprint: fpA, State: Owned}))
	f.Add(encode(f, "t.2", Entry{Owner: "cell-b", Fingerprint: fpB, State: Final, Answer: &cellpayv1.Transaction{TransactionId: "x"}}))
	f.Add([]byte(`{"e":{"v":2},"c":"0a","s":"AQ=="}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Decode(data)
		if err != nil {
			return
		}
		p, err := encodeEntry(s.Key, s.Entry)
		if err != nil {
			t.Fatalf("decoded entry does not encode: %v", err)
		}
		again, err := Seal(p, s.CertID, s.Sig)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := Decode(again)
		e, e2 := s.Entry, s2.Entry
		if err != nil || s2.Key != s.Key || e2.Owner != e.Owner || e2.State != e.State || e2.Fingerprint != e.Fingerprint || e2.FingerprintKeyID != e.FingerprintKeyID {
			t.Fatalf("re-decode: %+v %v", s2, err)
		}
	})
}

// FinalizeAt writes on top of the owner's claim when nothing changed it,
// and otherwise decides as Finalize does: on top of the owner's later
// revision, or ErrNotOwner once another cell took the entry over.
func TestFinalizeAt(t *testing.T) {
	ns := natstest.Start(t)
	a, b := open(t, ns.URL(), "cell-a"), open(t, ns.URL(), "cell-b")
	ctx := context.Background()
	answer := &cellpayv1.Transaction{TransactionId: "t-1", Status: cellpayv1.TransactionStatus_APPROVED, AuthCode: "A1"}
	claim, _, err := a.Claim(ctx, key, owned("cell-a", "c1", 1, fpA))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.FinalizeAt(ctx, key, claim.Revision, "cell-a", fpA, "fp-1", answer); err != nil {
		t.Fatal(err)
	}
	if cur, _, _ := b.Get(ctx, key); cur.State != Final || cur.Answer.GetAuthCode() != "A1" || cur.Revision != claim.Revision+1 {
		t.Fatalf("after FinalizeAt: %+v (claim at %d)", cur, claim.Revision)
	}
	// A stale revision: the entry was pinned since.
	k2 := idempotency.Key{PartnerID: "p-001", TransactionID: "t-2"}
	claim2, _, _ := a.Claim(ctx, k2, owned("cell-a", "c2", 1, fpA))
	pinned := owned("cell-a", "c2", 1, fpA)
	pinned.Pinned = true
	if _, ok, err := a.Take(ctx, k2, pinned, claim2.Revision); err != nil || !ok {
		t.Fatalf("pin: %v %v", ok, err)
	}
	if err := a.FinalizeAt(ctx, k2, claim2.Revision, "cell-a", fpA, "fp-1", answer); err != nil {
		t.Fatalf("FinalizeAt at a stale revision of its own entry: %v", err)
	}
	if cur, _, _ := b.Get(ctx, k2); cur.State != Final {
		t.Fatalf("after a stale FinalizeAt: %+v", cur)
	}
	// Taken over by cell-b (the attempt abandoned) since the claim.
	k3 := idempotency.Key{PartnerID: "p-001", TransactionID: "t-3"}
	claim3, _, _ := a.Claim(ctx, k3, owned("cell-a", "c3", 1, fpA))
	if err := a.Abandon(ctx, k3, "cell-a", "c3", 1); err != nil {
		t.Fatal(err)
	}
	cur, _, _ := b.Get(ctx, k3)
	if _, ok, err := b.Take(ctx, k3, owned("cell-b", "c3", 2, fpA), cur.Revision); err != nil || !ok {
		t.Fatalf("cell-b's takeover: %v %v", ok, err)
	}
	if err := a.FinalizeAt(ctx, k3, claim3.Revision, "cell-a", fpA, "fp-1", answer); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("FinalizeAt of an entry taken over: %v, want ErrNotOwner", err)
	}
}
