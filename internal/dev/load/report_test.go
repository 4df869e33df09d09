package load

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

func TestSummarize(t *testing.T) {
	seq := func(n int) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = time.Duration(i+1) * time.Millisecond
		}
		// Shuffled, so that summarize has to sort.
		rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out
	}
	tests := []struct {
		name string
		lat  []time.Duration
		want LatencySummary
	}{
		{"empty", nil, LatencySummary{}},
		{"one", []time.Duration{5 * time.Millisecond}, LatencySummary{P50: 5, P90: 5, P99: 5, Max: 5, Mean: 5}},
		{"1..100", seq(100), LatencySummary{P50: 50, P90: 90, P99: 99, Max: 100, Mean: 50.5}},
		{"1..1000", seq(1000), LatencySummary{P50: 500, P90: 900, P99: 990, Max: 1000, Mean: 500.5}},
		// Nearest rank: 10 values, p99 is the 10th, p50 the 5th.
		{"1..10", seq(10), LatencySummary{P50: 5, P90: 9, P99: 10, Max: 10, Mean: 5.5}},
		{"skewed", []time.Duration{
			1 * time.Millisecond, 1 * time.Millisecond, 1 * time.Millisecond, 1 * time.Millisecond,
			2 * time.Millisecond, 2 * time.Millisecond, 2 * time.Millisecond, 2 * time.Millisecond,
			3 * time.Millisecond, 100 * time.Millisecond,
		}, LatencySummary{P50: 2, P90: 3, P99: 100, Max: 100, Mean: 11.5}},
		{"sub-millisecond", []time.Duration{250 * time.Microsecond, 750 * time.Microsecond}, LatencySummary{P50: 0.25, P90: 0.75, P99: 0.75, Max: 0.75, Mean: 0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := summarize(tt.lat); got != tt.want {
				t.Errorf("summarize = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRecorderCounts(t *testing.T) {
	rec := newRecorder(10, nil)
	ok := func(s cellpayv1.TransactionStatus) outcome { return outcome{status: s} }
	rec.record(ok(cellpayv1.TransactionStatus_APPROVED), nil, 1*time.Millisecond)
	rec.record(ok(cellpayv1.TransactionStatus_APPROVED), nil, 3*time.Millisecond)
	rec.record(ok(cellpayv1.TransactionStatus_FAILED), nil, 2*time.Millisecond)
	rec.record(outcome{reroutable: true}, nil, 2*time.Millisecond)
	rec.record(outcome{pnr: true}, errNoTerminal, time.Second)
	rec.record(outcome{}, status.Error(codes.DeadlineExceeded, "slow"), time.Second)
	rec.record(outcome{}, errors.New("not a status"), time.Second)
	rec.dropped.Add(2)
	rep := rec.report(2 * time.Second)
	want := map[string]int64{"APPROVED": 2, "DECLINED": 0, "PENDING": 0, "FAILED": 1}
	if !reflect.DeepEqual(rep.Statuses, want) {
		t.Errorf("statuses %v, want %v", rep.Statuses, want)
	}
	wantErrs := map[string]int64{"DEADLINE_EXCEEDED": 1, "UNKNOWN": 1}
	if !reflect.DeepEqual(rep.Errors, wantErrs) {
		t.Errorf("errors %v, want %v", rep.Errors, wantErrs)
	}
	if rep.Completed != 4 || rep.Reroutable != 1 || rep.ProtocolErrors != 1 || rep.PointOfNoReturn != 1 || rep.Dropped != 2 {
		t.Errorf("report %+v", rep)
	}
	if rec.done() != 9 {
		t.Errorf("done %d, want 9", rec.done())
	}
	if rep.Throughput != 2 || rep.Latency.Max != 3 {
		t.Errorf("throughput %v max %v, want 2 and 3", rep.Throughput, rep.Latency.Max)
	}
}

func TestReportJSONRoundTrip(t *testing.T) {
	rep := Report{
		Target: "gtr", Mode: "open", Addr: "127.0.0.1:7070", RunID: "lg-1", Rate: 200, Concurrency: 16,
		StopReason: StopDuration, Sent: 190, Completed: 180,
		Errors:   map[string]int64{"UNAVAILABLE": 10},
		Statuses: map[string]int64{"APPROVED": 170, "DECLINED": 10, "PENDING": 0, "FAILED": 0},
		Dropped:  10, ElapsedSeconds: 1.02, Throughput: 176.47,
		Latency: LatencySummary{P50: 1.5, P90: 3.25, P99: 9, Max: 12.5, Mean: 2},
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, rep) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, rep)
	}
	// The field names are the tool's output contract.
	var shape map[string]any
	if err := json.Unmarshal(b, &shape); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"target", "mode", "sent", "completed", "errors", "statuses", "dropped",
		"elapsed_seconds", "throughput", "latency_ms", "stop_reason", "reroutable", "protocol_errors"} {
		if _, ok := shape[k]; !ok {
			t.Errorf("JSON has no %q: %s", k, b)
		}
	}
	lat, _ := shape["latency_ms"].(map[string]any)
	for _, k := range []string{"p50", "p90", "p99", "max", "mean"} {
		if _, ok := lat[k]; !ok {
			t.Errorf("latency_ms has no %q: %s", k, b)
		}
	}
}

// TestLatenciesConcurrent: concurrent adds across chunk boundaries keep
// every value, and only the chunks written are allocated.
func TestLatenciesConcurrent(t *testing.T) {
	const n, workers = 3*latChunk + 17, 8
	l := newLatencies(10 * latChunk)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				l.add(time.Duration(i))
			}
		})
	}
	wg.Wait()
	got := l.all()
	if len(got) != n {
		t.Fatalf("%d latencies, want %d", len(got), n)
	}
	slices.Sort(got)
	for i, d := range got {
		if d != time.Duration(i) {
			t.Fatalf("latency %d is %v, want %v", i, d, time.Duration(i))
		}
	}
	allocated := 0
	for i := range l.chunks {
		if l.chunks[i].Load() != nil {
			allocated++
		}
	}
	if allocated != 4 {
		t.Errorf("%d chunks allocated for %d latencies, want 4", allocated, n)
	}
}
