package directory

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/internal/dev/pki"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/dev/testutil/natstest"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// cellCerts issues, from one new CA, a certificate for each cell's
// identity: the files a cell signs with.
func cellCerts(t testing.TB, cells ...string) map[string]tlsconf.Files {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]tlsconf.Files{}
	for _, c := range cells {
		if err := ca.Issue(c, []string{hop.Cell(c)}, pki.Client); err != nil {
			t.Fatal(err)
		}
		out[c] = tlsconf.Files{Cert: pki.CertFile(dir, c), Key: pki.KeyFile(dir, c), CA: ca.CertFile()}
	}
	return out
}

// signedCells opens a signing directory per cell, each with a certificate
// of one CA for its identity.
func signedCells(t *testing.T, url string, cells ...string) []*Directory {
	t.Helper()
	certs := cellCerts(t, cells...)
	var out []*Directory
	for _, c := range cells {
		d, err := Open(Config{NATSURL: url, CellID: c, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			SigningCert: certs[c]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		testutil.Eventually(t, 10*time.Second, c+"'s directory ready", d.Ready)
		out = append(out, d)
	}
	return out
}

// rawBucket is the bucket as any client with publish rights on its
// entries' subjects writes it: a compromised cell.
func rawBucket(t *testing.T, url string) jetstream.KeyValue {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// sealedBy is e for bucket key k signed by d's certificate: what d, if
// compromised, can write.
func sealedBy(t *testing.T, d *Directory, k string, e Entry) []byte {
	t.Helper()
	b, err := d.seal(context.Background(), *d.kv.Load(), k, e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestForgeriesIgnored: cell-b, compromised, writes what its NATS rights
// let it write to an entry cell-a owns: an entry naming cell-a signed by
// itself, a final answer of its own where the rules allow no takeover, an
// unsigned entry, a copy of another key's real entry, a delete marker, and
// a purge. Every reader ignores each one (and counts it), still reads
// cell-a's entry, and sends the transaction to cell-a; cell-a finalizes on
// top of them, and readers replay cell-a's answer, never cell-b's. The
// bucket refuses the purge: no writer erases an entry's history.
func TestForgeriesIgnored(t *testing.T) {
	ns := natstest.Start(t)
	ds := signedCells(t, ns.URL(), "cell-a", "cell-b", "cell-c")
	a, b, c := ds[0], ds[1], ds[2]
	ctx := context.Background()
	raw := rawBucket(t, ns.URL())

	if _, ours, err := a.Claim(ctx, key, owned("cell-a", "c1", 1, fpA)); err != nil || !ours {
		t.Fatalf("cell-a's claim: ours=%v err=%v", ours, err)
	}
	other := idempotency.Key{PartnerID: "p-001", TransactionID: "t-other"}
	if _, _, err := a.Claim(ctx, other, owned("cell-a", "c2", 1, fpB)); err != nil {
		t.Fatal(err)
	}
	otherEntry, err := raw.Get(ctx, Key(other))
	if err != nil {
		t.Fatal(err)
	}
	forgedAnswer := &cellpayv1.Transaction{TransactionId: "t-1", Status: cellpayv1.TransactionStatus_APPROVED, AuthCode: "FORGED"}
	forgeries := map[string][]byte{
		"cell-a's name, cell-b's signature":   sealedBy(t, b, Key(key), Entry{Owner: "cell-a", Fingerprint: fpA, State: Final, Answer: forgedAnswer}),
		"cell-b's takeover of an owned entry": sealedBy(t, b, Key(key), Entry{Owner: "cell-b", Call: "c9", Attempt: 1, Fingerprint: fpA, State: Final, Answer: forgedAnswer}),
		"unsigned":                            encode(t, Key(key), Entry{Owner: "cell-b", Fingerprint: fpA, State: Final, Answer: forgedAnswer}),
		"another key's real entry":            otherEntry.Value(),
	}
	for name, v := range forgeries {
		if _, err := raw.Put(ctx, Key(key), v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if err := raw.Delete(ctx, Key(key)); err != nil {
		t.Fatal(err)
	}
	if err := raw.Purge(ctx, Key(key)); err == nil {
		t.Fatal("a purge of an entry was accepted: its history can be erased")
	}

	before := c.Forged()
	for _, d := range []*Directory{a, b, c} {
		got, found, err := d.Get(ctx, key)
		if err != nil || !found || got.Owner != "cell-a" || got.State != Owned || got.Call != "c1" {
			t.Fatalf("%s reads %+v found=%v err=%v; want cell-a's owned entry", d.cfg.CellID, got, found, err)
		}
	}
	if n := c.Forged() - before; n != int64(len(forgeries)+1) {
		t.Errorf("cell-c counted %d ignored revisions, want %d", n, len(forgeries)+1)
	}
	held, ours, err := c.Claim(ctx, key, owned("cell-c", "c3", 1, fpA))
	if err != nil || ours || held.Owner != "cell-a" {
		t.Fatalf("cell-c's claim: %+v ours=%v err=%v; want held by cell-a", held, ours, err)
	}
	real := &cellpayv1.Transaction{TransactionId: "t-1", Status: cellpayv1.TransactionStatus_DECLINED, DeclineReason: "do_not_honor"}
	if err := a.Finalize(ctx, key, "cell-a", fpA, "", real); err != nil {
		t.Fatalf("cell-a's final answer on top of the forgeries: %v", err)
	}
	got, _, err := c.Get(ctx, key)
	if err != nil || got.State != Final || got.Answer.GetStatus() != cellpayv1.TransactionStatus_DECLINED || got.Answer.GetAuthCode() == "FORGED" {
		t.Fatalf("after cell-a's final: cell-c reads %+v, %v", got, err)
	}
	// And a forged final after the real one changes nothing.
	if _, err := raw.Put(ctx, Key(key), sealedBy(t, b, Key(key), Entry{Owner: "cell-b", Fingerprint: fpA, State: Final, Answer: forgedAnswer})); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := c.Get(ctx, key); got.Answer.GetStatus() != cellpayv1.TransactionStatus_DECLINED {
		t.Fatalf("a forged change of a final entry was taken: %+v", got)
	}
}

// TestForgedMarkerIsNoClaim: a key holding only a forged delete marker
// has no entry; a cell claiming it writes on top of the marker (nats.go's
// Create would too, but the directory claims with Update at revision 0
// and then judges what is there), and every reader sees its claim.
func TestForgedMarkerIsNoClaim(t *testing.T) {
	ns := natstest.Start(t)
	ds := signedCells(t, ns.URL(), "cell-a", "cell-b")
	a, b := ds[0], ds[1]
	ctx := context.Background()
	if err := rawBucket(t, ns.URL()).Delete(ctx, Key(key)); err != nil {
		t.Fatal(err)
	}
	if _, found, err := b.Get(ctx, key); err != nil || found {
		t.Fatalf("a marker alone: found=%v err=%v, want no entry", found, err)
	}
	if _, ours, err := a.Claim(ctx, key, owned("cell-a", "c1", 1, fpA)); err != nil || !ours {
		t.Fatalf("claim over a marker: ours=%v err=%v", ours, err)
	}
	if got, found, err := b.Get(ctx, key); err != nil || !found || got.Owner != "cell-a" {
		t.Fatalf("cell-b reads %+v found=%v err=%v; want cell-a's", got, found, err)
	}
}

// TestUnknownSignerIgnored: an entry naming a certificate that is not in
// the bucket for its owner is ignored, like any forgery: a real one's is
// there before it (publish).
func TestUnknownSignerIgnored(t *testing.T) {
	ns := natstest.Start(t)
	ds := signedCells(t, ns.URL(), "cell-a", "cell-b")
	b := ds[1]
	ctx := context.Background()
	k2 := idempotency.Key{PartnerID: "p-001", TransactionID: "t-unknown"}
	p, err := encodeEntry(Key(k2), owned("cell-a", "c1", 1, fpA))
	if err != nil {
		t.Fatal(err)
	}
	v, err := Seal(p, "00000000000000000000000000000000", []byte{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rawBucket(t, ns.URL()).Create(ctx, Key(k2), v); err != nil {
		t.Fatal(err)
	}
	if got, found, err := b.Get(ctx, k2); err != nil || found {
		t.Fatalf("entry by an unknown certificate: %+v found=%v err=%v, want ignored", got, found, err)
	}
	if b.Forged() != 1 {
		t.Fatalf("forged %d, want 1", b.Forged())
	}
}

// FuzzDecodeChain: whatever is under a certificate's key, decodeChain
// refuses it with an error or returns certificates that parse.
func FuzzDecodeChain(f *testing.F) {
	s, err := newSigner("cell-a", cellCerts(f, "cell-a")["cell-a"])
	if err != nil {
		f.Fatal(err)
	}
	sc, _ := s.current()
	b, _ := encodeChain(sc.chain)
	f.Add(b)
	f.Add([]byte(`[]`))
	f.Add([]byte(`["AQID"]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		chain, err := decodeChain(data)
		if err != nil {
			return
		}
		if len(chain) == 0 || chain[0] == nil {
			t.Fatalf("decodeChain accepted %q with no certificate", data)
		}
	})
}

// TestRelease: once cell-a is declared lost (its release record, which
// only the GTR may write), its entries written before it, not final, are
// Released: cell-b takes one over and every reader accepts the takeover.
// Before the release, the same takeover is ignored as a forgery; an entry
// cell-a writes after its release, or a final one, is not released.
func TestRelease(t *testing.T) {
	ns := natstest.Start(t)
	ds := signedCells(t, ns.URL(), "cell-a", "cell-b", "cell-c")
	a, b, c := ds[0], ds[1], ds[2]
	ctx := context.Background()
	raw := rawBucket(t, ns.URL())
	k1, k2, k3 := key, idempotency.Key{PartnerID: "p-001", TransactionID: "t-final"}, idempotency.Key{PartnerID: "p-001", TransactionID: "t-after"}
	claim, _, err := a.Claim(ctx, k1, owned("cell-a", "c1", 1, fpA))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Claim(ctx, k2, owned("cell-a", "c2", 1, fpA)); err != nil {
		t.Fatal(err)
	}
	if err := a.Finalize(ctx, k2, "cell-a", fpA, "", &cellpayv1.Transaction{TransactionId: "t-final", Status: cellpayv1.TransactionStatus_APPROVED}); err != nil {
		t.Fatal(err)
	}

	// Not released yet: a takeover of another call's owned entry is
	// ignored.
	if _, err := raw.Update(ctx, Key(k1), sealedBy(t, b, Key(k1), owned("cell-b", "c9", 1, fpA)), claim.Revision); err != nil {
		t.Fatal(err)
	}
	if got, _, err := c.Get(ctx, k1); err != nil || got.Owner != "cell-a" || got.Released {
		t.Fatalf("before the release: %+v %v; want cell-a's, not released", got, err)
	}

	if _, err := raw.Put(ctx, ReleaseKey("cell-a"), []byte(`{"cell":"cell-a","reason":"test"}`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Claim(ctx, k3, owned("cell-a", "c3", 1, fpA)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(releaseFresh) // c's cache of "no release" ages out
	held, ours, err := b.Claim(ctx, k1, owned("cell-b", "c5", 1, fpA))
	if err != nil || ours || held.Owner != "cell-a" || !held.Released {
		t.Fatalf("cell-b's claim after the release: %+v ours=%v err=%v; want cell-a's, released", held, ours, err)
	}
	taken := owned("cell-b", "c5", 1, fpA)
	taken.Pinned = true
	if _, ok, err := b.Take(ctx, k1, taken, held.Revision); err != nil || !ok {
		t.Fatalf("cell-b's takeover: %v %v", ok, err)
	}
	for _, d := range []*Directory{b, c} {
		got, _, err := d.Get(ctx, k1)
		if err != nil || got.Owner != "cell-b" || !got.Pinned || got.Released {
			t.Fatalf("%s reads %+v, %v; want cell-b's pinned takeover", d.cfg.CellID, got, err)
		}
	}
	if got, _, _ := c.Get(ctx, k2); got.State != Final || got.Released {
		t.Fatalf("a final entry of the released cell: %+v; want final, not released", got)
	}
	if got, _, _ := c.Get(ctx, k3); got.Owner != "cell-a" || got.Released {
		t.Fatalf("an entry written after the release: %+v; want cell-a's, not released", got)
	}
}
