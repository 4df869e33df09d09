package benchrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Result is everything a benchmark measured, raw and summarised.
type Result struct {
	Variants  []string  `json:"variants"`
	Runs      int       `json:"runs"`
	Quiet     float64   `json:"quiet"`
	QuietWait string    `json:"quiet_wait"`
	Procs     int       `json:"procs,omitempty"`
	Per       string    `json:"per,omitempty"`
	Machine   Machine   `json:"machine"`
	Date      time.Time `json:"date"`
	// Records are the command runs in the order they ran.
	Records []Record `json:"records"`
	// Metrics summarise the successful runs, in the order the metrics were
	// first seen.
	Metrics []MetricSummary `json:"metrics"`
	// Failure names the failed run and why, when one failed.
	Failure string `json:"failure,omitempty"`
}

// Record is one command run.
type Record struct {
	Variant string `json:"variant"`
	// Run is the run's number, 1..Runs.
	Run int `json:"run"`
	// Busy is the host's CPU busy share over the second before the run;
	// nil when not checked (QuietWait 0).
	Busy *float64 `json:"busy,omitempty"`
	// Noisy: the host was not quiet within QuietWait; the run went ahead.
	Noisy bool `json:"noisy,omitempty"`
	// Load1 is the 1-minute load average just before the run.
	Load1   float64  `json:"load1"`
	Samples []Sample `json:"samples"`
	// Err is why the run failed; its samples are then left out of the
	// summaries.
	Err string `json:"error,omitempty"`
	// Output is the end of a failed run's stdout (at most failTail bytes).
	Output string `json:"output,omitempty"`
}

// failTail is how much of a failed run's stdout its Record keeps.
const failTail = 16 << 10

// pollInterval is the window of each busy-share reading, and so the
// poll period of the wait for a quiet host.
const pollInterval = time.Second

// Order is the order variants run in on run number run (1-based): odd
// runs as given, even runs reversed, so that consecutive runs read
// A B, B A, A B, ...; see the package comment for why.
func Order(run, variants int) []int {
	o := make([]int, variants)
	for i := range o {
		o[i] = i
	}
	if run%2 == 0 {
		slices.Reverse(o)
	}
	return o
}

// runner holds a Config with its defaults filled in.
type runner struct {
	cfg   Config
	log   io.Writer // serialised
	host  Host
	exec  ExecFunc
	sleep func(context.Context, time.Duration) error
}

// Run runs every variant cfg.Runs times, interleaved, and summarises
// what they printed and what was measured of them. It stops at the first
// failed command: a command that failed usually fails again, and each
// run may take up to cfg.Timeout. The Result holds every run made, the
// failed one included, whatever the error, unless the error wraps
// ErrInvalidConfig (then it is nil). A failed command gives an error
// wrapping ErrCommandFailed; the end of ctx gives ctx's error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := newRunner(cfg)
	if cfg.Procs != 0 {
		if _, err := procCPU(r.host, cfg.Procs); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	now := time.Now
	if cfg.Now != nil {
		now = cfg.Now
	}
	res := &Result{
		Runs: cfg.Runs, Quiet: cfg.Quiet, QuietWait: cfg.QuietWait.String(), Procs: cfg.Procs, Per: cfg.Per,
		Machine: machineOf(r.host), Date: now().UTC(),
	}
	for _, v := range cfg.Variants {
		res.Variants = append(res.Variants, v.Name)
	}
	var err error
runs:
	for run := 1; run <= cfg.Runs; run++ {
		for _, i := range Order(run, len(cfg.Variants)) {
			var rec Record
			rec, err = r.runOne(ctx, cfg.Variants[i], run)
			if err != nil && rec.Err == "" { // the host, or ctx, before or after the command
				rec.Err = err.Error()
			}
			res.Records = append(res.Records, rec)
			if err != nil {
				break runs
			}
		}
	}
	if err != nil && ctx.Err() == nil {
		res.Failure = err.Error()
	}
	res.Metrics = summarize(res.Records, res.Variants)
	return res, err
}

