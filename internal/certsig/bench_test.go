package certsig

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"testing"
)

// benchKey is a key of each kind a cell's certificate may have.
type benchKey struct {
	name   string
	signer crypto.Signer
	pub    crypto.PublicKey
}

func benchKeys(b *testing.B) []benchKey {
	b.Helper()
	p256, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	edPub, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	return []benchKey{{"p256", p256, &p256.PublicKey}, {"ed25519", ed, edPub}}
}

// benchDigest stands for a directory entry's digest.
var benchDigest = sha256.Sum256([]byte("cellpay directory entry"))

// BenchmarkSign: what one signature of a directory entry's digest costs,
// by the key of the cell's certificate (the directory signs a claim and a
// final state per transaction;
// docs/benchmarks/log/gtr-overhead-and-pgbench.md).
func BenchmarkSign(b *testing.B) {
	for _, k := range benchKeys(b) {
		b.Run(k.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := Sign(k.signer, benchDigest[:]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerify: what a reader's check of one entry costs, by key.
func BenchmarkVerify(b *testing.B) {
	for _, k := range benchKeys(b) {
		sig, err := Sign(k.signer, benchDigest[:])
		if err != nil {
			b.Fatal(err)
		}
		b.Run(k.name, func(b *testing.B) {
			for b.Loop() {
				if !Verify(k.pub, benchDigest[:], sig) {
					b.Fatal("signature refused")
				}
			}
		})
	}
}
