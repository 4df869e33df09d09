package natstest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

func connects(t *testing.T, url string) bool {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second))
	if err != nil {
		return false
	}
	nc.Close()
	return true
}

// TestRestartKeepsPortAndStore: a stream made before Stop is there after
// Restart, on the same URL.
func TestRestartKeepsPortAndStore(t *testing.T) {
	s := Start(t)
	url, port := s.URL(), s.Port()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AddStream(&nats.StreamConfig{Name: "S", Subjects: []string{"s"}}); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	s.Stop()
	if s.NATS() != nil || connects(t, url) {
		t.Fatal("stopped server still serves")
	}
	s.Restart()
	if s.URL() != url || s.Port() != port || s.NATS() == nil {
		t.Fatalf("after Restart: %s, %d; want %s, %d", s.URL(), s.Port(), url, port)
	}
	nc, err = nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ = nc.JetStream()
	if _, err := js.StreamInfo("S"); err != nil {
		t.Fatalf("stream after Restart: %v", err)
	}
}

// TestStartWith: configure's options are the server's, at every start.
func TestStartWith(t *testing.T) {
	calls := 0
	s := StartWith(t, func(o *server.Options) { calls++; o.JetStream = false })
	if s.NATS().JetStreamEnabled() {
		t.Fatal("JetStream on")
	}
	s.Stop()
	s.Restart()
	if calls != 2 || s.NATS().JetStreamEnabled() {
		t.Fatalf("%d calls of configure, JetStream %v", calls, s.NATS().JetStreamEnabled())
	}
}

// TestStartFile: the file's options, its port -1 a free port kept across
// Restart.
func TestStartFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(file, []byte("host: 127.0.0.1\nport: -1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := StartFile(t, file)
	port := s.Port()
	if port <= 0 || !connects(t, s.URL()) {
		t.Fatalf("port %d, %s", port, s.URL())
	}
	s.Stop()
	s.Restart()
	if s.Port() != port || !connects(t, s.URL()) {
		t.Fatalf("after Restart: port %d, want %d", s.Port(), port)
	}
}
