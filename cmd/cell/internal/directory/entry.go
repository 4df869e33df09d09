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

// wire is an entry's encoding: JSON, versioned.
type wire struct {
	V           int    `json:"v"`
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

// Encode renders e for the bucket.
func Encode(e Entry) ([]byte, error) {
	if err := check(e); err != nil {
		return nil, err
	}
	w := wire{V: 1, Owner: e.Owner, Call: e.Call, Attempt: e.Attempt, Fingerprint: e.Fingerprint[:],
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

// Decode parses an entry read from the bucket. Any data is refused with an
// error naming the field, never a panic.
func Decode(b []byte) (Entry, error) {
	if len(b) > MaxEncoded {
		return Entry{}, fmt.Errorf("directory: entry of %d bytes, at most %d", len(b), MaxEncoded)
	}
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return Entry{}, fmt.Errorf("directory: entry: %w", err)
	}
	if w.V != 1 {
		return Entry{}, fmt.Errorf("directory: v: version %d is not 1", w.V)
	}
	if len(w.Fingerprint) != len(idempotency.Fingerprint{}) {
		return Entry{}, fmt.Errorf("directory: fp: %d bytes, want %d", len(w.Fingerprint), len(idempotency.Fingerprint{}))
	}
	e := Entry{Owner: w.Owner, Call: w.Call, Attempt: w.Attempt, FingerprintKeyID: w.FingerprintKey, State: w.State, Pinned: w.Pinned}
	if e.FingerprintKeyID == "" {
		e.FingerprintKeyID = cardkeys.LegacyKeyID
	}
	copy(e.Fingerprint[:], w.Fingerprint)
	if len(w.Answer) > 0 {
		if len(w.Answer) > maxAnswerLen {
			return Entry{}, fmt.Errorf("directory: answer: %d bytes, at most %d", len(w.Answer), maxAnswerLen)
		}
		e.Answer = &cellpayv1.Transaction{}
		if err := proto.Unmarshal(w.Answer, e.Answer); err != nil {
			return Entry{}, fmt.Errorf("directory: answer: %w", err)
		}
	}
	if err := check(e); err != nil {
		return Entry{}, err
	}
	return e, nil
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
