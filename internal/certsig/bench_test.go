package certsig

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"testing"
)

// BenchmarkSign: what one signature of a directory entry's digest costs,
// by the key of the cell's certificate (the directory signs a claim and a
// final state per transaction; docs/benchmarks/log/gtr-overhead-and-pgbench.md).
func BenchmarkSign(b *testing.B) {
	digest := sha256.Sum256([]byte("cellpay directory entry"))
	p256, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range []struct {
		name string
		key  any
	}{{"p256", p256}, {"ed25519", ed}} {
		signer, err := Signer(k.key)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(k.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := Sign(signer, digest[:]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerify: what a reader's check of one entry costs, by key.
func BenchmarkVerify(b *testing.B) {
	digest := sha256.Sum256([]byte("cellpay directory entry"))
	p256, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	edPub, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range []struct {
		name string
		key  any
		pub  any
	}{{"p256", p256, &p256.PublicKey}, {"ed25519", ed, edPub}} {
		signer, err := Signer(k.key)
		if err != nil {
			b.Fatal(err)
		}
		sig, err := Sign(signer, digest[:])
		if err != nil {
			b.Fatal(err)
		}
		b.Run(k.name, func(b *testing.B) {
			for b.Loop() {
				if !Verify(k.pub, digest[:], sig) {
					b.Fatal("signature refused")
				}
			}
		})
	}
}
