package testutil

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestScrape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("up 1\n"))
	}))
	defer srv.Close()
	if got := Scrape(t, strings.TrimPrefix(srv.URL, "http://")); got != "up 1\n" {
		t.Fatalf("Scrape: %q", got)
	}
}
