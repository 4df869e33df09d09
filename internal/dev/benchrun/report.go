package benchrun

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteText writes the summaries as plain tables, one per metric, each
// followed by its comparisons with the baseline.
func (r *Result) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "benchrun: %s\nmachine: %s\n", r.runsLine(), r.machineLine())
	for _, m := range r.Metrics {
		d := decimals(m)
		fmt.Fprintf(tw, "\n%s\n", heading(m.Metric))
		fmt.Fprintf(tw, "  variant\tmedian\tmin–max\tiqr\tn\n")
		for _, v := range m.Variants {
			fmt.Fprintf(tw, "  %s\t%s\t%s–%s\t%s\t%d\n", v.Variant, num(v.Median, d), num(v.Min, d), num(v.Max, d), num(v.IQR, d), v.N)
		}
		// A line without tabs ends tabwriter's column block: flush so the
		// comparison does not widen the table's first column.
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, c := range m.Comparisons {
			fmt.Fprintf(tw, "  %s\n", c.line())
		}
	}
	r.writeNotes(tw, "")
	return tw.Flush()
}

// WriteMarkdown writes the summaries as Markdown tables for
// BENCHMARKS.md, under a line naming the machine and the date.
func (r *Result) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Machine: %s. Variants: %s.\n", mdEscape(r.machineLine()), mdEscape(r.runsLine()))
	for _, m := range r.Metrics {
		d := decimals(m)
		fmt.Fprintf(&b, "\n**%s**\n\n", mdEscape(heading(m.Metric)))
		b.WriteString("| variant | median | spread (min–max) | n |\n|---|---|---|---|\n")
		for _, v := range m.Variants {
			fmt.Fprintf(&b, "| %s | %s | %s–%s | %d |\n", mdEscape(v.Variant), num(v.Median, d), num(v.Min, d), num(v.Max, d), v.N)
		}
		if len(m.Comparisons) > 0 {
			b.WriteString("\n")
		}
		for _, c := range m.Comparisons {
			fmt.Fprintf(&b, "- %s\n", mdEscape(c.line()))
		}
	}
	r.writeNotes(&b, "- ")
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes r, every run's raw samples and the summaries, as
// indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// runsLine says what ran: the variants, the baseline, the runs.
func (r *Result) runsLine() string {
	var names []string
	for i, v := range r.Variants {
		if i == 0 && len(r.Variants) > 1 {
			v += " (baseline)"
		}
		names = append(names, v)
	}
	how := ", interleaved (odd runs in order, even runs reversed)"
	if len(r.Variants) == 1 {
		how = ""
	}
	return fmt.Sprintf("%s; %d runs each%s", strings.Join(names, ", "), r.Runs, how)
}

// machineLine says where and when: CPUs, model, kernel, date.
func (r *Result) machineLine() string {
	return fmt.Sprintf("%s; %s", r.Machine, r.Date.Format("2006-01-02 15:04 MST"))
}

// writeNotes lists the noisy runs and the failure, each line after prefix.
func (r *Result) writeNotes(w io.Writer, prefix string) {
	var noisy []string
	for _, rec := range r.Records {
		if rec.Noisy && rec.Busy != nil {
			noisy = append(noisy, fmt.Sprintf("%s #%d (busy %.2f, load %.2f)", rec.Variant, rec.Run, *rec.Busy, rec.Load1))
		}
	}
	if len(noisy) > 0 || r.Failure != "" {
		fmt.Fprintln(w)
	}
	if len(noisy) > 0 {
		fmt.Fprintf(w, "%snoisy runs (the host was not quiet within %s): %s\n", prefix, r.QuietWait, strings.Join(noisy, ", "))
	}
	if r.Failure != "" {
		fmt.Fprintf(w, "%sfailed: %s\n", prefix, r.Failure)
	}
}

// line is "b vs a: +12.3%, slower".
func (c Comparison) line() string {
	pct := "n/a"
	if c.ChangePct != nil {
		pct = fmt.Sprintf("%+.1f%%", *c.ChangePct)
	}
	return fmt.Sprintf("%s vs %s: %s, %s", c.Variant, c.Baseline, pct, c.Text)
}

// heading is "name (unit)".
func heading(m Metric) string {
	if m.Unit == "" {
		return m.Name
	}
	return m.Name + " (" + m.Unit + ")"
}

// decimals is how many decimals give the metric's largest value four
// significant digits (0 to 9), none when every figure is whole (counts):
// one number for the whole table, so that its values line up.
func decimals(m MetricSummary) int {
	var big float64
	whole := true
	for _, v := range m.Variants {
		big = max(big, math.Abs(v.Median), math.Abs(v.Min), math.Abs(v.Max))
		for _, x := range []float64{v.Median, v.Min, v.Max, v.IQR} {
			whole = whole && x == math.Trunc(x)
		}
	}
	if big == 0 || whole {
		return 0
	}
	return min(9, max(0, 3-int(math.Floor(math.Log10(big)))))
}

func num(v float64, decimals int) string {
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// mdEscape keeps a '|' in a name from ending a table cell.
func mdEscape(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}
