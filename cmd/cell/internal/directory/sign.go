package directory

import (
	"crypto"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellpay/cellpay/internal/certsig"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// Entries are signed by the cell that writes them, with the key of its
// SPIFFE certificate (the one it speaks mutual TLS and NATS with), and
// every reader verifies them (docs/design/transaction-directory.md,
// "Unforgeable"). The signature covers a context string, the bucket key
// and the entry's bytes, so that it is never valid for another protocol,
// another transaction or another entry. A reader finds the signer's
// certificate chain in the bucket under certKey(owner, id), which only
// that cell may write (package natsauth), and trusts it when it chains to
// the platform's CA and names the owner's identity.

// signContext separates the directory's signatures from any other use of
// the certificate's key (TLS signs its own, other, contexts).
const signContext = "cellpay transaction directory entry v2\x00"

// digest is what an entry's signature signs.
func digest(key string, payload []byte) []byte {
	h := sha256.New()
	h.Write([]byte(signContext))
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write(payload)
	return h.Sum(nil)
}

// certID names a certificate in the bucket (certsig.CertID).
func certID(der []byte) string { return certsig.CertID(der) }

// certPrefix starts the keys of the cells' certificates; entries' keys
// start with "t." (Key).
const certPrefix = "c."

// certKey is the bucket key of cell's certificate id.
func certKey(cell, id string) string { return certPrefix + cell + "." + id }

// signer signs with the current certificate of one cell, reloading it
// from its files when they change (a rotation).
type signer struct {
	cell  string
	files tlsconf.Files

	mu      sync.Mutex
	checked time.Time // files last looked at
	modTime time.Time // of the certificate file loaded
	cur     *signingCert
}

// signingCert is one certificate of the cell's and its key.
type signingCert struct {
	id    string
	chain [][]byte // DER, leaf first
	key   crypto.Signer
	// publishedAt: when its chain was last put in the bucket (Unix ns; 0:
	// never), so that readers can verify what it signs.
	publishedAt atomic.Int64
}

// reloadEvery bounds how often the certificate files are looked at.
const reloadEvery = 10 * time.Second

func newSigner(cell string, files tlsconf.Files) (*signer, error) {
	s := &signer{cell: cell, files: files}
	if _, err := s.current(); err != nil {
		return nil, err
	}
	return s, nil
}

// current returns the certificate to sign with now.
func (s *signer) current() (*signingCert, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.cur != nil && now.Sub(s.checked) < reloadEvery {
		return s.cur, nil
	}
	s.checked = now
	fi, err := os.Stat(s.files.Cert)
	if err != nil {
		if s.cur != nil {
			return s.cur, nil // keep signing with what was loaded
		}
		return nil, fmt.Errorf("directory: signing certificate: %w", err)
	}
	if s.cur != nil && fi.ModTime().Equal(s.modTime) {
		return s.cur, nil
	}
	pair, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
	if err != nil {
		if s.cur != nil {
			return s.cur, nil // a rotation half written: the next look finds it whole
		}
		return nil, fmt.Errorf("directory: signing certificate: %w", err)
	}
	key, err := certsig.Signer(pair.PrivateKey)
	if err != nil {
		return nil, errors.New("directory: signing certificate: the key is neither ECDSA nor Ed25519")
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("directory: signing certificate: %w", err)
	}
	if got := hop.CertIdentity(leaf); got != hop.Cell(s.cell) {
		return nil, fmt.Errorf("directory: signing certificate: identity %q, want %q", got, hop.Cell(s.cell))
	}
	s.modTime = fi.ModTime()
	s.cur = &signingCert{id: certID(pair.Certificate[0]), chain: pair.Certificate, key: key}
	return s.cur, nil
}

// sign signs payload for key.
func (c *signingCert) sign(key string, payload []byte) ([]byte, error) {
	return certsig.Sign(c.key, digest(key, payload))
}

// encodeChain and decodeChain are a certificate chain's value in the
// bucket.
func encodeChain(chain [][]byte) ([]byte, error) { return json.Marshal(chain) }

// maxChain bounds a chain read from the bucket.
const maxChain = 16 << 10

func decodeChain(b []byte) ([]*x509.Certificate, error) {
	if len(b) > maxChain {
		return nil, fmt.Errorf("directory: certificate chain of %d bytes, at most %d", len(b), maxChain)
	}
	var ders [][]byte
	if err := json.Unmarshal(b, &ders); err != nil {
		return nil, fmt.Errorf("directory: certificate chain: %w", err)
	}
	if len(ders) == 0 || len(ders) > 4 {
		return nil, fmt.Errorf("directory: certificate chain: %d certificates, want 1 to 4", len(ders))
	}
	out := make([]*x509.Certificate, len(ders))
	for i, der := range ders {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("directory: certificate chain: %d: %w", i, err)
		}
		out[i] = c
	}
	return out, nil
}

// trust verifies signatures: it holds the platform's CA and the
// certificates it has verified, by ID (a bounded cache: cleared when
// full).
type trust struct {
	roots *x509.CertPool
	mu    sync.Mutex
	keys  map[string]trusted
}

type trusted struct {
	owner string
	key   crypto.PublicKey
}

// maxTrusted bounds the verified certificates kept: a few per cell and
// rotation.
const maxTrusted = 1024

func newTrust(caFile string) (*trust, error) {
	roots, err := tlsconf.CertPool(caFile)
	if err != nil {
		return nil, fmt.Errorf("directory: trust: %w", err)
	}
	return &trust{roots: roots, keys: map[string]trusted{}}, nil
}

// errUnknownCert: the signer's certificate is not in the bucket.
var errUnknownCert = errors.New("directory: the signer's certificate is not in the bucket")

// key returns the public key of owner's certificate id, fetching its
// chain with fetch (nil when it is not there) and verifying it once.
func (t *trust) key(owner, id string, fetch func() ([]byte, error)) (crypto.PublicKey, error) {
	t.mu.Lock()
	k, ok := t.keys[id]
	t.mu.Unlock()
	if ok {
		if k.owner != owner {
			return nil, fmt.Errorf("directory: certificate %s is %s's, not %s's", id, k.owner, owner)
		}
		return k.key, nil
	}
	b, err := fetch()
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, errUnknownCert
	}
	chain, err := decodeChain(b)
	if err != nil {
		return nil, err
	}
	leaf := chain[0]
	if certID(leaf.Raw) != id {
		return nil, fmt.Errorf("directory: certificate %s: the chain stored holds another (%s)", id, certID(leaf.Raw))
	}
	if got := hop.CertIdentity(leaf); got != hop.Cell(owner) {
		return nil, fmt.Errorf("directory: certificate %s: identity %q, not %s's", id, got, owner)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	// An entry outlives the certificate that signed it (entries are kept
	// for the idempotency window, certificates renewed within theirs): the
	// chain is verified as of the leaf's start: valid then, it was when it
	// signed.
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: t.roots, Intermediates: inter, CurrentTime: leaf.NotBefore.Add(time.Second),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("directory: certificate %s: %w", id, err)
	}
	t.mu.Lock()
	if len(t.keys) >= maxTrusted {
		clear(t.keys)
	}
	t.keys[id] = trusted{owner: owner, key: leaf.PublicKey}
	t.mu.Unlock()
	return leaf.PublicKey, nil
}

// verifySig reports whether sig is key's signature of payload for bucket key
// k.
func verifySig(pub crypto.PublicKey, k string, payload, sig []byte) bool {
	return certsig.Verify(pub, digest(k, payload), sig)
}
