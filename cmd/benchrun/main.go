// Command benchrun runs benchmark commands side by side, interleaved and
// repeated, on a quiet host, and prints each metric's median and spread
// per variant and whether a variant differs from the first, the baseline
// (see internal/dev/benchrun for the method). Every make bench-* target runs
// its variants through it.
//
//	benchrun -v a='sleep 0.1' -v b='sleep 0.2'
//	benchrun -runs 6 -procs $(pgrep -f bin/cellpay) -per tx -md -json bench.json \
//	    -v on='loadgen -bench -n 5000' -v off='CELLPAY_X=0 loadgen -bench -n 5000'
//
// A command prints its figures as "BENCH <name> <value> [<unit>]" lines
// or Go benchmark result lines on stdout; benchrun adds the wall time and
// CPU time of each run.
//
// Exit status: 0 when every run succeeded, 1 when a command failed or the
// run was interrupted, 2 on bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/cellpay/cellpay/internal/buildinfo"
	"github.com/cellpay/cellpay/internal/dev/benchrun"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if buildinfo.Requested(args) { // -version (flags.go parses the rest)
		fmt.Fprintln(stdout, buildinfo.Read("benchrun"))
		return 0
	}
	opts, err := parseFlags(args, buildinfo.UsageOutput(args, stdout, stderr))
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2 // the flag package or parseFlags has said why
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C kills the process
	}()

	opts.cfg.Log = stderr
	res, err := benchrun.Run(ctx, opts.cfg)
	if errors.Is(err, benchrun.ErrInvalidConfig) {
		fmt.Fprintln(stderr, err) // the package's errors say "benchrun: "
		opts.discardJSON()
		return 2
	}
	if res != nil {
		if werr := writeReport(stdout, res, opts); werr != nil {
			fmt.Fprintf(stderr, "benchrun: %v\n", werr)
			return 1
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
