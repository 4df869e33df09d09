package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/cellpay/cellpay/internal/dev/load"
)

// progress draws a bar on stderr, or nothing.
type progress struct {
	bar *progressbar.ProgressBar
	w   io.Writer
	on  bool
}

func newProgress(w io.Writer, on bool) *progress { return &progress{w: w, on: on} }

// update is load.Run's progress callback; Run calls it from one goroutine.
func (p *progress) update(done, total int64) {
	if !p.on {
		return
	}
	if p.bar == nil {
		p.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription("requests"),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("req"),
			progressbar.OptionThrottle(100*time.Millisecond),
		)
	}
	_ = p.bar.Set64(done)
}

func (p *progress) close() {
	if p.bar != nil {
		_ = p.bar.Exit()
		fmt.Fprintln(p.w)
	}
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// reportFormat is how the report is printed.
type reportFormat int

const (
	formatTable reportFormat = iota
	formatJSON
	formatBench
)

// printReport prints rep; with -followups its follow-ups too (in JSON,
// follow_ups after the load's fields).
func printReport(w io.Writer, rep load.Report, f reportFormat) error {
	switch f {
	case formatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case formatBench:
		return printBench(w, rep)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	loop := fmt.Sprintf("closed loop, concurrency %d", rep.Concurrency)
	if rep.Mode == load.ModeOpen {
		loop = fmt.Sprintf("open loop, %g/s, at most %d outstanding", rep.Rate, rep.Concurrency)
	}
	fmt.Fprintf(tw, "target\t%s %s, %s\n", rep.Target, rep.Addr, loop)
	fmt.Fprintf(tw, "run ID\t%s\n", rep.RunID)
	fmt.Fprintf(tw, "stopped by\t%s after %.2fs\n", rep.StopReason, rep.ElapsedSeconds)
	fmt.Fprintf(tw, "sent\t%d\n", rep.Sent)
	fmt.Fprintf(tw, "completed\t%d (%.1f/s)\n", rep.Completed, rep.Throughput)
	if rep.Mode == load.ModeOpen {
		fmt.Fprintf(tw, "dropped\t%d\n", rep.Dropped)
	}
	fmt.Fprintf(tw, "statuses\t%s\n", counts(rep.Statuses, []string{"APPROVED", "DECLINED", "PENDING", "FAILED"}))
	fmt.Fprintf(tw, "errors\t%s\n", counts(rep.Errors, nil))
	if rep.Target == load.TargetCell {
		fmt.Fprintf(tw, "cell\treroutable %d  point of no return %d  no terminal event %d\n",
			rep.Reroutable, rep.PointOfNoReturn, rep.ProtocolErrors)
	}
	if rep.Endpoints != nil {
		eps := map[string]int64{}
		for k, v := range rep.Endpoints {
			eps[k] = v
		}
		fmt.Fprintf(tw, "access points\t%s  (failed over %d)\n", counts(eps, nil), rep.FailedOver)
		fmt.Fprintf(tw, "switches\t%d\n", len(rep.Switches))
		for _, e := range rep.Switches {
			from, to := e.From, e.To
			if e.FromSite != "" || e.ToSite != "" { // -access-points
				from, to = fmt.Sprintf("%s (%s)", e.From, e.FromSite), fmt.Sprintf("%s (%s)", e.To, e.ToSite)
			}
			fmt.Fprintf(tw, "\t%s %s -> %s: %s\n", e.At.Format("15:04:05.000"), from, to, e.Reason)
		}
	}
	l := rep.Latency
	fmt.Fprintf(tw, "latency ms\tp50 %.2f  p90 %.2f  p99 %.2f  max %.2f  mean %.2f\n", l.P50, l.P90, l.P99, l.Max, l.Mean)
	if rep.FollowUps != nil {
		printFollowUps(tw, *rep.FollowUps)
	}
	return tw.Flush()
}

// statusNames are the statuses a follow-up may be answered, in the
// table's order; its errors follow, by gRPC code name.
var statusNames = []string{"APPROVED", "DECLINED", "PENDING", "FAILED"}

// printFollowUps adds the follow-ups' lines to the table: the lives
// chosen, then each kind's follow-ups by outcome.
func printFollowUps(tw io.Writer, fu load.FollowUpReport) {
	fmt.Fprintf(tw, "follow-ups\tshare %g: lives %s  (dropped %d), done after %.2fs\n",
		fu.Share, counts(fu.Lives, []string{load.LifeCaptureRefund, load.LifeVoid}), fu.Dropped, fu.ElapsedSeconds)
	for _, kind := range load.FollowUpKinds {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.ToLower(kind.String())+"s", counts(fu.Calls[kind.String()], statusNames))
	}
	fmt.Fprintf(tw, "  unsent\t%d\n", fu.Unsent)
	if len(fu.Switches) > 0 {
		fmt.Fprintf(tw, "  switches\t%d\n", len(fu.Switches))
	}
}

// printBench prints the report as benchrun's BENCH lines: one figure a
// line, named and in units that give benchrun the right direction (tx/s
// higher is better, ms higher is slower). errors counts every request
// that did not complete: failed RPCs and cell streams without a terminal
// event. dropped is there in open loop only, where it means anything.
// With -followups, followups counts the follow-ups answered and
// followup_errors those that failed; tx and the figures before them are
// still the submits'.
func printBench(w io.Writer, rep load.Report) error {
	var errs int64
	for _, n := range rep.Errors {
		errs += n
	}
	errs += rep.ProtocolErrors
	l := rep.Latency
	var b strings.Builder
	fmt.Fprintf(&b, "BENCH tx %d\n", rep.Completed)
	fmt.Fprintf(&b, "BENCH throughput %.3f tx/s\n", rep.Throughput)
	fmt.Fprintf(&b, "BENCH p50 %.3f ms\n", l.P50)
	fmt.Fprintf(&b, "BENCH p90 %.3f ms\n", l.P90)
	fmt.Fprintf(&b, "BENCH p99 %.3f ms\n", l.P99)
	fmt.Fprintf(&b, "BENCH max %.3f ms\n", l.Max)
	fmt.Fprintf(&b, "BENCH errors %d\n", errs)
	if rep.Mode == load.ModeOpen {
		fmt.Fprintf(&b, "BENCH dropped %d\n", rep.Dropped)
	}
	if fu := rep.FollowUps; fu != nil {
		fmt.Fprintf(&b, "BENCH followups %d\n", fu.Answered)
		fmt.Fprintf(&b, "BENCH followup_errors %d\n", fu.Sent-fu.Answered)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// counts formats m as "K n  K n", first the keys of order, then the others
// sorted; "none" when empty.
func counts(m map[string]int64, order []string) string {
	keys := slices.Clone(order)
	var rest []string
	for k := range m {
		if !slices.Contains(order, k) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	keys = append(keys, rest...)
	if len(keys) == 0 {
		return "none"
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, "  ")
}
