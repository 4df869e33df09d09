package issuersim

import (
	"cmp"
	"crypto/sha256"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/cellpay/cellpay/internal/followup"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// Lock order: ledger shard locks are leaf locks, never held while taking
// another lock. A record's lock may be held while taking a card shard's
// lock (applying an authorization), an authorizations shard's lock (an
// approved authorization adds its ledger; an adjustment looks one up) or
// an authorization's lock (applying an adjustment), never the reverse.
// Card shard, authorizations shard and authorization locks are leaf locks.
// An adjustment never takes its original's record lock: an adjustment's
// ID may be another's original, and two records' locks would make a cycle.

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
	// kind is UNSPECIFIED for an authorization; an adjustment's kind and
	// original otherwise.
	kind     issuerproto.AdjustKind
	original string
	// amount and currency are what the approval applied: zero and empty
	// for a decline. A void's amount is the authorization it released.
	amount   int64
	currency string
	// requested and requestedCurrency are what the request asked for,
	// approved or declined.
	requested         int64
	requestedCurrency string
	// refund and bankTransfer say which kind of authorization it was.
	refund, bankTransfer bool
	// at is when it was applied (the issuer's clock), and terminal the
	// terminal_id of the request that applied it.
	at       time.Time
	terminal string
}

// record is what the issuer knows about one transaction. outcome and
// closed are never both set: whichever of an Authorize's apply and an
// Inquire's close takes mu first decides which.
type record struct {
	mu       sync.Mutex
	outcome  *outcome // nil until an effect is applied
	closed   bool     // closed by an inquiry before any outcome; then never applied
	effects  int64    // incremented each time an outcome is applied
	requests int64    // Authorize and Adjust calls that passed validation
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
// len returns how many transactions the ledger holds.
func (l *ledger) len() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

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

// snapshot returns a record's effect and request counts and its outcome
// (the zero outcome without one); zeros for nil.
func (r *record) snapshot() (effects, requests int64, o outcome) {
	if r == nil {
		return 0, 0, outcome{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.outcome != nil {
		o = *r.outcome
	}
	return r.effects, r.requests, o
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

// authorization is the issuer's ledger of one approved card authorization:
// what its adjustments may still do.
type authorization struct {
	currency string // immutable
	mu       sync.Mutex
	ledger   followup.Ledger // under mu
}

// authorizations maps approved card authorizations, by partner and
// transaction ID, to their ledgers. An entry is added when the
// authorization's outcome is recorded, under its record's lock, so an
// adjustment finds it once any caller could have learnt the approval.
type authorizations struct {
	seed   maphash.Seed
	shards [shardCount]struct {
		mu sync.Mutex
		m  map[txnKey]*authorization
	}
}

func newAuthorizations() *authorizations {
	a := &authorizations{seed: maphash.MakeSeed()}
	for i := range a.shards {
		a.shards[i].m = make(map[txnKey]*authorization)
	}
	return a
}

// add records k as an approved authorization of amount in currency. An
// authorization's outcome is recorded once, so k is never added twice.
func (a *authorizations) add(k txnKey, amount int64, currency string) {
	s := &a.shards[maphash.Comparable(a.seed, k)%shardCount]
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[k] = &authorization{currency: currency, ledger: followup.Ledger{Authorized: amount}}
}

// get returns k's authorization, or nil when k is no approved card
// authorization.
func (a *authorizations) get(k txnKey) *authorization {
	s := &a.shards[maphash.Comparable(a.seed, k)%shardCount]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[k]
}
