// Command cellpay-check reads a finished run back (the GTR's
// GetTransaction, the issuer simulator's effect counters and every cell's
// database) and reports lost transactions, duplicated issuer effects,
// records past the point of no return in two cells and answers that differ
// from the final record. A transaction is (partner_id, id) throughout:
// transaction IDs are a namespace per partner. See package internal/dev/checker.
//
//	cellpay-check -answers answers.jsonl \
//	    -cell cell-a=postgres://... -cell cell-b=postgres://... -cell cell-c=postgres://...
//	cellpay-check -answers answers.jsonl -wait 30s -json -cell ...
//
// Flags:
//
//	-answers FILE       partner answers, one JSON object per line, each with
//	                    its partner_id and id (required)
//	-gtr ADDR           GTR partner API (default 127.0.0.1:7070)
//	-issuer ADDR        issuer simulator (default 127.0.0.1:7090)
//	-ca, -cert, -key    the CA of the GTR's and the issuer's certificates, and
//	                    the client certificate towards the issuer (default
//	                    .cellpay/pki/ca.crt, and ops.crt, ops.key beside it:
//	                    make run's)
//	-plaintext          no TLS to either (test servers only)
//	-cell ID=URL        a cell's database; repeat for every cell (required)
//	-wait DURATION      first wait up to this long until no transaction is PENDING
//	-concurrency N      GetTransaction calls in flight (default 32)
//	-examples N         example transactions per problem (default 10)
//	-json               print the report as JSON
//
// Exit status: 0 when the invariants hold, 1 when they do not (or PENDING
// did not resolve within -wait), 2 on a usage error, 3 when the run could
// not be read.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/cellpay/cellpay/internal/buildinfo"
	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	cfg     checker.Config
	answers string
	wait    time.Duration
	json    bool
}

// cellFlags collects repeated -cell ID=URL flags.
type cellFlags []checker.Cell

func (c *cellFlags) String() string {
	ids := make([]string, len(*c))
	for i, cell := range *c {
		ids[i] = cell.ID
	}
	return strings.Join(ids, ",")
}

func (c *cellFlags) Set(v string) error {
	id, url, ok := strings.Cut(v, "=")
	if !ok || id == "" || url == "" {
		return errors.New("want ID=URL, e.g. cell-a=postgres://127.0.0.1:5432/cell_a")
	}
	*c = append(*c, checker.Cell{ID: id, DatabaseURL: url})
	return nil
}

// errVersion is -version's: parseFlags stops, and run prints the version.
var errVersion = errors.New("version requested")

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	var cells cellFlags
	fs := flag.NewFlagSet("cellpay-check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.answers, "answers", "", "partner answers, JSON Lines, each with partner_id and id (required)")
	fs.StringVar(&o.cfg.GTRAddr, "gtr", "127.0.0.1:7070", "GTR partner API address")
	ca := fs.String("ca", ".cellpay/pki/ca.crt", "CA certificate of the GTR's TLS certificate")
	keys := fs.String("keys", ".cellpay/partners", "folder of <partner>.key API key files: reads go out as each answer's partner")
	plaintext := fs.Bool("plaintext", false, "talk to the GTR and the issuer in plaintext without keys or certificates (test servers only)")
	cert := fs.String("cert", "", "client certificate towards the issuer (identity spiffe://cellpay.internal/ops, which alone may read its effect counters), checked against -ca (default ops.crt beside -ca, as make run writes it)")
	key := fs.String("key", "", "private key of -cert (default ops.key beside -ca)")
	fs.StringVar(&o.cfg.IssuerAddr, "issuer", "127.0.0.1:7090", "issuer simulator address")
	fs.Var(&cells, "cell", "a cell's database as ID=URL; repeat for every cell (required)")
	fs.DurationVar(&o.wait, "wait", 0, "wait up to this long for PENDING transactions to resolve first")
	fs.IntVar(&o.cfg.Concurrency, "concurrency", checker.DefaultConcurrency, "GetTransaction calls in flight")
	fs.IntVar(&o.cfg.Examples, "examples", checker.DefaultExamples, "example transactions per problem")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	version := fs.Bool("version", false, buildinfo.FlagUsage)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if *version {
		return o, errVersion
	}
	o.cfg.Cells = cells
	switch {
	case fs.NArg() > 0:
		err := fmt.Errorf("unexpected arguments: %v", fs.Args())
		fmt.Fprintf(stderr, "cellpay-check: %v\n", err)
		return o, err
	case o.answers == "":
		err := errors.New("-answers is required")
		fmt.Fprintf(stderr, "cellpay-check: %v\n", err)
		return o, err
	case len(cells) == 0:
		err := errors.New("at least one -cell ID=URL is required")
		fmt.Fprintf(stderr, "cellpay-check: %v\n", err)
		return o, err
	}
	if !*plaintext {
		opts, err := platform.PartnerDialOptions(*ca, *keys)
		if err != nil {
			fmt.Fprintf(stderr, "cellpay-check: GTR credentials: %v\n", err)
			return o, err
		}
		o.cfg.GTRDialOptions = opts
		dir := filepath.Dir(*ca)
		files := tlsconf.Files{Cert: cmp.Or(*cert, filepath.Join(dir, "ops.crt")), Key: cmp.Or(*key, filepath.Join(dir, "ops.key")), CA: *ca}
		issuer, _, err := hop.DialOption(files, hop.Only(hop.Issuer)) // reloads until the process exits
		if err != nil {
			fmt.Fprintf(stderr, "cellpay-check: issuer credentials: %v\n", err)
			return o, err
		}
		o.cfg.IssuerDialOptions = []grpc.DialOption{issuer}
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, buildinfo.UsageOutput(args, stdout, stderr))
	if errors.Is(err, errVersion) {
		fmt.Fprintln(stdout, buildinfo.Read("cellpay-check"))
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	answers, err := readAnswers(o.answers)
	if err != nil {
		fmt.Fprintf(stderr, "cellpay-check: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	code := 0
	if o.wait > 0 {
		took, err := checker.WaitResolved(ctx, o.cfg, uniqueKeys(answers), o.wait)
		switch {
		case errors.Is(err, checker.ErrNotResolved):
			fmt.Fprintf(stderr, "cellpay-check: %v\n", err)
			code = 1 // still report what is there
		case err != nil:
			fmt.Fprintf(stderr, "cellpay-check: %v\n", err)
			return 3
		default:
			fmt.Fprintf(stderr, "cellpay-check: every PENDING resolved in %v\n", took.Round(time.Millisecond))
		}
	}
	rep, err := checker.Check(ctx, o.cfg, answers)
	if errors.Is(err, checker.ErrInvalidConfig) {
		fmt.Fprintf(stderr, "cellpay-check: %v\n", err)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "cellpay-check: %v\n", err)
		return 3
	}
	if err := printReport(stdout, rep, o.json); err != nil {
		fmt.Fprintf(stderr, "cellpay-check: %v\n", err)
		return 3
	}
	if !rep.OK() {
		code = 1
	}
	return code
}

func readAnswers(path string) ([]checker.Answer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return checker.ReadAnswers(f)
}

// uniqueKeys are the answers' transactions (partner and ID), once each.
// Every one is waited for, not only those answered PENDING: a partner that
// got DEADLINE_EXCEEDED after the point of no return has a PENDING record
// too.
func uniqueKeys(answers []checker.Answer) []idempotency.Key {
	seen := make(map[idempotency.Key]bool)
	var keys []idempotency.Key
	for _, a := range answers {
		if k := a.Key(); !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

func printReport(w io.Writer, rep checker.Report, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	_, err := io.WriteString(w, rep.String())
	return err
}
