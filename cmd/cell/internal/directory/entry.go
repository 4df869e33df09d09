// Package directory is a cell's client of the transaction directory: the
// NATS JetStream key-value bucket that records, for every transaction
// (partner and transaction ID), which cell owns it and, once known, its
// answer. docs/design/transaction-directory.md has the rule it serves:
// a cell decides a transaction only while it owns its entry, and every
// other cell answers from the entry or sends the transaction to its owner.
//
// Claims and the reconciler's FAILED are compare-and-set operations on one
// key (JetStream KV Create and Update at a revision), so "first claim wins"
// is decided by NATS, never by a cell. Updates of an entry's state after a
// claim (abandoned, final) are best effort: no rule depends on them.
package directory

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/internal/cardkeys"
	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// Entry and its states are the orchestrator's: the directory stores what
// the machine decides with.
type (
	Entry = cellside.Entry
	State = cellside.EntryState
)

const (
	Owned     = cellside.EntryOwned
	Abandoned = cellside.EntryAbandoned
	Final     = cellside.EntryFinal
)

// Bounds on an entry's fields, so that a decoded entry is small.
const (
	maxIDLen     = 64
	maxAnswerLen = 8 << 10
	maxSigLen    = 256
	// MaxEncoded bounds an encoded entry.
	MaxEncoded = 12 << 10
)

// Key is the bucket key of transaction k: a hash, so that any partner and
// transaction ID make a valid key of bounded length.
func Key(k idempotency.Key) string {
	h := sha256.New()
	h.Write([]byte(k.PartnerID))
	h.Write([]byte{0})
	h.Write([]byte(k.TransactionID))
	return "t." + hex.EncodeToString(h.Sum(nil)[:16])
}

// wire is an entry's encoding: JSON, versioned. K is the bucket key it
// was written for, so that an entry copied under another key is not
// taken for that key's.
type wire struct {
	V           int    `json:"v"`
	K           string `json:"k"`
	Owner       string `json:"owner"`
	Call        string `json:"call,omitempty"`
	Attempt     int32  `json:"attempt,omitempty"`
	Fingerprint []byte `json:"fp"`
	// FingerprintKey names the key fp was computed under; an entry written
	// before key IDs has none, and its fp is under the legacy key.
	FingerprintKey string `json:"fk,omitempty"`
	State          State  `json:"state"`
	Pinned         bool   `json:"pinned,omitempty"`
	Answer         []byte `json:"answer,omitempty"` // cellpay.v1.Transaction, binary
}

// envelope is what the bucket holds: an entry's encoding (E, kept as its
// bytes), and its owner's signature over them (S) with the ID of the
// certificate that made it (C). Both are empty where the directory runs
// unsigned (plaintext NATS: tests and benchmarks).
type envelope struct {
	E json.RawMessage `json:"e"`
	C string          `json:"c,omitempty"`
	S []byte          `json:"s,omitempty"`
}

// version is the encoding's: 2 since entries are signed. A reader takes no
// other (an entry of version 1 carries no signature).
const version = 2

// Sealed is an entry as read from the bucket, decoded but not verified:
// the key it names, its bytes, and its signature.
type Sealed struct {
	Entry   Entry
	Key     string
	CertID  string
	Sig     []byte
	Payload []byte
}

// encodeEntry renders e for bucket key k: the bytes its signature covers.
func encodeEntry(k string, e Entry) ([]byte, error) {
	if err := check(e); err != nil {
		return nil, err
	}
	w := wire{V: version, K: k, Owner: e.Owner, Call: e.Call, Attempt: e.Attempt, Fingerprint: e.Fingerprint[:],
		FingerprintKey: e.FingerprintKeyID, State: e.State, Pinned: e.Pinned}
	if e.Answer != nil {
		b, err := proto.Marshal(e.Answer)
		if err != nil {
			return nil, fmt.Errorf("directory: answer: %w", err)
		}
		w.Answer = b
	}
	return json.Marshal(w)
}

