package benchrun

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/report.* with the current output")

// goldenResult is a small benchmark: two variants, a rate, a time, a cost
// and a unitless metric, one noisy run.
func goldenResult() *Result {
	busy := 0.31
	var records []Record
	for run := 1; run <= 5; run++ {
		f := float64(run)
		for _, v := range Order(run, 2) {
			name := []string{"off", "on|tls"}[v]
			k := 1 + 0.3*float64(v)
			rec := Record{Variant: name, Run: run, Load1: 0.5, Samples: []Sample{
				{MetricWall, 10 + f/10},
				{MetricCPU, 3*k + f/100},
				{Metric{"throughput", "tx/s"}, 1000/k + f},
				{Metric{"p99", "ms"}, 4 + f/2},
				{Metric{"cpu:gtr", "µs/tx"}, 120*k + f},
				{Metric{"tx", ""}, 5000},
			}}
			if run == 3 && v == 1 {
				rec.Busy, rec.Noisy = &busy, true
			}
			records = append(records, rec)
		}
	}
	return &Result{
		Variants: []string{"off", "on|tls"}, Runs: 5, Quiet: 0.15, QuietWait: "2m0s", Per: "tx",
		Machine: Machine{CPUs: 2, Model: "AMD EPYC", Kernel: "Linux 6.18.0"},
		Date:    time.Date(2026, 12, 6, 9, 30, 0, 0, time.UTC),
		Records: records, Metrics: summarize(records, []string{"off", "on|tls"}),
	}
}

// TestReportGolden holds the text and Markdown reports to the files in
// testdata (go test -run TestReportGolden -rewrite accepts a change).
func TestReportGolden(t *testing.T) {
	t.Parallel()
	res := goldenResult()
	for file, write := range map[string]func(*bytes.Buffer) error{
		"report.txt": func(b *bytes.Buffer) error { return res.WriteText(b) },
		"report.md":  func(b *bytes.Buffer) error { return res.WriteMarkdown(b) },
	} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", file)
		if *rewrite {
			if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if b.String() != string(want) {
			t.Errorf("%s differs (run with -rewrite to accept):\n--- want\n%s\n--- got\n%s", file, want, b.String())
		}
	}
}

func TestReportJSON(t *testing.T) {
	t.Parallel()
	res := goldenResult()
	res.Failure = "benchrun: command failed: off #6: exit status 1"
	var b bytes.Buffer
	if err := res.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatalf("JSON does not read back: %v\n%s", err, b.String())
	}
	if len(back.Records) != 10 || len(back.Records[0].Samples) != 6 || back.Records[5].Busy == nil || len(back.Metrics) != 6 ||
		back.Metrics[1].Comparisons[0].Verdict != Higher || back.Failure == "" {
		t.Errorf("read back %+v", back)
	}
	if !strings.Contains(b.String(), `"verdict": "higher"`) {
		t.Errorf("verdict not spelt out:\n%s", b.String())
	}
}
