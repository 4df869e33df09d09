// Package idempotency holds the rules that make (partner, transaction ID) an
// idempotency key: which transaction IDs are valid, how a payload is
// fingerprinted, and when a replay is the same request or a conflict.
//
// A partner chooses the transaction ID, and transaction IDs are a namespace
// per partner: two partners that send the same ID send two transactions. The
// Key travels unchanged through retries and re-routes, and every place that
// keeps a first result (the GTR's coalescing, each cell's store, the issuer)
// looks it up by Key and compares payloads by fingerprint: the same Key and
// payload is a replay and gets the first answer; the same Key with another
// payload is a conflict (ErrConflict, ALREADY_EXISTS at the edge).
package idempotency

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// MaxKeyLen is the longest valid transaction ID.
const MaxKeyLen = 64

// Key identifies one transaction: the partner that sent it and the
// transaction ID it chose. It is comparable, for use as a map key. The
// zero Key identifies nothing.
type Key struct {
	PartnerID     string
	TransactionID string
}

// KeyOf is the Key of req.
func KeyOf(req *cellpayv1.SubmitTransactionRequest) Key {
	return Key{PartnerID: req.GetPartnerId(), TransactionID: req.GetTransactionId()}
}

// String renders k for logs and messages as partner/transaction_id (neither
// part can hold a slash once validated).
func (k Key) String() string { return k.PartnerID + "/" + k.TransactionID }

// ErrConflict means a key was reused with a different payload.
var ErrConflict = errors.New("idempotency: transaction ID reused with a different payload")

// ValidateKey checks that id is 1 to 64 characters of [A-Za-z0-9._-]: the
// rule for a transaction ID, and for a partner ID.
func ValidateKey(id string) error {
	if id == "" {
		return errors.New("is required")
	}
	if len(id) > MaxKeyLen {
		return fmt.Errorf("is %d characters, at most %d allowed", len(id), MaxKeyLen)
	}
	for i := 0; i < len(id); i++ {
		if !keyByte(id[i]) {
			return fmt.Errorf("has a character outside [A-Za-z0-9._-] at position %d", i)
		}
	}
	return nil
}

func keyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == '-'
}

// Fingerprint identifies a request payload. Two requests are the same payload
// exactly when their fingerprints are equal.
type Fingerprint [sha256.Size]byte

// Fingerprinter computes payload fingerprints under a secret key, so that a
// stored fingerprint (it covers the PAN) cannot be reversed by enumerating
// card numbers. Fingerprints from different keys are not comparable. A
// Fingerprinter is safe for concurrent use; it keeps its keyed hashes in a
// pool, so that Of allocates nothing once warm (it runs once per
// transaction on the GTR's path).
type Fingerprinter struct {
	key  []byte
	pool sync.Pool // of *fieldWriter, its hash keyed with key
}

// NewFingerprinter returns a Fingerprinter for key.
func NewFingerprinter(key []byte) *Fingerprinter {
	f := &Fingerprinter{key: append([]byte(nil), key...)}
	f.pool.New = func() any { return &fieldWriter{h: hmac.New(sha256.New, f.key)} }
	return f
}

// Of returns the fingerprint of every field of req that defines the
// payment. Fields are written in a fixed order, each length-prefixed, so
// that no two different payloads encode alike.
func (f *Fingerprinter) Of(req *cellpayv1.SubmitTransactionRequest) Fingerprint {
	w := f.pool.Get().(*fieldWriter)
	defer f.pool.Put(w)
	w.h.Reset()
	w.str(req.GetTransactionId())
	w.num(int64(req.GetPaymentType()))
	w.str(req.GetPartnerId())
	w.str(req.GetMarket())
	w.num(req.GetAmount().GetMinorUnits())
	w.str(req.GetAmount().GetCurrency())
	w.str(req.GetMerchant().GetId())
	w.str(req.GetMerchant().GetMcc())
	w.str(req.GetMerchant().GetCountry())
	if c := req.GetCard(); c != nil {
		w.num(1)
		w.str(c.GetPan())
		w.num(int64(c.GetExpiryMonth()))
		w.num(int64(c.GetExpiryYear()))
	} else {
		w.num(0)
	}
	var fp Fingerprint
	copy(fp[:], w.h.Sum(w.sum[:0]))
	clear(w.chunk[:]) // the PAN passed through it
	return fp
}

// fieldWriter writes length-prefixed fields to h through buffers of its
// own: a string converted to a slice for the hash's Write would be a
// copy on the heap each time.
type fieldWriter struct {
	h     hash.Hash
	buf   [binary.MaxVarintLen64]byte
	chunk [64]byte
	sum   [sha256.Size]byte
}

func (w *fieldWriter) num(v int64) {
	n := binary.PutVarint(w.buf[:], v)
	w.h.Write(w.buf[:n])
}

func (w *fieldWriter) str(s string) {
	w.num(int64(len(s)))
	for len(s) > 0 {
		n := copy(w.chunk[:], s)
		w.h.Write(w.chunk[:n])
		s = s[n:]
	}
}

// Check applies the conflict rule to a request whose key already has a
// record with fingerprint first: nil for a replay of the same payload,
// ErrConflict for another payload.
func Check(first, replay Fingerprint) error {
	if first != replay {
		return ErrConflict
	}
	return nil
}
