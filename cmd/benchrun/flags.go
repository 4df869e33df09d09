package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cellpay/cellpay/internal/dev/benchrun"
)

const usage = `usage: benchrun [-runs 5] [-quiet 0.15] [-quiet-wait 2m] [-procs PID] [-per METRIC]
                [-timeout 30m] [-json FILE] [-md] -v NAME=COMMAND [-v NAME=COMMAND ...]

Runs each COMMAND (sh -c) -runs times, interleaved, the first -v the
baseline, and prints each metric's median and spread per variant and
whether a variant differs from the baseline.
`

type options struct {
	cfg  benchrun.Config
	json *os.File // -json, created before the runs so a bad path fails first
	md   bool
}

// parseFlags reads the command line; on error it has already told stderr.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("benchrun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage, "\n")
		fs.PrintDefaults()
	}
	var o options
	c := &o.cfg
	fs.IntVar(&c.Runs, "runs", benchrun.DefaultRuns, fmt.Sprintf("runs of every variant (at most %d)", benchrun.MaxRuns))
	fs.Float64Var(&c.Quiet, "quiet", benchrun.DefaultQuiet, "CPU busy share of the host (over the last second) under which it counts as quiet")
	fs.DurationVar(&c.QuietWait, "quiet-wait", benchrun.DefaultQuietWait, "longest wait for a quiet host before each command; past it the run is marked noisy (0: no wait, no check)")
	fs.IntVar(&c.Procs, "procs", 0, "PID whose direct children's CPU (each with its process tree) is measured per run, as metrics cpu:<name>")
	fs.StringVar(&c.Per, "per", "", "metric the command prints (a count, e.g. tx) to divide the CPU figures by: cpu:<name> in µs/METRIC")
	fs.DurationVar(&c.Timeout, "timeout", benchrun.DefaultTimeout, "longest time of one command run; its process group is then killed")
	jsonPath := fs.String("json", "", "write every run's samples and the summaries as JSON to FILE")
	fs.BoolVar(&o.md, "md", false, "print the tables in Markdown, for BENCHMARKS.md")
	fs.Func("v", fmt.Sprintf("a variant, NAME=COMMAND (repeat; the first is the baseline; at most %d)", benchrun.MaxVariants), func(s string) error {
		name, cmd, ok := strings.Cut(s, "=")
		if !ok {
			return fmt.Errorf("%q: want NAME=COMMAND", s)
		}
		c.Variants = append(c.Variants, benchrun.Variant{Name: name, Command: cmd})
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, usageError(fs, stderr, "unexpected arguments: %v (quote each -v's command)", fs.Args())
	}
	if *jsonPath != "" {
		f, err := os.Create(*jsonPath)
		if err != nil {
			return o, usageError(fs, stderr, "-json: %v", err)
		}
		o.json = f
	}
	return o, nil
}

func usageError(fs *flag.FlagSet, stderr io.Writer, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	fmt.Fprintf(stderr, "benchrun: %v\n", err)
	fs.Usage()
	return err
}

// writeReport prints the tables on stdout and writes -json.
func writeReport(stdout io.Writer, res *benchrun.Result, o options) error {
	write := res.WriteText
	if o.md {
		write = res.WriteMarkdown
	}
	if err := write(stdout); err != nil {
		return err
	}
	if o.json == nil {
		return nil
	}
	err := res.WriteJSON(o.json)
	if cerr := o.json.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("-json: %w", err)
	}
	return nil
}

// discardJSON removes the -json file of a run that never started.
func (o options) discardJSON() {
	if o.json != nil {
		o.json.Close()
		os.Remove(o.json.Name())
	}
}
