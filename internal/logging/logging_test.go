package logging

import (
	"bytes"
	"context"
	"encoding/json"
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
	close(w.release)
	a.Close()
	// Every record is either written or counted as dropped, and with the
	// sink stuck nearly all of them were dropped.
	written, reported := 0, uint64(0)
	for _, line := range strings.Split(strings.TrimSpace(w.buf.String()), "\n") {
		var rec struct {
			Msg     string `json:"msg"`
			Dropped uint64 `json:"dropped"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("bad line %q: %v", line, err)
		}
		switch rec.Msg {
		case "x":
			written++
		case "log records dropped: buffer full":
			reported += rec.Dropped
		}
	}
	if total := uint64(written) + reported + a.Dropped(); total != 1000 {
		t.Fatalf("written %d + reported dropped %d + unreported %d = %d, want 1000", written, reported, a.Dropped(), total)
	}
	if written > 20 {
		t.Fatalf("%d records written through a stuck sink with a buffer of 8", written)
	}
	if err := a.Handle(context.Background(), slog.Record{}); err != nil {
		t.Fatal(err)
	}
}
