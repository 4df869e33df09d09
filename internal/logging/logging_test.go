package logging

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWritesInOrderAndFlushesOnClose(t *testing.T) {
	var buf bytes.Buffer
	log, closeLog := New(&buf)
	for i := range 100 {
		log.Info("line", "i", i)
	}
	log.With("cell", "cell-a").Warn("with attrs")
	closeLog()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 101 || !strings.Contains(lines[0], `"i":0`) || !strings.Contains(lines[99], `"i":99`) {
		t.Fatalf("got %d lines: first %q last %q", len(lines), lines[0], lines[len(lines)-1])
	}
	if !strings.Contains(lines[100], `"cell":"cell-a"`) {
		t.Fatalf("attrs lost: %s", lines[100])
	}
}

// blockingWriter holds every write until released: a stuck log sink.
type blockingWriter struct {
	release chan struct{}
	mu      sync.Mutex
	buf     bytes.Buffer
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// TestNeverBlocksDropsAndCounts: with the sink stuck, logging returns at
// once; what does not fit is dropped, counted and reported later.
func TestNeverBlocksDropsAndCounts(t *testing.T) {
	w := &blockingWriter{release: make(chan struct{})}
	a := NewAsync(slog.NewJSONHandler(w, nil), 8)
	log := slog.New(a)
	done := make(chan struct{})
	go func() {
		for range 1000 {
			log.Info("x")
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("logging blocked on a stuck sink")
	}
	if a.Dropped() < 900 {
		t.Fatalf("dropped %d, want most of 1000", a.Dropped())
	}
	close(w.release)
	log.Info("after")
	a.Close()
	if !strings.Contains(w.buf.String(), "log records dropped") {
		t.Fatal("drops were not reported")
	}
	if err := a.Handle(context.Background(), slog.Record{}); err != nil {
		t.Fatal(err)
	}
}
