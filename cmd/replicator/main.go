// Command replicator publishes Cellpay reference data (currencies, FX rates,
// merchant category codes) to NATS JetStream as numbered versions, and shows
// which version each cell serves.
//
//	replicator [-nats-url URL] [-tls-cert F -tls-key F -tls-ca F] snapshot [-source DIR|FILE] [-unchecked] [-json]
//	replicator [-nats-url URL] update [-rate CUR=RATE]... [-mcc CODE=CATEGORY:RISK]... [-json]
//	replicator [-nats-url URL] watch [-source DIR|FILE] [-interval 1s]
//	replicator [-nats-url URL] status [-wait 2.5s] [-json]
//
// The source format is described in config/refdata/README.md. A snapshot
// identical to the newest version creates no version; every message carries
// an ID, so that JetStream stores a retried publish once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/cellpay/cellpay/internal/buildinfo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:])
	var usage usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0) // asked for: parse printed the usage on stdout
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, "replicator:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "replicator:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("replicator", flag.ContinueOnError)
	var target natsTarget
	fs.StringVar(&target.URL, "nats-url", env("REPLICATOR_NATS_URL", "nats://127.0.0.1:4222"), "NATS server (env REPLICATOR_NATS_URL)")
	fs.StringVar(&target.TLS.Cert, "tls-cert", env("REPLICATOR_TLS_CERT", ""), "the replicator's certificate (identity spiffe://cellpay.internal/replicator), its NATS identity (env REPLICATOR_TLS_CERT); with -tls-key and -tls-ca the replicator speaks TLS to NATS; \"\" for plaintext NATS without authentication")
	fs.StringVar(&target.TLS.Key, "tls-key", env("REPLICATOR_TLS_KEY", ""), "its private key (env REPLICATOR_TLS_KEY)")
	fs.StringVar(&target.TLS.CA, "tls-ca", env("REPLICATOR_TLS_CA", ""), "CA of the NATS server's certificate (env REPLICATOR_TLS_CA)")
	fs.IntVar(&target.Replicas, "replicas", envInt("REPLICATOR_REPLICAS", 3), "replicas of the reference data stream if this publish creates it (nobody has yet): 3 on a three-server NATS cluster, 1 on a lone server; an existing stream is kept as it is (env REPLICATOR_REPLICAS)")
	version := fs.Bool("version", false, buildinfo.FlagUsage)
	if err := parse(fs, "replicator [FLAGS] snapshot|update|watch|status [FLAGS] (replicator COMMAND -h)", args); err != nil {
		return err
	}
	if *version {
		fmt.Println(buildinfo.Read("replicator"))
		return nil
	}
	if fs.NArg() == 0 {
		return usageError{errors.New("want a command: snapshot, update, watch or status")}
	}
	cmd, ok := commands[fs.Arg(0)]
	if !ok {
		return usageError{fmt.Errorf("unknown command %q: want snapshot, update, watch or status", fs.Arg(0))}
	}
	return cmd(ctx, target, fs.Args()[1:])
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if v, ok := os.LookupEnv(name); ok {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return def
}

type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// parse parses args into fs, whose command line is synopsis. Asked for
// (-h, --help), the usage goes to stdout and the error wraps flag.ErrHelp,
// which is not a failure; a wrong flag's usage goes to stderr after what
// is wrong, as a usageError.
func parse(fs *flag.FlagSet, synopsis string, args []string) error {
	fs.Usage = func() {} // printed below, where it belongs
	err := fs.Parse(args)
	if err == nil {
		return nil
	}
	out := os.Stderr
	if errors.Is(err, flag.ErrHelp) {
		out = os.Stdout
	}
	fmt.Fprintf(out, "usage: %s\n\nflags:\n", synopsis)
	fs.SetOutput(out)
	fs.PrintDefaults()
	fs.SetOutput(nil)
	return usageError{err}
}
