package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/webhook"
)

// Callback is one final outcome a cell told the partner of.
type Callback struct {
	// ID is the event's ID, the same on every delivery of it: the key to
	// drop duplicates by (deliveries are at least once).
	ID   string
	Type string // webhook.EventTypeFinal
	// Recorded is when the outcome was recorded; Sent when this delivery
	// was signed.
	Recorded, Sent time.Time
	// Transaction is the outcome, as GetTransaction would answer it.
	Transaction *cellpayv1.Transaction
}

// CallbackConfig configures CallbackHandler. Secrets and Handle are
// required.
type CallbackConfig struct {
	// Secrets returns the partner's signing secrets (whsec_...); a
	// delivery signed by any of them is taken, so that a rotation needs no
	// downtime: add the new one, then drop the old.
	Secrets func() []string
	// Handle takes a verified, first-seen event. An error answers 500 and
	// the cell retries; nil answers 204 and the event's ID is remembered.
	Handle func(ctx context.Context, cb Callback) error
	// Tolerance is how far a delivery's timestamp may be from Now
	// [webhook.DefaultTolerance, 5 min]: an older one is refused as a
	// replay.
	Tolerance time.Duration
	// MaxSeen bounds the event IDs remembered to drop duplicates [100000],
	// oldest forgotten first. The memory is this process's: a partner
	// with several receivers makes Handle idempotent by ID too.
	MaxSeen int
	// MaxBody bounds a delivery's body [1 MiB].
	MaxBody int64
	Now     func() time.Time // [time.Now]
}

// CallbackHandler returns an http.Handler that receives Cellpay's
// callbacks: it refuses what is not a POST (405), too large (413), badly
// signed or outside the timestamp tolerance (401), or malformed (400);
// answers a duplicate of an event already handled with 200 without handing
// it on again (and one still being handled with 409, to be retried); and
// hands every other event to cfg.Handle.
func CallbackHandler(cfg CallbackConfig) (http.Handler, error) {
	if cfg.Secrets == nil || cfg.Handle == nil {
		return nil, errors.New("client: CallbackHandler needs Secrets and Handle")
	}
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = webhook.DefaultTolerance
	}
	if cfg.MaxSeen <= 0 {
		cfg.MaxSeen = 100_000
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 1 << 20
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &callbackHandler{cfg: cfg, seen: map[string]bool{}}, nil
}

type callbackHandler struct {
	cfg CallbackConfig
	mu  sync.Mutex
	// seen: true once handled, false while being handled. order is the
	// handled IDs oldest first, bounded by MaxSeen.
	seen  map[string]bool
	order []string
}

func (h *callbackHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBody))
	if err != nil {
		http.Error(w, "body too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	id, sent, err := webhook.Verify(r.Header, body, h.cfg.Secrets(), h.cfg.Now(), h.cfg.Tolerance)
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized) // webhook's errors quote no secret
		return
	}
	var ev webhook.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, "malformed event", http.StatusBadRequest)
		return
	}
	txn := &cellpayv1.Transaction{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(ev.Data, txn); err != nil {
		http.Error(w, "malformed event data", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	done, known := h.seen[id]
	if !known {
		h.seen[id] = false
	}
	h.mu.Unlock()
	switch {
	case known && done:
		w.WriteHeader(http.StatusOK) // a duplicate: already handled
		return
	case known:
		http.Error(w, "this event is being handled", http.StatusConflict)
		return
	}
	err = h.cfg.Handle(r.Context(), Callback{ID: id, Type: ev.Type, Recorded: ev.Timestamp, Sent: sent, Transaction: txn})
	h.mu.Lock()
	if err != nil {
		delete(h.seen, id)
	} else {
		h.seen[id] = true
		h.order = append(h.order, id)
		if len(h.order) > h.cfg.MaxSeen {
			delete(h.seen, h.order[0])
			h.order = h.order[1:]
		}
	}
	h.mu.Unlock()
	if err != nil {
		http.Error(w, "not handled", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
