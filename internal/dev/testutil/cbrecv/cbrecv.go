// Package cbrecv is a partner's callback receiver for tests: a real HTTPS
// server on a loopback port, verifying with pkg/client's CallbackHandler,
// that a test can make slow, failing, throttling, gone or down, and that
// records every call and every event handled. Like testutil, it must never
// be imported by non-test code.
package cbrecv

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/cellpay/cellpay/pkg/client"
)

// Behaviour is how the receiver answers its n-th call (from 1).
type Behaviour struct {
	// Status, when not 0, is answered without looking at the event.
	Status int
	// RetryAfter is sent with Status, when set.
	RetryAfter string
	// Delay is waited first (bounded by the request's context).
	Delay time.Duration
}

// Receiver is one endpoint. Its methods are safe for concurrent use.
type Receiver struct {
	t       testing.TB
	Name    string
	URL     string
	addr    string
	tlsCfg  *tls.Config
	handler http.Handler

	mu      sync.Mutex
	srv     *http.Server
	calls   int
	events  []client.Callback
	arrived []time.Time // when each event was handled
	behave  func(n int) Behaviour
}

// Start serves on a free loopback port with the certificate in
// certFile/keyFile (for 127.0.0.1), verifying with secrets. The test's
// cleanup stops it.
func Start(t testing.TB, name, certFile, keyFile string, secrets func() []string) *Receiver {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{t: t, Name: name, tlsCfg: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	r.handler, err = client.CallbackHandler(client.CallbackConfig{Secrets: secrets, Handle: r.handle})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = l.Addr().String()
	r.URL = "https://" + r.addr + "/callbacks/" + name
	r.serve(l)
	t.Cleanup(r.Down)
	return r
}

func (r *Receiver) serve(l net.Listener) {
	// HTTP/1.1 over a TLS listener made here, and no lazy HTTP/2 setup
	// inside the serving goroutine: that setup writes the server's fields
	// unlocked, racing a Down that shuts the server down at once.
	srv := &http.Server{Handler: http.HandlerFunc(r.serveHTTP), ReadHeaderTimeout: 5 * time.Second,
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	tl := tls.NewListener(l, r.tlsCfg)
	go func() { _ = srv.Serve(tl) }()
}

// Down stops serving: calls are refused until Up.
func (r *Receiver) Down() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			srv.Close()
		}
	}
}

// Up serves again on the same address.
func (r *Receiver) Up() {
	r.t.Helper()
	var l net.Listener
	var err error
	for range 50 { // the port may linger a moment after Down
		if l, err = net.Listen("tcp", r.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		r.t.Fatal(err)
	}
	r.serve(l)
}

// Behave sets how calls are answered from now on; nil handles every
// event.
func (r *Receiver) Behave(f func(n int) Behaviour) {
	r.mu.Lock()
	r.behave = f
	r.mu.Unlock()
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.calls++
	n, f := r.calls, r.behave
	r.mu.Unlock()
	var b Behaviour
	if f != nil {
		b = f(n)
	}
	if b.Delay > 0 {
		select {
		case <-time.After(b.Delay):
		case <-req.Context().Done():
			return
		}
	}
	if b.Status != 0 {
		if b.RetryAfter != "" {
			w.Header().Set("Retry-After", b.RetryAfter)
		}
		w.WriteHeader(b.Status)
		return
	}
	r.handler.ServeHTTP(w, req)
}

func (r *Receiver) handle(_ context.Context, cb client.Callback) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, cb)
	r.arrived = append(r.arrived, time.Now())
	return nil
}

// Calls is how many requests arrived.
func (r *Receiver) Calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// Events are the events handled (verified and first seen), in order.
func (r *Receiver) Events() []client.Callback {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]client.Callback(nil), r.events...)
}

// Lags are, for each event handled, the time from its outcome's record to
// its arrival here.
func (r *Receiver) Lags() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]time.Duration, len(r.events))
	for i, ev := range r.events {
		out[i] = r.arrived[i].Sub(ev.Recorded)
	}
	return out
}
