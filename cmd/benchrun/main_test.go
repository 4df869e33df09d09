package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cellpay/cellpay/internal/dev/benchrun"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// runCmd runs the command with a deadline and returns its exit code,
// stdout and stderr.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	codeCh := make(chan int, 1)
	go func() { codeCh <- run(args, &out, &errOut) }()
	select {
	case code := <-codeCh:
		return code, out.String(), errOut.String()
	case <-time.After(30 * time.Second):
		t.Fatalf("benchrun %v did not finish", args)
		return 0, "", ""
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	tooMany := []string{"-quiet-wait", "0"}
	for i := range benchrun.MaxVariants + 1 {
		tooMany = append(tooMany, "-v", string(rune('a'+i))+"=true")
	}
	tests := []struct {
		name     string
		args     []string
		want     int
		inStderr string // on stdout for -h, asked for
	}{
		{"help", []string{"-h"}, 0, "-v NAME=COMMAND"},
		{"one variant", []string{"-runs", "1", "-quiet-wait", "0", "-v", "a=echo BENCH tx 5"}, 0, "[a #1] BENCH tx 5"},
		{"unknown flag", []string{"-bogus"}, 2, "-bogus"},
		{"no variant", []string{"-runs", "1"}, 2, "-v"},
		{"variant without =", []string{"-v", "sleep 1"}, 2, "-v"},
		{"stray argument", []string{"-v", "a=true", "b=true"}, 2, "unexpected arguments"},
		{"runs 0", []string{"-runs", "0", "-v", "a=true"}, 2, "-runs 0"},
		{"runs over the cap", []string{"-runs", "101", "-v", "a=true"}, 2, "-runs 101"},
		{"too many variants", tooMany, 2, "-v: 17 variants"},
		{"quiet over 1", []string{"-quiet", "2", "-v", "a=true"}, 2, "-quiet 2"},
		{"bad timeout", []string{"-timeout", "0s", "-v", "a=true"}, 2, "-timeout"},
		{"no such -procs", []string{"-procs", "2147483646", "-v", "a=true"}, 2, "-procs 2147483646: no such process"},
		{"-json in a missing folder", []string{"-json", "/nonexistent/cellpay/x.json", "-v", "a=true"}, 2, "-json"},
		{"command fails", []string{"-runs", "3", "-quiet-wait", "0", "-v", "a=true", "-v", "b=echo kept; exit 3"}, 1, "b #1: sh -c: exit status 3"},
		{"command fails, its output kept", []string{"-runs", "1", "-quiet-wait", "0", "-v", "b=echo kept; exit 3"}, 1, "[b #1] kept"},
		{"timeout", []string{"-runs", "1", "-quiet-wait", "0", "-timeout", "100ms", "-v", "a=sleep 5"}, 1, "timed out after 100ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCmd(t, tt.args...)
			where, out := "stderr", stderr
			if tt.name == "help" {
				where, out = "stdout", stdout
			}
			if code != tt.want || !strings.Contains(out, tt.inStderr) {
				t.Errorf("exit %d, want %d with %q on %s:\n%s", code, tt.want, tt.inStderr, where, out)
			}
		})
	}
}

// TestMarkdownAndJSON: -md prints the tables for BENCHMARKS.md and -json
// writes every run's samples.
func TestMarkdownAndJSON(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bench.json")
	code, out, stderr := runCmd(t, "-runs", "2", "-quiet-wait", "0", "-md", "-json", path,
		"-v", "a=echo BENCH tx 10", "-v", "b=echo 'x_test.go:1: BENCH tx 12'; echo 'BenchmarkY-2 10 5 ns/op'")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"Machine: ", " CPUs (", "Linux ", "| variant | median | spread (min–max) | n |", "**tx**", "| b | 12 | 12–12 | 2 |", "- b vs a: +20.0%, no difference", "**BenchmarkY (ns/op)**"} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown has no %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var res benchrun.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("-json: %v\n%s", err, b)
	}
	if len(res.Records) != 4 || res.Records[1].Variant != "b" || res.Records[2].Variant != "b" || len(res.Metrics) == 0 {
		t.Errorf("-json: %+v", res)
	}
}

func TestInvalidConfigLeavesNoJSON(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bench.json")
	if code, _, _ := runCmd(t, "-runs", "0", "-json", path, "-v", "a=true"); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("-json file left behind: %v", err)
	}
}
