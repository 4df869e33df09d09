// Command cellpay-sim runs the deterministic simulation of the platform
// (package internal/dev/model: the real cellside and gtrside machines and
// the follow-ups' pure rules under a simulated network, clock, issuer,
// directory and stores) over many seeds, each with a fault mix of its
// own, and reports the violations, the coverage of the interesting states
// and the slowest seed.
// Its last line is
//
//	sim: seeds N, violations V, unreached R
//
// Usage:
//
//	cellpay-sim [-seeds 10000] [-from 1] [-workers N] [-rules Knob,...] [-keep DIR]
//	cellpay-sim -seed S [-rules Knob,...]   # one seed, its whole trace
//
// -rules breaks rules of the protocol on purpose (model.Rules' knobs, e.g.
// PendingWithoutProceeding), to see the simulator catch them. -keep writes
// each failing seed, with its fault mix and violation, to DIR (make sim:
// internal/dev/model/testdata/sim, which every make test replays).
//
// Exit status: 0 when no seed broke an invariant and every interesting
// state was reached, 1 otherwise, 2 on a usage error.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/cellpay/cellpay/internal/buildinfo"
	"github.com/cellpay/cellpay/internal/dev/model"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cellpay-sim", flag.ContinueOnError)
	fs.SetOutput(buildinfo.UsageOutput(args, stdout, stderr))
	seeds := fs.Int("seeds", 10000, "seeds to run")
	from := fs.Uint64("from", 1, "first seed")
	one := fs.Uint64("seed", 0, "run this one seed and print its trace")
	workers := fs.Int("workers", runtime.GOMAXPROCS(0), "seeds run at once")
	knobs := fs.String("rules", "", "rule knobs to break, comma-separated (model.Rules field names)")
	keep := fs.String("keep", "", "directory to write failing seeds to")
	version := fs.Bool("version", false, "print the build and exit")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *version {
		fmt.Fprintln(stdout, buildinfo.Read("cellpay-sim"))
		return 0
	}
	rules, err := model.RulesNamed(*knobs)
	if err != nil || *seeds < 1 || *workers < 1 || *from == 0 {
		fmt.Fprintln(stderr, "cellpay-sim: -seeds and -workers at least 1, -from at least 1, -rules knobs of model.Rules:", err)
		return 2
	}
	if *one != 0 {
		res := model.Run(*one, rules)
		fmt.Fprintln(stdout, strings.Join(res.Trace, "\n"))
		if res.Violation != "" {
			fmt.Fprintf(stdout, "seed %d: VIOLATION: %s\n", res.Seed, res.Violation)
			return 1
		}
		fmt.Fprintf(stdout, "seed %d: ok\n", res.Seed)
		return 0
	}
	start := time.Now()
	sum := sweep(*from, *seeds, rules, *workers)
	for _, f := range sum.Failed {
		fmt.Fprintf(stdout, "seed %d: VIOLATION: %s\n  mix: %s\n  reproduce: cellpay-sim -seed %d -rules %q\n", f.Seed, f.Violation, f.Mix, f.Seed, *knobs)
		if *keep != "" {
			k := model.Kept{Seed: f.Seed, Rules: *knobs, Mix: f.Mix.String(), Violation: f.Violation}
			path := filepath.Join(*keep, fmt.Sprintf("found-%d.txt", f.Seed))
			if err := os.WriteFile(path, []byte(k.Format()), 0o644); err != nil {
				fmt.Fprintln(stderr, "cellpay-sim:", err)
				return 1
			}
			fmt.Fprintf(stdout, "  kept: %s\n", path)
		}
	}
	fmt.Fprintf(stdout, "seeds %d (from %d) in %v on %d workers; slowest seed %d (%v)\ncoverage (seeds that reached each state):\n%s",
		sum.Seeds, *from, time.Since(start).Round(time.Millisecond), *workers, sum.Slowest, sum.SlowestTime.Round(time.Microsecond), sum.Coverage())
	if u := sum.Unreached(); len(u) > 0 {
		fmt.Fprintf(stdout, "unreached: %s\n", strings.Join(u, "; "))
	}
	fmt.Fprintln(stdout, sum.Line())
	if len(sum.Failed) > 0 || len(sum.Unreached()) > 0 {
		return 1
	}
	return 0
}

// sweep runs n seeds from from on workers goroutines; each run is
// independent and single-threaded (model.RunQuiet: a failing seed's trace
// only), and the summary does not depend on the order they finish in.
func sweep(from uint64, n int, rules model.Rules, workers int) model.Summary {
	type done struct {
		res  model.Result
		took time.Duration
	}
	next := make(chan uint64)
	out := make(chan done, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for s := range next {
				t0 := time.Now()
				res := model.RunQuiet(s, rules)
				out <- done{res, time.Since(t0)}
			}
		})
	}
	go func() {
		for i := range n {
			next <- from + uint64(i)
		}
		close(next)
		wg.Wait()
		close(out)
	}()
	var sum model.Summary
	for d := range out {
		sum.Add(d.res, d.took)
	}
	return sum
}
