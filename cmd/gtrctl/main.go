// Command gtrctl is the operator's CLI for the GTR admin API: list cells,
// set weights, drain and restore cells (now or ramped), evacuate and
// restore a site's cells, explain a route, read or replace the routing
// table, and manage partners and their API keys.
//
//	gtrctl cells
//	gtrctl drain cell-b --percent 30 --over 5m
//	gtrctl restore cell-b --over 10m
//	gtrctl weight cell-c 50
//	gtrctl evacuate site-a --over 10m --dry-run   # which keys would leave the site
//	gtrctl evacuate site-a --over 10m
//	gtrctl restore-site site-a --over 30m
//	gtrctl explain --partner p-001 --market GB --type CARD_AUTHORIZATION
//	gtrctl table get > table.yaml           # the operator's table
//	gtrctl table get -o json > table.json   # the same, as JSON; apply takes either
//	gtrctl table apply -f table.yaml --dry-run
//	gtrctl table get --effective            # this replica's compiled view
//	gtrctl partners list
//	gtrctl partners add p-004 --currency EUR --markets GB,DE --key-out p-004.key
//	gtrctl partners suspend p-004
//	gtrctl partners add-key p-004
//	gtrctl partners revoke-key p-004 KEY_ID
//	gtrctl audit --since 1h --limit 50     # who changed what, before -> after
//	gtrctl drills                           # the drills kept, each report's signature verified (--ca)
//	gtrctl drills show ID                   # one drill's summary and whole report
//	gtrctl statement p-001 2026-03-01      # a partner's UTC day, per cell and in total
//	gtrctl operators init DIR               # offline: a token per role and the GTR's operators file
//	gtrctl version                          # this gtrctl's build (also gtrctl -version)
//
// Global flags (on any command): --addr (GTR_ADMIN_ADDR, default
// 127.0.0.1:7071), --token (GTR_ADMIN_TOKEN), --token-file
// (GTRCTL_TOKEN_FILE, else GTR_ADMIN_TOKEN_FILE), --ca (GTRCTL_CA),
// --server-name (GTRCTL_SERVER_NAME), --server-identity
// (GTRCTL_SERVER_IDENTITY), -o table|json, --timeout.
//
// gtrctl -h (or help) prints the commands, gtrctl COMMAND -h a command's
// flags, on stdout with exit status 0; a usage error prints them on stderr
// with exit status 2.
//
// The admin API speaks TLS only; its certificate is verified with --ca,
// else a local platform's development CA ($CELLPAY_DATA or .cellpay,
// pki/ca.crt) if it is there, else the system's roots; and it must carry
// the GTR's identity (--server-identity, spiffe://cellpay.internal/gtr):
// every component's certificate is of the same CA, and the host name alone
// would let a cell's, say, answer as the admin API and be handed the
// operator's token.
//
// The credential is an operator's token (cpo_<operator>_<secret>; its role
// decides what it may do): --token-file, else --token, else, when neither
// is given, the admin operator's token of a local platform
// ($CELLPAY_DATA or .cellpay, operators/admin.token) if it is there.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

const defaultAddr = "127.0.0.1:7071"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// globals are the flags every command takes.
type globals struct {
	addr, token, tokenFile, ca, serverName, output string
	serverIdentity                                 string
	timeout                                        time.Duration
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.addr, "addr", envOr("GTR_ADMIN_ADDR", defaultAddr), "GTR admin API address (env GTR_ADMIN_ADDR)")
	fs.StringVar(&g.token, "token", os.Getenv("GTR_ADMIN_TOKEN"), "operator token (env GTR_ADMIN_TOKEN); prefer --token-file: command lines are visible to every user")
	fs.StringVar(&g.tokenFile, "token-file", envOr("GTRCTL_TOKEN_FILE", os.Getenv("GTR_ADMIN_TOKEN_FILE")),
		"file holding the operator token (env GTRCTL_TOKEN_FILE or GTR_ADMIN_TOKEN_FILE; default .cellpay/operators/admin.token when present)")
	fs.StringVar(&g.ca, "ca", os.Getenv("GTRCTL_CA"), "CA certificate the admin API's certificate is verified with (env GTRCTL_CA; default .cellpay/pki/ca.crt when present, else the system's roots)")
	fs.StringVar(&g.serverName, "server-name", os.Getenv("GTRCTL_SERVER_NAME"), "name the admin API's certificate is verified for, when --addr is not it (a port-forward to 127.0.0.1 in Kubernetes: gtr-admin.cellpay-gtr.svc) (env GTRCTL_SERVER_NAME)")
	identity := hop.GTR
	if v, ok := os.LookupEnv("GTRCTL_SERVER_IDENTITY"); ok {
		identity = v
	}
	fs.StringVar(&g.serverIdentity, "server-identity", identity, "identity (URI SAN) the admin API's certificate must carry; \"\" accepts any certificate the CA verifies for the host, e.g. an admin API behind a proxy with a certificate of its own (env GTRCTL_SERVER_IDENTITY)")
	fs.StringVar(&g.output, "o", "table", "output: table (for people) or json (for scripts)")
	fs.DurationVar(&g.timeout, "timeout", 10*time.Second, "timeout of each call")
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

