package issuersim

import (
	"cmp"
	"crypto/sha256"
	"hash/maphash"
	"slices"
	"sync"
	"time"
)

// Lock order: ledger shard locks are leaf locks, never held while taking
// another lock. A record's lock may be held while taking a card shard's
// lock (applying an effect), never the reverse.

// shardCount spreads transactions and cards over independent locks so that
// unrelated transactions do not contend.
const shardCount = 64

// txnKey identifies a transaction: transaction IDs are a namespace per
// partner, so the same ID from two partners is two transactions.
type txnKey struct {
	partner string
	id      string
}

func compareKeys(a, b txnKey) int {
	return cmp.Or(cmp.Compare(a.partner, b.partner), cmp.Compare(a.id, b.id))
}

// outcome is a recorded decision. It is immutable once stored.
type outcome struct {
	approved bool
	authCode string
	reason   string
}

// record is what the issuer knows about one transaction. outcome and
// closed are never both set: whichever of an Authorize's apply and an
// Inquire's close takes mu first decides which.
type record struct {
	mu       sync.Mutex
	outcome  *outcome // nil until an effect is applied
	closed   bool     // closed by an inquiry before any outcome; then never applied
	effects  int64    // incremented each time an outcome is applied
	requests int64    // Authorize calls that passed validation
}

// ledger maps transactions, by partner and transaction ID, to records.
type ledger struct {
	seed   maphash.Seed
	shards [shardCount]ledgerShard
}

type ledgerShard struct {
	mu sync.Mutex
	m  map[txnKey]*record
}

func newLedger() *ledger {
	l := &ledger{seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].m = make(map[txnKey]*record)
	}
	return l
}

func (l *ledger) shard(k txnKey) *ledgerShard {
	return &l.shards[maphash.Comparable(l.seed, k)%shardCount]
}

// get returns the record for k, or nil.
func (l *ledger) get(k txnKey) *record {
	s := l.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[k]
}

// getOrCreate returns the record for k, creating an empty one if needed.
func (l *ledger) getOrCreate(k txnKey) *record {
	s := l.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.m[k]
	if !ok {
		r = &record{}
		s.m[k] = r
	}
	return r
}

// keys returns every known transaction, sorted by partner, then ID.
func (l *ledger) keys() []txnKey {
	var keys []txnKey
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for k := range s.m {
			keys = append(keys, k)
		}
		s.mu.Unlock()
	}
	slices.SortFunc(keys, compareKeys)
	return keys
}

// counts returns a record's effect and request counts; zeros for nil.
func (r *record) counts() (effects, requests int64) {
	if r == nil {
		return 0, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.effects, r.requests
}

// cardKey identifies a card without keeping its PAN in memory.
type cardKey [sha256.Size]byte

// cards holds each card's cumulative approved amount.
type cards struct {
	shards [shardCount]struct {
		mu    sync.Mutex
		spent map[cardKey]int64
	}
}

func newCards() *cards {
	c := &cards{}
	for i := range c.shards {
		c.shards[i].spent = make(map[cardKey]int64)
	}
	return c
}

// decide runs the rules for r against the card's current total and, for an
// approved non-refund, adds the amount to it, atomically per card.
func (c *cards) decide(r request, lim limits, now time.Time) (approved bool, reason string) {
	key := cardKey(sha256.Sum256([]byte(r.pan)))
	s := &c.shards[int(key[0])%shardCount]
	s.mu.Lock()
	defer s.mu.Unlock()
	r.approvedSpent = s.spent[key]
	approved, reason = decide(r, lim, now)
	if approved && !r.refund {
		s.spent[key] += r.amount
	}
	return approved, reason
}
