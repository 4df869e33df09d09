package certsig_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"github.com/cellpay/cellpay/internal/certsig"
)

// TestSignVerify: ECDSA and Ed25519 keys sign a digest that verifies
// with their public key, and not with another key or digest; an RSA key
// is refused.
func TestSignVerify(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	d := sha256.Sum256([]byte("payload"))
	d2 := sha256.Sum256([]byte("payload2"))
	for name, priv := range map[string]any{"ecdsa": ec, "ed25519": ed} {
		key, err := certsig.Signer(priv)
		if err != nil {
			t.Fatal(err)
		}
		sig, err := certsig.Sign(key, d[:])
		if err != nil {
			t.Fatal(err)
		}
		if !certsig.Verify(key.Public(), d[:], sig) || certsig.Verify(key.Public(), d2[:], sig) || certsig.Verify(other.Public(), d[:], sig) {
			t.Errorf("%s: verification wrong", name)
		}
	}
	rk, _ := rsa.GenerateKey(rand.Reader, 1024)
	if _, err := certsig.Signer(rk); !errors.Is(err, certsig.ErrKey) {
		t.Errorf("RSA: %v", err)
	}
}

// TestParsePEM: a chain is PEM certificates only, bounded in count and
// size; anything else is ErrCertificate.
func TestParsePEM(t *testing.T) {
	for name, b := range map[string]string{
		"empty":     "",
		"not PEM":   "hello",
		"a key":     "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
		"not X.509": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
		"too large": strings.Repeat("x", certsig.MaxChainBytes+1),
	} {
		if _, err := certsig.ParsePEM([]byte(b)); !errors.Is(err, certsig.ErrCertificate) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
