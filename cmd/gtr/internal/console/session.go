package console

import (
	"crypto/rand"
	"encoding/base64"
	"sync"
	"time"

	"github.com/cellpay/cellpay/internal/operators"
)

// session is one logged-in browser. The operator's token stays here, in
// the GTR's memory, never in the page: the console calls the Admin API
// with it, so that every call is authenticated and authorized again by the
// API's own interceptors (an operator removed from the operators file is
// turned away at its next call).
type session struct {
	id      string
	op      operators.Operator
	token   string
	created time.Time
	seen    time.Time
}

// sessions holds at most max sessions, each for at most ttl and idle for
// at most idle; a login beyond max evicts the least recently used one
// (only a holder of a valid token can log in, and a login must not be
// locked out by stale sessions).
type sessions struct {
	max       int
	ttl, idle time.Duration
	now       func() time.Time

	mu sync.Mutex
	m  map[string]*session
}

func newSessions(max int, ttl, idle time.Duration, now func() time.Time) *sessions {
	return &sessions{max: max, ttl: ttl, idle: idle, now: now, m: map[string]*session{}}
}

func (s *sessions) expired(x *session, now time.Time) bool {
	return now.Sub(x.created) >= s.ttl || now.Sub(x.seen) >= s.idle
}

// create starts a session for op, whose token is tok.
func (s *sessions) create(op operators.Operator, tok string) *session {
	now := s.now()
	x := &session{id: newID(), op: op, token: tok, created: now, seen: now}
	s.mu.Lock()
	defer s.mu.Unlock()
	var lru *session
	for id, o := range s.m {
		if s.expired(o, now) {
			delete(s.m, id)
			continue
		}
		if lru == nil || o.seen.Before(lru.seen) {
			lru = o
		}
	}
	if len(s.m) >= s.max && lru != nil {
		delete(s.m, lru.id)
	}
	s.m[x.id] = x
	return x
}

// get returns the live session id names, and marks it seen.
func (s *sessions) get(id string) (session, bool) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	x, ok := s.m[id]
	if !ok {
		return session{}, false
	}
	if s.expired(x, now) {
		delete(s.m, id)
		return session{}, false
	}
	x.seen = now
	return *x, true
}

func (s *sessions) drop(id string) {
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}

func newID() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand: it crashes the program rather)
	return base64.RawURLEncoding.EncodeToString(b)
}