func newRunner(cfg Config) *runner {
	r := &runner{cfg: cfg, log: io.Discard, host: cfg.Host, exec: cfg.Exec, sleep: cfg.Sleep}
	if cfg.Log != nil {
		r.log = &syncWriter{w: cfg.Log}
	}
	if r.host == nil {
		r.host = ProcHost{}
	}
	if r.exec == nil {
		r.exec = Shell
	}
	if r.sleep == nil {
		r.sleep = sleep
	}
	return r
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runOne waits for a quiet host, runs v once and measures it.
func (r *runner) runOne(ctx context.Context, v Variant, run int) (Record, error) {
	label := fmt.Sprintf("%s #%d", v.Name, run)
	rec := Record{Variant: v.Name, Run: run}
	if r.cfg.QuietWait > 0 {
		busy, noisy, err := r.waitQuiet(ctx, label)
		if err != nil {
			return rec, err
		}
		rec.Busy, rec.Noisy = &busy, noisy
	}
	var err error
	if rec.Load1, err = loadAvg1(r.host); err != nil {
		return rec, err
	}
	var before map[string]float64
	if r.cfg.Procs != 0 {
		if before, err = procCPU(r.host, r.cfg.Procs); err != nil {
			return rec, err
		}
	}

	runCtx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	out := &lineWriter{prefix: "[" + label + "] ", log: r.log, stop: cancel}
	x, err := r.exec(runCtx, v.Command, out, r.log)
	out.flush()
	switch {
	case out.err != nil:
		err = out.err // the command was killed for it
	case ctx.Err() != nil:
		return rec, ctx.Err()
	case runCtx.Err() != nil:
		err = fmt.Errorf("timed out after %v; its process group was killed", r.cfg.Timeout)
	}
	rec.Samples = append([]Sample{{MetricWall, x.Wall.Seconds()}, {MetricCPU, x.CPU.Seconds()}}, out.samples...)
	if err == nil && r.cfg.Procs != 0 {
		err = r.addProcCPU(&rec, before)
	}
	if err == nil && r.cfg.Per != "" {
		err = r.addPer(&rec, x.CPU.Seconds())
	}
	if err != nil {
		rec.Err = err.Error()
		rec.Output = out.output()
		return rec, fmt.Errorf("%w: %s: %w", ErrCommandFailed, label, err)
	}
	return rec, nil
}

// waitQuiet waits until the host's busy share over the last pollInterval
// is under Quiet, for at most QuietWait, and returns the share last seen
// and whether it never fell under.
func (r *runner) waitQuiet(ctx context.Context, label string) (float64, bool, error) {
	prev, err := readCPUTimes(r.host)
	if err != nil {
		return 0, false, err
	}
	for waited := pollInterval; ; waited += pollInterval {
		if err := r.sleep(ctx, pollInterval); err != nil {
			return 0, false, err
		}
		cur, err := readCPUTimes(r.host)
		if err != nil {
			return 0, false, err
		}
		busy := busyShare(prev, cur)
		switch {
		case busy < r.cfg.Quiet:
			return busy, false, nil
		case waited >= r.cfg.QuietWait:
			r.notef("%s: host still busy (%.2f of its CPU) after %v: running anyway, marked noisy", label, busy, r.cfg.QuietWait)
			return busy, true, nil
		case waited == pollInterval:
			r.notef("%s: waiting for a quiet host (busy %.2f, want under %.2f)", label, busy, r.cfg.Quiet)
		}
		prev = cur
	}
}

// addProcCPU adds a "cpu:<name>" sample in seconds per child of Procs.
func (r *runner) addProcCPU(rec *Record, before map[string]float64) error {
	after, err := procCPU(r.host, r.cfg.Procs)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(after)) {
		rec.Samples = append(rec.Samples, Sample{Metric{cpuPrefix + name, "s"}, after[name] - before[name]})
	}
	return nil
}

