// Package refusals keeps a GTR replica's recent refusals by request ID, so
// that an operator finds what a partner quotes from an error (its
// reference, the ErrorInfo's request_id) without the logs: `gtrctl ref`
// and the console's search, across every replica (package replicas).
//
// It is a bounded ring: the last Size refusals, whatever made them (the
// tap's authentication and limits, the interceptors, REST, a platform
// error). Under a flood the oldest go first; the logs keep what they keep
// at their bounded rate. A write takes one short lock and makes no text:
// the status is kept as it is.
package refusals

import (
	"sync"
	"time"

	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/pkg/api/apierr"
)

// Size is how many refusals a replica keeps.
const Size = 4096

// Refusal is one refused call, as a replica answered it.
type Refusal struct {
	// Replica is the replica that answered it, in a search across
	// replicas (Find leaves it empty: the ring is one replica's).
	Replica       string    `json:"replica,omitempty"`
	RequestID     string    `json:"request_id"`
	Time          time.Time `json:"time"`
	Method        string    `json:"method"`
	PartnerID     string    `json:"partner_id,omitempty"`
	TransactionID string    `json:"transaction_id,omitempty"`
	Code          string    `json:"code"`
	Reason        string    `json:"reason,omitempty"`
	// Message is the status's message with any card number masked.
	Message string `json:"message"`
}

type entry struct {
	at                     time.Time
	id, method, partner, t string
	st                     *status.Status
}

// Ring holds the recent refusals. The zero value is not usable; use New.
type Ring struct {
	now func() time.Time

	mu   sync.Mutex
	buf  [Size]entry
	next int
	byID map[string]int // request ID → place in buf
}

// New returns an empty ring; now is the clock (nil: time.Now).
func New(now func() time.Time) *Ring {
	if now == nil {
		now = time.Now
	}
	return &Ring{now: now, byID: make(map[string]int, Size)}
}

// Add records a refusal: its request ID, the method (gRPC's full name, or
// REST's "METHOD /path"), the partner and transaction when known, and the
// status answered. An empty ID is not recorded. It must not block.
func (r *Ring) Add(id, method, partner, transactionID string, st *status.Status) {
	if r == nil || id == "" {
		return
	}
	at := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.buf[r.next]; old.id != "" && r.byID[old.id] == r.next {
		delete(r.byID, old.id)
	}
	r.buf[r.next] = entry{at: at, id: id, method: method, partner: partner, t: transactionID, st: st}
	r.byID[id] = r.next
	r.next = (r.next + 1) % Size
}

// Find returns the refusal answered under request ID id, if this replica
// still holds it.
func (r *Ring) Find(id string) (Refusal, bool) {
	r.mu.Lock()
	i, ok := r.byID[id]
	var e entry
	if ok {
		e = r.buf[i]
	}
	r.mu.Unlock()
	if !ok {
		return Refusal{}, false
	}
	reason := apierr.ReasonOf(e.st.Err())
	if reason == "" {
		reason = apierr.ForCode(e.st.Code())
	}
	return Refusal{RequestID: e.id, Time: e.at, Method: e.method, PartnerID: e.partner, TransactionID: e.t,
		Code: e.st.Code().String(), Reason: string(reason), Message: card.MaskIn(e.st.Message())}, true
}