// Seal renders payload (encodeEntry's) with its signature sig by
// certificate certID (both empty: unsigned).
func Seal(payload []byte, certID string, sig []byte) ([]byte, error) {
	return json.Marshal(envelope{E: payload, C: certID, S: sig})
}

// Decode parses an entry read from the bucket, without verifying its
// signature. Any data is refused with an error naming the field, never a
// panic.
func Decode(b []byte) (Sealed, error) {
	if len(b) > MaxEncoded {
		return Sealed{}, fmt.Errorf("directory: entry of %d bytes, at most %d", len(b), MaxEncoded)
	}
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return Sealed{}, fmt.Errorf("directory: entry: %w", err)
	}
	if len(env.C) > maxIDLen {
		return Sealed{}, fmt.Errorf("directory: c: longer than %d bytes", maxIDLen)
	}
	if len(env.S) > maxSigLen {
		return Sealed{}, fmt.Errorf("directory: s: %d bytes, at most %d", len(env.S), maxSigLen)
	}
	var w wire
	if err := json.Unmarshal(env.E, &w); err != nil {
		return Sealed{}, fmt.Errorf("directory: e: %w", err)
	}
	if w.V != version {
		return Sealed{}, fmt.Errorf("directory: v: version %d is not %d", w.V, version)
	}
	if w.K == "" || len(w.K) > maxIDLen {
		return Sealed{}, fmt.Errorf("directory: k: %q is not a bucket key (1 to %d bytes)", w.K, maxIDLen)
	}
	if len(w.Fingerprint) != len(idempotency.Fingerprint{}) {
		return Sealed{}, fmt.Errorf("directory: fp: %d bytes, want %d", len(w.Fingerprint), len(idempotency.Fingerprint{}))
	}
	e := Entry{Owner: w.Owner, Call: w.Call, Attempt: w.Attempt, FingerprintKeyID: w.FingerprintKey, State: w.State, Pinned: w.Pinned}
	if e.FingerprintKeyID == "" {
		e.FingerprintKeyID = cardkeys.LegacyKeyID
	}
	copy(e.Fingerprint[:], w.Fingerprint)
	if len(w.Answer) > 0 {
		if len(w.Answer) > maxAnswerLen {
			return Sealed{}, fmt.Errorf("directory: answer: %d bytes, at most %d", len(w.Answer), maxAnswerLen)
		}
		e.Answer = &cellpayv1.Transaction{}
		if err := proto.Unmarshal(w.Answer, e.Answer); err != nil {
			return Sealed{}, fmt.Errorf("directory: answer: %w", err)
		}
	}
	if err := check(e); err != nil {
		return Sealed{}, err
	}
	return Sealed{Entry: e, Key: w.K, CertID: env.C, Sig: env.S, Payload: env.E}, nil
}

func check(e Entry) error {
	switch {
	case e.Owner == "" || len(e.Owner) > maxIDLen:
		return fmt.Errorf("directory: owner: %q is not a cell ID (1 to %d bytes)", e.Owner, maxIDLen)
	case len(e.Call) > maxIDLen:
		return fmt.Errorf("directory: call: longer than %d bytes", maxIDLen)
	case len(e.FingerprintKeyID) > maxIDLen:
		return fmt.Errorf("directory: fk: longer than %d bytes", maxIDLen)
	case e.Attempt < 0:
		return fmt.Errorf("directory: attempt: %d is negative", e.Attempt)
	}
	switch e.State {
	case Owned, Abandoned:
		if e.Answer != nil {
			return fmt.Errorf("directory: answer: set on an entry in state %s", e.State)
		}
	case Final:
		if e.Answer == nil {
			return errors.New("directory: answer: missing on a final entry")
		}
	default:
		return fmt.Errorf("directory: state: %q is not owned, abandoned or final", e.State)
	}
	return nil
}
