package cardkeys

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

func master(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func request() *cellpayv1.SubmitTransactionRequest {
	return &cellpayv1.SubmitTransactionRequest{TransactionId: "t-1", PartnerId: "p-001",
		Amount: &cellpayv1.Money{MinorUnits: 1250, Currency: "GBP"}, Card: &cellpayv1.Card{Pan: "4242424242424242"}}
}

func ring(t *testing.T, masters ...[]byte) *Ring {
	t.Helper()
	r, err := New(masters...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDerivationDeterministic: the same master gives the same keys and IDs
// in every process (cells compare fingerprints through the directory); the
// PAN key and the fingerprint key differ from each other and from the
// master; another master gives other keys.
func TestDerivationDeterministic(t *testing.T) {
	a, b := ring(t, master(1)), ring(t, master(1))
	pan := "4242424242424242"
	if a.PANHashKeyID() != b.PANHashKeyID() || a.FingerprintKeyID() != b.FingerprintKeyID() ||
		!bytes.Equal(a.PANHashes(pan)[0].Sum, b.PANHashes(pan)[0].Sum) || a.Fingerprint(request()) != b.Fingerprint(request()) {
		t.Fatal("derivation is not deterministic")
	}
	ka, err := derive(master(1))
	if err != nil {
		t.Fatal(err)
	}
	panKey, _ := hkdf.Key(sha256.New, master(1), []byte(salt), infoPANHash, 32)
	fpKey, _ := hkdf.Key(sha256.New, master(1), []byte(salt), infoFingerprint, 32)
	if bytes.Equal(panKey, fpKey) || bytes.Equal(panKey, master(1)) || bytes.Equal(fpKey, master(1)) {
		t.Fatal("the derived keys are not distinct")
	}
	if !bytes.Equal(ka.pan.Hash(pan), card.NewHasher(panKey).Hash(pan)) || ka.fp.Of(request()) != idempotency.NewFingerprinter(fpKey).Of(request()) {
		t.Fatal("the keys are not HKDF-SHA256 of the master with their info strings")
	}
	// The two keys differ: the same bytes hashed under each differ.
	if bytes.Equal(card.NewHasher(panKey).Hash(pan), card.NewHasher(fpKey).Hash(pan)) {
		t.Fatal("PAN key and fingerprint key are the same")
	}
	c := ring(t, master(2))
	if c.PANHashKeyID() == a.PANHashKeyID() || c.FingerprintKeyID() == a.FingerprintKeyID() ||
		bytes.Equal(c.PANHashes(pan)[0].Sum, a.PANHashes(pan)[0].Sum) || c.Fingerprint(request()) == a.Fingerprint(request()) {
		t.Fatal("keys do not depend on the master")
	}
	if !strings.HasPrefix(a.PANHashKeyID(), "pan-") || !strings.HasPrefix(a.FingerprintKeyID(), "fp-") || len(a.PANHashKeyID()) != 12 {
		t.Fatalf("key IDs %s, %s", a.PANHashKeyID(), a.FingerprintKeyID())
	}
}

// TestKeyIDRevealsNoKey: no key ID equals or contains the bytes of a key
// or master, raw or in hex, not even a 4-byte window of them.
func TestKeyIDRevealsNoKey(t *testing.T) {
	m := []byte("0123456789abcdef0123456789abcdef-master")
	r := ring(t, m)
	panKey, _ := hkdf.Key(sha256.New, m, []byte(salt), infoPANHash, 32)
	fpKey, _ := hkdf.Key(sha256.New, m, []byte(salt), infoFingerprint, 32)
	for _, id := range r.KeyIDs() {
		for _, k := range [][]byte{m, panKey, fpKey} {
			for _, enc := range []string{string(k), hex.EncodeToString(k)} {
				for i := 0; i+8 <= len(enc); i++ {
					if strings.Contains(id, enc[i:i+8]) {
						t.Fatalf("key ID %q contains key bytes", id)
					}
				}
				if strings.Contains(enc, strings.TrimPrefix(strings.TrimPrefix(id, "pan-"), "fp-")) {
					t.Fatalf("key ID %q is part of a key", id)
				}
			}
		}
	}
}

// TestRotation: after the current master changes, a record's fingerprint
// under the old key is still recomputed by its key ID, and a card's hash
// under the old key is still among the hashes velocity matches.
func TestRotation(t *testing.T) {
	old := ring(t, master(1))
	rotated := ring(t, master(2), master(1))
	pan := "4242424242424242"
	if rotated.PANHashKeyID() == old.PANHashKeyID() || rotated.FingerprintKeyID() == old.FingerprintKeyID() {
		t.Fatal("rotation kept the current key")
	}
	fp, ok := rotated.FingerprintUnder(old.FingerprintKeyID(), request())
	if !ok || fp != old.Fingerprint(request()) {
		t.Fatal("the old fingerprint key is not in the rotated ring")
	}
	if _, ok := rotated.FingerprintUnder("fp-00000000", request()); ok {
		t.Fatal("an unknown key ID resolved")
	}
	hashes := rotated.PANHashes(pan)
	if hashes[0].KeyID != rotated.PANHashKeyID() {
		t.Fatal("the current key is not first")
	}
	found := false
	for _, h := range hashes {
		if h.KeyID == old.PANHashKeyID() && bytes.Equal(h.Sum, old.PANHashes(pan)[0].Sum) {
			found = true
		}
	}
	if !found {
		t.Fatal("the old PAN key is not in the rotated ring")
	}
	// Legacy rows (the master used as it is) resolve to the oldest master.
	legacy, ok := rotated.FingerprintUnder(LegacyKeyID, request())
	if !ok || legacy != idempotency.NewFingerprinter(master(1)).Of(request()) {
		t.Fatal("legacy fingerprints do not resolve to the oldest master")
	}
	last := hashes[len(hashes)-1]
	if last.KeyID != LegacyKeyID || !bytes.Equal(last.Sum, card.NewHasher(master(1)).Hash(pan)) {
		t.Fatal("legacy PAN hashes do not resolve to the oldest master")
	}
}

func TestNewAndParseRefuse(t *testing.T) {
	if _, err := New(); err == nil {
		t.Error("New() with no master")
	}
	if _, err := New(make([]byte, 31)); err == nil {
		t.Error("New accepted a 31-byte master")
	}
	if _, err := New(master(1), master(1)); err == nil {
		t.Error("New accepted a master twice")
	}
	secret := strings.Repeat("ab", 32)
	got, err := Parse([]byte("# current\n" + secret + "\n\n  " + strings.Repeat("cd", 32) + "  \n"))
	if err != nil || len(got) != 2 || hex.EncodeToString(got[0]) != secret {
		t.Fatalf("Parse = %d masters, %v", len(got), err)
	}
	bad := "zz" + secret[2:]
	_, err = Parse([]byte(secret + "\n" + bad + "\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") || strings.Contains(err.Error(), bad[:8]) {
		t.Fatalf("Parse of a bad line: %v", err)
	}
	if _, err := Parse([]byte("\n# none\n")); err == nil {
		t.Error("Parse accepted a file with no master")
	}
}