// cli is one invocation.
type cli struct {
	g      globals
	out    io.Writer
	errOut io.Writer
	client adminproto.AdminClient
}

// command is a subcommand: its flags, its positional arguments' names and
// what it does.
type command struct {
	name, args, help string
	flags            func(fs *flag.FlagSet)
	run              func(ctx context.Context, c *cli, args []string) error
	// offline: run needs no GTR, so none is dialled (operators init).
	offline bool
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: gtrctl COMMAND [ARGS] [FLAGS]\n\ncommands:")
	for _, cmd := range commands() {
		fmt.Fprintf(w, "  %-36s %s\n", strings.TrimSpace(cmd.name+" "+cmd.args), cmd.help)
	}
	fmt.Fprintln(w, "\nglobal flags: --addr, --token, --token-file, -o table|json, --timeout; gtrctl COMMAND -h for a command's flags; gtrctl -version for this gtrctl's build")
}

// errUsage is a usage error already reported.
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) == 1 || args[0] != "help" {
			usage(stdout) // asked for: not an error
			return 0
		}
		// gtrctl help COMMAND: the command's own -h.
		args = append(append([]string(nil), args[1:]...), "-h")
	case "-version", "--version":
		args = append([]string{"version"}, args[1:]...)
	}
	name := args[0]
	args = args[1:]
	if (name == "table" || name == "partners" || name == "callbacks" || name == "operators" || name == "txn" || name == "drills") && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = name+" "+args[0], args[1:]
	}
	var cmd *command
	for _, c := range commands() {
		if c.name == name {
			cmd = &c
			break
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "gtrctl: unknown command %q\n", name)
		usage(stderr)
		return 2
	}
	c := &cli{out: stdout, errOut: stderr}
	fs := flag.NewFlagSet("gtrctl "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	usageTo := func(w io.Writer) {
		fmt.Fprintf(w, "usage: gtrctl %s %s [FLAGS]\n%s\n\nflags:\n", cmd.name, cmd.args, cmd.help)
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
	}
	fs.Usage = func() {} // while parsing: printed below, where asked for or with the error
	c.g.register(fs)
	if cmd.flags != nil {
		cmd.flags(fs)
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usageTo(stdout) // asked for: not an error
			return 0
		}
		usageTo(stderr) // the flag package has said what is wrong
		return 2
	}
	fs.Usage = func() { usageTo(stderr) }
	if c.g.output != "table" && c.g.output != "json" {
		fmt.Fprintf(stderr, "gtrctl: -o: want table or json, got %q\n", c.g.output)
		return 2
	}
	if !cmd.offline {
		conn, err := c.dial()
		if err != nil {
			fmt.Fprintln(stderr, "gtrctl:", err)
			return 2
		}
		defer conn.Close()
		c.client = adminproto.NewAdminClient(conn)
	}
	if err := cmd.run(ctx, c, pos); err != nil {
		if errors.Is(err, errUsage) {
			fs.Usage()
			return 2
		}
		if st, ok := status.FromError(err); ok {
			fmt.Fprintf(stderr, "gtrctl: %s: %s\n", st.Code(), st.Message())
		} else {
			fmt.Fprintln(stderr, "gtrctl:", err)
		}
		return 1
	}
	return 0
}

// parseInterspersed lets positional arguments come before, between or after
// flags: "drain cell-b --percent 30" and "drain --percent 30 cell-b".
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			pos, args = append(pos, args[0]), args[1:]
		}
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		args = fs.Args()
	}
}

func (c *cli) dial() (*grpc.ClientConn, error) {
	tok, file := c.g.token, c.g.tokenFile
	if tok == "" && file == "" {
		file = defaultTokenFile()
	}
	if file != "" {
		var err error
		if tok, err = readToken(file); err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
	}
	caFile := c.g.ca
	if caFile == "" {
		caFile = defaultCAFile()
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.g.serverName}
	if caFile != "" {
		pool, err := tlsconf.CertPool(caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		tlsCfg.RootCAs = pool
	}
	if id := c.g.serverIdentity; id != "" {
		tlsCfg.VerifyConnection = hop.Pin(hop.Only(id))
	}
	// Answers up to the admin listener's own bound (grpclimits.Admin):
	// a list of drills carries their reports.
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16 << 20))}
	if tok != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(tok)))
	}
	return grpc.NewClient(c.g.addr, opts...)
}

// bearer sends the admin token as "authorization: Bearer <token>".
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }

func (c *cli) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.g.timeout)
}

func (c *cli) json() bool { return c.g.output == "json" }
