// Package replicas lets a GTR replica ask every replica, itself included,
// a question and gather their answers, so that what an operator sees is
// the platform's and not one replica's: a refusal found by the reference a
// partner quotes (whichever replica answered the call), the re-routes and
// ejections every replica saw.
//
// The question goes over NATS to cellpay.gtr.ask.<kind>, which every
// replica subscribes to (core NATS, no stream: nothing is kept), and each
// answers to the asker's inbox within the asker's window. A question ends
// as soon as every replica that answered in the last minute has; at least
// every 30 s one waits its whole window, to hear of new replicas. Without NATS, or
// with NATS down, a replica answers alone, and says so: the answer lists
// the replicas that answered. A question and an answer are bounded
// (MaxBody), and so are the answers gathered (MaxReplicas).
package replicas

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/natsauth"
	"github.com/cellpay/cellpay/internal/natsconn"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

// Bounds.
const (
	// MaxReplicas bounds the answers one question gathers.
	MaxReplicas = 64
	// MaxBody bounds a question's and an answer's body, in bytes.
	MaxBody = 256 << 10
	// DefaultWindow is how long a question waits for answers.
	DefaultWindow = 300 * time.Millisecond
)

// Handler answers a question of its kind with a JSON body. It runs on the
// replica asked, for at most the asker's window.
type Handler func(ctx context.Context, question []byte) (json.RawMessage, error)

// Answer is one replica's.
type Answer struct {
	Replica string `json:"replica"`
	// Site is the answering replica's site (its access point's), "" when
	// unnamed.
	Site string          `json:"site,omitempty"`
	Body json.RawMessage `json:"body,omitempty"`
	// Error is the replica's handler's error, if it had one.
	Error string `json:"error,omitempty"`
}

// Config configures a replica's side.
type Config struct {
	// ReplicaID names this replica in its answers. Required.
	ReplicaID string
	// Site names the site of this replica's access point in its answers;
	// "" when unnamed.
	Site string
	// NATSURL and NATSTLS reach NATS as the GTR; without a URL the
	// replica answers alone.
	NATSURL string
	NATSTLS tlsconf.Files
	// Handlers are the questions this replica answers, by kind
	// ([a-z-]+).
	Handlers map[string]Handler
	// Window is how long Ask waits for answers [DefaultWindow].
	Window time.Duration
	Log    *slog.Logger
}

// Replicas is one replica's side: it answers the others' questions and
// asks its own.
type Replicas struct {
	cfg Config
	nc  *nats.Conn

	// known are the replicas that answered lately, and when; a question
	// ends as soon as they all have, but waits its whole window at least
	// every fullEvery, to learn of new ones.
	mu     sync.Mutex
	known  map[string]time.Time
	fullAt time.Time
}

// Learning: a replica silent for forgetAfter is no longer waited for; a
// question waits its whole window at least every fullEvery.
const (
	forgetAfter = time.Minute
	fullEvery   = 30 * time.Second
)

// gtrInbox starts every reply subject a GTR replica may ask with; a
// question answered anywhere else is dropped.
var gtrInbox = natsauth.InboxPrefix(hop.GTR) + "."