// addPer divides the run's CPU figures by the total of the Per metric:
// "cpu:<name> µs/<per>" per process, "cpu:command" for the command's own
// CPU and, with Procs, "cpu:all" for their sum. A metric printed several
// times in a run sums: a command that runs the load twice did twice the
// operations for its CPU.
func (r *runner) addPer(rec *Record, commandCPU float64) error {
	var total float64
	var found *Metric
	for _, s := range rec.Samples {
		if s.Name != r.cfg.Per && s.String() != r.cfg.Per {
			continue
		}
		if found != nil && s.Metric != *found {
			return fmt.Errorf("-per %s: the command printed it as %q and %q; name one as \"name unit\"", r.cfg.Per, *found, s.Metric)
		}
		found = &s.Metric
		total += s.Value
	}
	if found == nil {
		return fmt.Errorf("-per %s: the command printed no such metric", r.cfg.Per)
	}
	if total <= 0 {
		return fmt.Errorf("-per %s: the command printed %v; want a positive count", r.cfg.Per, total)
	}
	unit := "µs/" + found.Name
	per := func(name string, seconds float64) Sample {
		return Sample{Metric{name, unit}, seconds / total * 1e6}
	}
	var procs []Sample
	all := commandCPU
	for _, s := range rec.Samples {
		if s.Unit == "s" && strings.HasPrefix(s.Name, cpuPrefix) {
			procs = append(procs, per(s.Name, s.Value))
			all += s.Value
		}
	}
	rec.Samples = append(rec.Samples, per(cpuPrefix+"command", commandCPU))
	rec.Samples = append(rec.Samples, procs...)
	if r.cfg.Procs != 0 {
		rec.Samples = append(rec.Samples, per(cpuPrefix+"all", all))
	}
	return nil
}

// notef writes a note of the harness to the log.
func (r *runner) notef(format string, args ...any) {
	fmt.Fprintf(r.log, "benchrun: "+format+"\n", args...)
}

// lineWriter is a command's stdout: it passes each line to log with a
// prefix, parses the metrics out of it and keeps the end of the output.
// Only exec's copying goroutine writes to it; flush follows Wait.
type lineWriter struct {
	prefix string
	log    io.Writer
	stop   func() // kills the command when it breaks a limit

	buf     []byte
	samples []Sample
	tail    []byte
	err     error
}

// errLineTooLong and errTooManySamples are the limits a command's output
// can break.
var (
	errLineTooLong    = fmt.Errorf("a line of its stdout is over %d bytes (the limit)", MaxLine)
	errTooManySamples = fmt.Errorf("it printed over %d metric samples in one run (the limit)", MaxSamples)
)

func (w *lineWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.buf = append(w.buf, p...)
	for w.err == nil {
		i := slices.Index(w.buf, '\n')
		if i < 0 {
			break
		}
		w.line(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if w.err == nil && len(w.buf) > MaxLine {
		w.fail(errLineTooLong)
	}
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// flush handles a last line without a newline.
func (w *lineWriter) flush() {
	if w.err == nil && len(w.buf) > 0 {
		w.line(w.buf)
	}
	w.buf = nil
}

func (w *lineWriter) fail(err error) {
	w.err = err
	w.stop()
}

func (w *lineWriter) line(b []byte) {
	if len(b) > 0 && b[len(b)-1] == '\r' {
		b = b[:len(b)-1]
	}
	line := string(b)
	fmt.Fprintf(w.log, "%s%s\n", w.prefix, line)
	w.keepTail(line)
	s, err := parseLine(line)
	switch {
	case errors.Is(err, errNotMetric):
	case err != nil:
		fmt.Fprintf(w.log, "benchrun: %signored: %v\n", w.prefix, err)
	case len(w.samples)+len(s) > MaxSamples:
		w.fail(errTooManySamples)
	default:
		w.samples = append(w.samples, s...)
	}
}

// keepTail keeps the last failTail bytes or more of the output: it trims
// only past twice that, so that each byte is copied a bounded number of
// times.
func (w *lineWriter) keepTail(line string) {
	w.tail = append(append(w.tail, line...), '\n')
	if n := len(w.tail); n > 2*failTail {
		w.tail = w.tail[:copy(w.tail, w.tail[n-failTail:])]
	}
}

// output is the last failTail bytes of the output.
func (w *lineWriter) output() string {
	return string(w.tail[max(0, len(w.tail)-failTail):])
}

// syncWriter serialises writes: a command's stdout lines, its stderr and
// the harness's notes all go to the log from different goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
