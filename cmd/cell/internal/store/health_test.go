package store

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// slowAccept forwards connections to upstream, each only after delay:
// connecting through it is slow, a query on a connection made is not.
func slowAccept(t *testing.T, upstream string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer c.Close()
				time.Sleep(delay)
				u, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(u, c); _ = u.Close() }()
				_, _ = io.Copy(c, u)
			})
		}
	}()
	return ln.Addr().String()
}

// slowStore connects a store to a new database through slowAccept.
func slowStore(t *testing.T, delay time.Duration) *Store {
	t.Helper()
	_, url := open(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	direct := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	if !strings.Contains(url, direct) {
		t.Fatalf("the test database's URL %q has no host:port %s", url, direct)
	}
	s, err := Connect(ctxT(t), strings.Replace(url, direct, slowAccept(t, direct, delay), 1), 2)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPingConnectsAcrossChecks: a check shorter than connecting takes
// (after a failover, on a loaded host) does not cut the attempt off; a
// later check finds the connection made. Cut off with each check, the
// database would never be seen again.
func TestPingConnectsAcrossChecks(t *testing.T) {
	const connect = 700 * time.Millisecond
	slow := slowStore(t, connect)
	defer slow.Close()

	check := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		return slow.Ping(ctx)
	}
	if err := check(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first check = %v, want a deadline: connecting takes %v", err, connect)
	}
	deadline := time.Now().Add(20 * time.Second)
	for n := 2; ; n++ {
		err := check()
		if err == nil {
			t.Logf("the check passed at try %d", n)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no check passed in 20 s (last: %v): each cut its attempt to connect off", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPingAfterClose: Close ends an attempt to connect under way, and a
// check after it fails at once.
func TestPingAfterClose(t *testing.T) {
	slow := slowStore(t, 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_ = slow.Ping(ctx) // begins an attempt that outlives it
	cancel()
	closed := make(chan struct{})
	go func() { slow.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("Close waited for the attempt to connect")
	}
	if err := slow.Ping(context.Background()); err == nil {
		t.Fatal("Ping after Close passed")
	}
}
