package e2e

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/operators"
)

// TestAuditWithSaturatedLogger: a GTR replica on the platform's NATS (as
// the GTR, under its locked-down permissions, on the stream the launcher
// made) whose process log is saturated for real: its stderr is a pipe
// nobody reads, so its logger's writer blocks, and its buffer holds one
// record (-log-buffer 1), so every later log record is dropped. An
// operator's drain and restore and an admin's table apply, through the
// gtrctl binary, are each in gtrctl audit with their actor, call and
// before and after; once the pipe is read, the logger reports how many
// records it dropped, and the changes' own log lines are not among those
// it wrote.
func TestAuditWithSaturatedLogger(t *testing.T) {
	if env.p.NATSURL() == "" {
		t.Fatal("the platform runs without NATS (nats-server missing?)")
	}
	const cell = "cell-b"
	dir := t.TempDir()
	g := newGTR(t, dir, "gtr-logsat", env.p.Config().GTRConfig, env.p.NATSURL(), "")
	// The flood's 1500 refused logins come from 127.0.0.1, as the
	// operators' calls after it: loopback is audited, not locked out.
	g.args = append(g.args, "-operators", env.p.OperatorsFile(), "-audit-file", filepath.Join(dir, "audit.jsonl"), "-log-buffer", "1",
		"-admin-throttle-loopback=false")

	// stderr: a pipe, as small as Linux makes one (a page), read only at
	// the end.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, w.Fd(), 1031 /* F_SETPIPE_SZ */, 4096); errno != 0 {
		t.Logf("F_SETPIPE_SZ: %v (the default 64 KiB pipe takes longer to fill)", errno)
	}
	stderrPath := filepath.Join(dir, "gtr-logsat.stderr")
	readerDone := make(chan struct{})
	reading := false
	readStderr := func() {
		if reading {
			return
		}
		reading = true
		f, err := os.Create(stderrPath)
		if err != nil {
			t.Error(err)
			close(readerDone)
			return
		}
		go func() { io.Copy(f, r); f.Close(); r.Close(); close(readerDone) }()
	}
	// Cleanups run last-registered first: the pipe is read before
	// newGTR's Stop (the GTR flushes its log on the way out).
	t.Cleanup(readStderr)
	g.startStderr(t, w)
	w.Close()

	viewer := strings.TrimSpace(string(must(os.ReadFile(env.p.OperatorTokenFile(operators.RoleViewer)))))
	adm := adminClientFor(t, g.AdminAddr, viewer)
	w0 := targetWeight(t, adm, cell)
	if w0 < 10 {
		t.Fatalf("%s weight %d: want a cell with weight to drain", cell, w0)
	}
	t.Cleanup(func() { gtrctlAt(t, g.AdminAddr, operators.RoleAdmin, "restore", cell, "--no-wait") })
	start := time.Now().Add(-time.Second)

	// Saturate: refused console logins, each a log record written before
	// the answer, far more than the pipe and the buffer hold.
	floodLog(t, g.AdminAddr, 1500)

	if code, _, errs := gtrctlAt(t, g.AdminAddr, operators.RoleOperator, "drain", cell, "--percent", "30", "--no-wait"); code != 0 {
		t.Fatalf("operator drain: %d %s", code, errs)
	}
	drained := w0 - w0*30/100
	if w := targetWeight(t, adm, cell); w != drained {
		t.Fatalf("%s weight %d after the drain, want %d", cell, w, drained)
	}
	if code, _, errs := gtrctlAt(t, g.AdminAddr, operators.RoleOperator, "restore", cell, "--no-wait"); code != 0 {
		t.Fatalf("operator restore: %d %s", code, errs)
	}
	code, table, errs := gtrctlAt(t, g.AdminAddr, operators.RoleAdmin, "table", "get")
	if code != 0 {
		t.Fatalf("table get: %s", errs)
	}
	m := regexp.MustCompile(`(?m)^version: (\d+)$`).FindStringSubmatch(table)
	if m == nil {
		t.Fatalf("table get: no version line:\n%s", table)
	}
	v0, _ := strconv.ParseUint(m[1], 10, 64)
	file := filepath.Join(dir, "table.yaml")
	bumped := strings.Replace(table, m[0], "version: "+strconv.FormatUint(v0+1, 10), 1)
	if err := os.WriteFile(file, []byte(bumped), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := gtrctlAt(t, g.AdminAddr, operators.RoleAdmin, "table", "apply", "-f", file); code != 0 {
		t.Fatalf("admin table apply: %d %s", code, errs)
	}

	// The audit log has each change, with its actor and before and after.
	au, out := auditSince(t, g.AdminAddr, start)
	var got []string
	weights := map[string][2]int32{}
	var versions [2]uint64
	for _, r := range au.Records {
		if r.Replica != g.ID || r.Outcome == "Unauthenticated" {
			continue // another replica's, or a refused login of the flood's
		}
		got = append(got, r.Actor+" "+r.Method+" "+r.Outcome)
		switch r.Method {
		case "Drain", "Restore":
			var before, after struct{ Weight int32 }
			json.Unmarshal([]byte(r.Before), &before)
			json.Unmarshal([]byte(r.After), &after)
			weights[r.Method] = [2]int32{before.Weight, after.Weight}
		case "ApplyTable":
			var before, after struct {
				Version uint64
				Applied bool
			}
			json.Unmarshal([]byte(r.Before), &before)
			json.Unmarshal([]byte(r.After), &after)
			if !after.Applied {
				t.Errorf("ApplyTable record: after %s, want applied", r.After)
			}
			versions = [2]uint64{before.Version, after.Version}
		}
	}
	want := "operator Drain OK; operator Restore OK; admin ApplyTable OK"
	if strings.Join(got, "; ") != want {
		t.Fatalf("audit of %s:\n got %s\nwant %s\n%s", g.ID, strings.Join(got, "; "), want, out)
	}
	if weights["Drain"] != [2]int32{w0, drained} || weights["Restore"] != [2]int32{drained, w0} {
		t.Fatalf("before -> after: %v; want Drain %d -> %d, Restore back", weights, w0, drained)
	}
	if versions != [2]uint64{v0, v0 + 1} {
		t.Fatalf("ApplyTable version before -> after: %v; want %d -> %d", versions, v0, v0+1)
	}
	if code, out, _ := gtrctlAt(t, g.AdminAddr, operators.RoleViewer, "audit", "--since", start.Format(time.RFC3339Nano)); code != 0 ||
		!strings.Contains(out, "admin") || !strings.Contains(out, "ApplyTable") || !strings.Contains(out, "->") {
		t.Fatalf("gtrctl audit:\n%s", out)
	}

	// Now read the pipe: the logger writes what it holds, first its
	// report of the records it dropped.
	readStderr()
	var lines []map[string]any
	var dropped float64
	testutil.Eventually(t, 10*time.Second, "the logger's report of dropped records", func() bool {
		floodLog(t, g.AdminAddr, 1) // a record after the report's
		lines, dropped = readLog(t, stderrPath)
		return dropped > 0
	})
	if dropped < 1000 {
		t.Fatalf("the logger reports %v records dropped; want most of the 1500 logins': it was not saturated", dropped)
	}
	for _, l := range lines {
		if msg, _ := l["msg"].(string); msg == "admin: weight changed" || msg == "admin: table applied" {
			t.Fatalf("the change's log line %v was written: the logger was not saturated during the changes", l)
		}
	}
	t.Logf("logger: %d lines written, %v records dropped; the audit has every change", len(lines), dropped)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// floodLog makes n refused console logins at the GTR's admin listener:
// each logs "console: login refused" before it answers.
func floodLog(t *testing.T, addr string, n int) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(must(os.ReadFile(env.p.CAFile()))) {
		t.Fatal("no CA certificate")
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}}}}
	defer client.CloseIdleConnections()
	for range n {
		req, err := http.NewRequest(http.MethodPost, "https://"+addr+"/api/login", strings.NewReader(`{"token":"cpo_flood"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Cellpay-Console", "1")
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("login with a bad token: %s, want 401", resp.Status)
		}
	}
}

// readLog reads the JSON lines at path, and the records the logger
// reported dropped.
func readLog(t *testing.T, path string) (lines []map[string]any, dropped float64) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l map[string]any
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		lines = append(lines, l)
		if l["msg"] == "log records dropped: buffer full" {
			n, _ := l["dropped"].(float64)
			dropped += n
		}
	}
	return lines, dropped
}
