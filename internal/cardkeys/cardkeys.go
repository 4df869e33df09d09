// Package cardkeys derives the keys a cell computes card data under from
// its master secret, and holds them in a key ring so that they can rotate.
//
// Two keys come from each master, with HKDF-SHA256 and distinct info
// strings: one for the PAN hash (per-card velocity checks, internal/card)
// and one for the payload fingerprint (replays, pkg/idempotency). Each
// key has a key ID, which rows and directory entries store beside what the
// key computed. A key ID is the first 4 bytes, in hex, of HMAC-SHA256 of
// a fixed label under the key it names: stable, the same in every cell
// with the same master (fingerprints are compared across cells through the
// transaction directory), and no key material: it is one output of a PRF
// under the key, from which neither the key nor the master follow.
//
// The ring holds the current master, whose keys compute everything new,
// and previous masters, whose keys are only read: velocity counts a card's
// rows under every key of the ring, and a replay's payload is
// fingerprinted under the key its record names. Rows from before key IDs
// (issue #18) name LegacyKeyID: they were computed with a master itself,
// before derivation, and the ring resolves that ID to its oldest master
// used as it is. A master can leave the ring once its rows have aged out of
// the velocity window and the idempotency window (7 days): a replay of a
// record under a key no longer in the ring cannot be compared and answers
// ALREADY_EXISTS.
//
// This package never logs, and its errors and IDs never hold key bytes.
package cardkeys

import (
	"bytes"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// LegacyKeyID names a master secret used as it is, the scheme before key
// derivation; see the package comment.
const LegacyKeyID = "legacy"

// MinMasterLen is the shortest master secret accepted, in bytes.
const MinMasterLen = 32

// The HKDF parameters. Changing any of them changes every key: it is a
// rotation, and needs a new version in the info strings.
const (
	salt            = "cellpay card data keys"
	infoPANHash     = "cellpay pan hash v1"
	infoFingerprint = "cellpay payload fingerprint v1"
	idLabel         = "cellpay key id v1"
)

// Key IDs carry a prefix that says which kind of key they name.
const (
	panPrefix = "pan-"
	fpPrefix  = "fp-"
)

type keys struct {
	panID string
	pan   *card.Hasher
	fpID  string
	fp    *idempotency.Fingerprinter
}

// Ring is a cell's card data keys: the current master's and the previous
// masters'. It is immutable and safe for concurrent use.
type Ring struct {
	ring []keys // current first, then previous, then the legacy keys
	fps  map[string]*idempotency.Fingerprinter
}

// New returns the ring of masters: the current one first, then previous
// ones, newest first. Each master is at least MinMasterLen bytes, and no
// two are equal.
func New(masters ...[]byte) (*Ring, error) {
	if len(masters) == 0 {
		return nil, errors.New("cardkeys: no master secret")
	}
	r := &Ring{fps: map[string]*idempotency.Fingerprinter{}}
	for i, m := range masters {
		if len(m) < MinMasterLen {
			return nil, fmt.Errorf("cardkeys: master %d: %d bytes, at least %d", i+1, len(m), MinMasterLen)
		}
		for j := range i {
			if bytes.Equal(masters[j], m) {
				return nil, fmt.Errorf("cardkeys: master %d: the same as master %d", i+1, j+1)
			}
		}
		k, err := derive(m)
		if err != nil {
			return nil, fmt.Errorf("cardkeys: master %d: %w", i+1, err)
		}
		if err := r.add(k); err != nil {
			return nil, fmt.Errorf("cardkeys: master %d: %w", i+1, err)
		}
	}
	oldest := masters[len(masters)-1]
	legacy := keys{panID: LegacyKeyID, pan: card.NewHasher(oldest), fpID: LegacyKeyID, fp: idempotency.NewFingerprinter(oldest)}
	if err := r.add(legacy); err != nil {
		return nil, fmt.Errorf("cardkeys: legacy keys: %w", err)
	}
	return r, nil
}

func (r *Ring) add(k keys) error {
	if _, dup := r.fps[k.fpID]; dup {
		return fmt.Errorf("key ID %s is already in the ring", k.fpID)
	}
	for _, o := range r.ring {
		if o.panID == k.panID {
			return fmt.Errorf("key ID %s is already in the ring", k.panID)
		}
	}
	r.ring = append(r.ring, k)
	r.fps[k.fpID] = k.fp
	return nil
}

// derive computes master's two keys and their IDs.
func derive(master []byte) (keys, error) {
	pan, err := hkdf.Key(sha256.New, master, []byte(salt), infoPANHash, 32)
	if err != nil {
		return keys{}, err
	}
	fp, err := hkdf.Key(sha256.New, master, []byte(salt), infoFingerprint, 32)
	if err != nil {
		return keys{}, err
	}
	return keys{
		panID: panPrefix + keyID(pan), pan: card.NewHasher(pan),
		fpID: fpPrefix + keyID(fp), fp: idempotency.NewFingerprinter(fp),
	}, nil
}

func keyID(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(idLabel))
	return hex.EncodeToString(m.Sum(nil)[:4])
}

// PANHashKeyID and FingerprintKeyID are the IDs of the current keys.
func (r *Ring) PANHashKeyID() string     { return r.ring[0].panID }
func (r *Ring) FingerprintKeyID() string { return r.ring[0].fpID }

// PANHashes returns pan's hash under every PAN key of the ring, the
// current key first: what a new row stores, and what velocity matches.
func (r *Ring) PANHashes(pan string) []card.KeyedHash {
	out := make([]card.KeyedHash, len(r.ring))
	for i, k := range r.ring {
		out[i] = card.KeyedHash{KeyID: k.panID, Sum: k.pan.Hash(pan)}
	}
	return out
}

// Fingerprint returns req's fingerprint under the current key.
func (r *Ring) Fingerprint(req *cellpayv1.SubmitTransactionRequest) idempotency.Fingerprint {
	return r.ring[0].fp.Of(req)
}

// FingerprintUnder returns req's fingerprint under the key named keyID,
// or false when that key is not in the ring.
func (r *Ring) FingerprintUnder(keyID string, req *cellpayv1.SubmitTransactionRequest) (idempotency.Fingerprint, bool) {
	f, ok := r.fps[keyID]
	if !ok {
		return idempotency.Fingerprint{}, false
	}
	return f.Of(req), true
}

// KeyIDs lists the ring's key IDs, current first, for logs and operators.
func (r *Ring) KeyIDs() []string {
	var out []string
	for _, k := range r.ring {
		if k.panID == LegacyKeyID {
			continue
		}
		out = append(out, k.panID, k.fpID)
	}
	return out
}

// Parse reads masters from a key file: one hex master per line, the
// current one first, then previous ones newest first. Blank lines and
// lines starting with '#' are skipped. Errors name the line, never its
// content.
func Parse(text []byte) ([][]byte, error) {
	var out [][]byte
	for i, line := range strings.Split(string(text), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m, err := hex.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("cardkeys: line %d: not hex", i+1)
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil, errors.New("cardkeys: no master secret")
	}
	return out, nil
}
