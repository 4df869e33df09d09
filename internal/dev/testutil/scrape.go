package testutil

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// ScrapeTimeout bounds Scrape: the whole request, the body read included.
const ScrapeTimeout = 5 * time.Second

// Scrape reads a process's Prometheus metrics, GET http://addr/metrics,
// within ScrapeTimeout, and fails the test unless it answers 200 OK.
func Scrape(t testing.TB, addr string) string {
	t.Helper()
	c := &http.Client{Timeout: ScrapeTimeout}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %d %v\n%s", addr, resp.StatusCode, err, b)
	}
	return string(b)
}
