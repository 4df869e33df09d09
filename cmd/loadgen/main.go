// Command loadgen drives synthetic payment load at a local GTR or cell and
// prints a report: a table, JSON with -json, or BENCH lines for benchrun
// with -bench. It only ever targets loopback addresses, and every run is
// bounded by -n and -d. With -followups, a share of the approved
// authorizations is followed within the same bounds by captures and
// refunds, or a void, each follow-up a transaction of its own. Through a
// GTR, -addr PRIMARY,BACKUP, or -access-points SITE=HOST:PORT,... (up to
// six, several per site) with -home-site, sends through the partners'
// client's failover between those access points.
//
//	loadgen -mode closed -c 32 -n 10000
//	loadgen -mode open -rate 500 -d 1m -json > report.json
//	loadgen -target cell -addr 127.0.0.1:7082 -n 2000
//	loadgen -n 5000 -bench   # BENCH lines, for benchrun
//	loadgen -addr 127.0.0.1:7070,127.0.0.1:7170 -answers answers.jsonl -json   # through the client's failover
//	loadgen -access-points site-a=127.0.0.1:7070,site-a=127.0.0.1:7170,site-b=127.0.0.1:7270 -home-site site-a -json   # failover by site
//	loadgen -n 2000 -followups 0.3 -answers answers.jsonl   # 30% of approved authorizations captured and refunded, or voided
//
// Exit status: 0 when at least one request completed, 1 when none did or
// the run failed, 2 on a configuration error.
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
	"github.com/cellpay/cellpay/internal/dev/load"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout io.Writer, stderr *os.File) int {
	if buildinfo.Requested(args) { // -version (flags.go parses the rest)
		fmt.Fprintln(stdout, buildinfo.Read("loadgen"))
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

	var answers *answerWriter
	if opts.answers != "" {
		if answers, err = createAnswers(opts.answers); err != nil {
			fmt.Fprintf(stderr, "loadgen: %v\n", err)
			return 2
		}
		opts.cfg.OnResult = answers.write
		opts.cfg.OnFollowUp = answers.writeFollowUp
	}
	bar := newProgress(stderr, opts.progress || isTerminal(stderr))
	rep, err := load.Run(ctx, opts.cfg, bar.update)
	bar.close()
	if answers != nil {
		if cerr := answers.close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return exit(stdout, stderr, rep, err, opts.format)
}

// exit prints the report, or the run's error, and returns the exit
// status.
func exit(stdout io.Writer, stderr *os.File, rep load.Report, err error, format reportFormat) int {
	if errors.Is(err, load.ErrInvalidConfig) {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return 1
	}
	if err := printReport(stdout, rep, format); err != nil {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return 1
	}
	if rep.Completed == 0 {
		fmt.Fprintln(stderr, "loadgen: no request completed")
		return 1
	}
	return 0
}
