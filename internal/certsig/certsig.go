// Package certsig signs bytes with the key of a platform certificate (the
// one a component speaks mutual TLS with, which names its SPIFFE identity)
// and verifies such signatures: the signer's chain against the platform's
// CA, its identity, and the signature. It is the one copy of that code:
// the transaction directory's entries (cmd/cell/internal/directory) and
// the drills' signed reports (internal/drillreport) use it.
//
// It reads no file, no clock and no network: the caller passes the key,
// the roots and the time a chain is verified at. Callers sign a digest of
// a context string and their bytes (their own), so that a signature is
// never valid for another use of the same key.
package certsig

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/cellpay/cellpay/internal/hop"
)

// Errors callers branch on (errors.Is); each is wrapped with what failed.
var (
	// ErrKey: the private key is neither ECDSA nor Ed25519.
	ErrKey = errors.New("certsig: the key is neither ECDSA nor Ed25519")
	// ErrCertificate: the certificates could not be read (not PEM or
	// DER of X.509, too many, too large).
	ErrCertificate = errors.New("certsig: certificate unreadable")
	// ErrChain: the certificate does not verify against the roots for
	// the usage asked (another CA, expired, the wrong usage).
	ErrChain = errors.New("certsig: certificate not trusted")
	// ErrIdentity: the certificate verifies, but names another identity.
	ErrIdentity = errors.New("certsig: certificate of another identity")
	// ErrSignature: the signature does not verify with the certificate's
	// key (the bytes were changed, or another key signed them).
	ErrSignature = errors.New("certsig: signature does not verify")
)

// Signer is priv as a crypto.Signer, when it is a key this package signs
// with: ECDSA or Ed25519 (the platform's certificates are ECDSA P-256).
func Signer(priv crypto.PrivateKey) (crypto.Signer, error) {
	switch k := priv.(type) {
	case *ecdsa.PrivateKey:
		return k, nil
	case ed25519.PrivateKey:
		return k, nil
	}
	return nil, ErrKey
}

// Sign signs digest, a SHA-256 sum: ECDSA signatures are ASN.1, Ed25519
// signs the digest as its message.
func Sign(key crypto.Signer, digest []byte) ([]byte, error) {
	if _, ok := key.(ed25519.PrivateKey); ok {
		return key.Sign(rand.Reader, digest, crypto.Hash(0))
	}
	return key.Sign(rand.Reader, digest, crypto.SHA256)
}

// Verify reports whether sig is pub's signature of digest, as Sign makes
// it.
func Verify(pub crypto.PublicKey, digest, sig []byte) bool {
	switch pub := pub.(type) {
	case *ecdsa.PublicKey:
		return ecdsa.VerifyASN1(pub, digest, sig)
	case ed25519.PublicKey:
		return ed25519.Verify(pub, digest, sig)
	}
	return false
}

// CertID names a certificate: the first 16 bytes of its DER's SHA-256, in
// hex.
func CertID(der []byte) string {
	s := sha256.Sum256(der)
	return hex.EncodeToString(s[:16])
}

// Bounds of a chain read from outside.
const (
	MaxChainBytes = 16 << 10
	MaxChainCerts = 4
)

// EncodePEM is a chain (DER, leaf first) as PEM.
func EncodePEM(chain [][]byte) []byte {
	var out []byte
	for _, der := range chain {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	return out
}

// ParsePEM reads a chain of PEM certificates, leaf first: 1 to
// MaxChainCerts of them in at most MaxChainBytes, and nothing else.
// Its errors are ErrCertificate's.
func ParsePEM(b []byte) ([]*x509.Certificate, error) {
	if len(b) > MaxChainBytes {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrCertificate, len(b), MaxChainBytes)
	}
	var chain []*x509.Certificate
	for len(b) > 0 {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			if len(chain) > 0 && len(trimSpace(b)) == 0 {
				break
			}
			return nil, fmt.Errorf("%w: not PEM", ErrCertificate)
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%w: a PEM block of type %q", ErrCertificate, blk.Type)
		}
		if len(chain) == MaxChainCerts {
			return nil, fmt.Errorf("%w: more than %d certificates", ErrCertificate, MaxChainCerts)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %d: %v", ErrCertificate, len(chain), err)
		}
		chain = append(chain, c)
		b = trimSpace(b)
	}
	if len(chain) == 0 {
		return nil, fmt.Errorf("%w: no certificate", ErrCertificate)
	}
	return chain, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\n' || b[0] == '\r' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// VerifyCert verifies chain[0] (chain[1:] its intermediates) against roots
// for usage as of at, then that it names identity (its SPIFFE URI SAN, as
// package hop reads it). Its errors are ErrChain's or ErrIdentity's.
func VerifyCert(chain []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage, at time.Time, identity string) error {
	if len(chain) == 0 {
		return fmt.Errorf("%w: no certificate", ErrChain)
	}
	leaf := chain[0]
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: at,
		KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return fmt.Errorf("%w: %v", ErrChain, err)
	}
	if got := hop.CertIdentity(leaf); got != identity {
		return fmt.Errorf("%w: %q, want %q", ErrIdentity, got, identity)
	}
	return nil
}