// Start answers questions from now on, over NATS when configured. Close
// stops it.
func Start(cfg Config) (*Replicas, error) {
	if cfg.ReplicaID == "" {
		return nil, errors.New("replicas: ReplicaID is required")
	}
	for kind := range cfg.Handlers {
		if kind == "" || strings.Trim(kind, "abcdefghijklmnopqrstuvwxyz-") != "" {
			return nil, fmt.Errorf("replicas: kind %q: want [a-z-]+", kind)
		}
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Replicas{cfg: cfg, known: map[string]time.Time{}}
	if cfg.NATSURL == "" {
		return r, nil
	}
	nc, err := natsconn.Connect(cfg.NATSURL, "gtr replicas "+cfg.ReplicaID, cfg.NATSTLS, nats.NoCallbacksAfterClientClose())
	if err != nil {
		return nil, fmt.Errorf("replicas: %w", err)
	}
	r.nc = nc
	for kind, h := range cfg.Handlers {
		if _, err := nc.Subscribe(natsauth.ReplicasPrefix+kind, r.serve(h)); err != nil {
			nc.Close()
			return nil, fmt.Errorf("replicas: subscribe %s: %w", kind, err)
		}
	}
	return r, nil
}

// Close stops answering.
func (r *Replicas) Close() {
	if r.nc != nil {
		r.nc.Close()
	}
}

func (r *Replicas) serve(h Handler) nats.MsgHandler {
	return func(m *nats.Msg) {
		if !strings.HasPrefix(m.Reply, gtrInbox) {
			return // answers go to a GTR replica's inbox only
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Window)
		defer cancel()
		b, err := json.Marshal(r.answer(ctx, h, m.Data))
		if err != nil || len(b) > MaxBody {
			b, _ = json.Marshal(Answer{Replica: r.cfg.ReplicaID, Site: r.cfg.Site, Error: "answer too large"})
		}
		_ = m.Respond(b)
	}
}

func (r *Replicas) answer(ctx context.Context, h Handler, q []byte) Answer {
	if len(q) > MaxBody {
		return Answer{Replica: r.cfg.ReplicaID, Site: r.cfg.Site, Error: "question too large"}
	}
	body, err := h(ctx, q)
	a := Answer{Replica: r.cfg.ReplicaID, Site: r.cfg.Site, Body: body}
	if err != nil {
		a.Error = err.Error()
	}
	return a
}

// Ask asks every replica question (JSON) of kind and returns their
// answers, ordered by replica, within the window or ctx's deadline,
// whichever is sooner. This replica always answers (in process, when NATS
// does not carry its question). err is set only for a question this
// replica does not know or cannot send; replicas that do not answer are
// simply absent.
func (r *Replicas) Ask(ctx context.Context, kind string, question []byte) ([]Answer, error) {
	h, ok := r.cfg.Handlers[kind]
	if !ok {
		return nil, fmt.Errorf("replicas: no question %q", kind)
	}
	if len(question) > MaxBody {
		return nil, fmt.Errorf("replicas: question of %d bytes, over %d", len(question), MaxBody)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Window)
	defer cancel()
	var out []Answer
	if r.nc != nil && r.nc.IsConnected() {
		out = r.gather(ctx, kind, question)
	}
	if !slices.ContainsFunc(out, func(a Answer) bool { return a.Replica == r.cfg.ReplicaID }) {
		out = append(out, r.answer(ctx, h, question))
	}
	slices.SortFunc(out, func(a, b Answer) int { return strings.Compare(a.Replica, b.Replica) })
	return out, nil
}

// gather publishes the question and collects answers until ctx ends or
// MaxReplicas have answered; one answer per replica is kept.
func (r *Replicas) gather(ctx context.Context, kind string, question []byte) []Answer {
	inbox := r.nc.NewInbox()
	ch := make(chan *nats.Msg, MaxReplicas)
	sub, err := r.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		r.cfg.Log.Warn("replicas: cannot ask", "kind", kind, "error", err)
		return nil
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(MaxReplicas, MaxReplicas*MaxBody)
	if err := r.nc.PublishRequest(natsauth.ReplicasPrefix+kind, inbox, question); err != nil {
		r.cfg.Log.Warn("replicas: cannot ask", "kind", kind, "error", err)
		return nil
	}
	expect, full := r.expected(time.Now())
	var out []Answer
	seen := map[string]bool{}
	defer func() { r.learn(seen, time.Now()) }()
	for len(out) < MaxReplicas {
		select {
		case <-ctx.Done():
			return out
		case m := <-ch:
			var a Answer
			if err := json.Unmarshal(m.Data, &a); err != nil || a.Replica == "" || seen[a.Replica] {
				continue
			}
			seen[a.Replica] = true
			out = append(out, a)
			if !full && len(seen) >= len(expect) && allIn(expect, seen) {
				return out
			}
		}
	}
	return out
}

// expected are the replicas known to answer at now, and whether this
// question must wait its whole window instead (none known, or none waited
// for fullEvery).
func (r *Replicas) expected(now time.Time) ([]string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for id, at := range r.known {
		if now.Sub(at) > forgetAfter {
			delete(r.known, id)
			continue
		}
		out = append(out, id)
	}
	full := len(out) == 0 || now.Sub(r.fullAt) >= fullEvery
	if full {
		r.fullAt = now // one question at a time waits it out
	}
	return out, full
}

// learn notes the replicas that answered.
func (r *Replicas) learn(seen map[string]bool, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range seen {
		if _, ok := r.known[id]; ok || len(r.known) < MaxReplicas {
			r.known[id] = now
		}
	}
}

func allIn(ids []string, seen map[string]bool) bool {
	for _, id := range ids {
		if !seen[id] {
			return false
		}
	}
	return true
}
