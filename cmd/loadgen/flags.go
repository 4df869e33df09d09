package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/client"
	"github.com/cellpay/cellpay/pkg/client/failover"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// Default addresses from docs/design/README.md's local defaults.
const (
	defaultGTRAddr  = "127.0.0.1:7070"
	defaultCellAddr = "127.0.0.1:7081"
)

// defaultTimeout bounds each request, and each follow-up (load.Config's
// default too).
const defaultTimeout = 5 * time.Second

// Default trust material of a local platform (make run's data folder).
const (
	defaultCA   = ".cellpay/pki/ca.crt"
	defaultKeys = ".cellpay/partners"
)

type options struct {
	cfg       load.Config
	format    reportFormat
	progress  bool
	ca, keys  string
	cert, key string
	plaintext bool
	answers   string
}

// parseFlags reads the command line; on error it has already told stderr.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	c := &o.cfg
	fs.StringVar(&c.Target, "target", load.TargetGTR, "what to load: gtr (Payments API) or cell (Cell.Process, attempt 1)")
	fs.StringVar(&c.Addr, "addr", "", "target host:port, loopback only (default "+defaultGTRAddr+" for gtr, "+defaultCellAddr+" for cell); for gtr, PRIMARY,BACKUP sends through the client's failover between the two access points")
	fs.StringVar(&c.Mode, "mode", load.ModeClosed, "open (fixed -rate) or closed (fixed -c)")
	fs.Float64Var(&c.Rate, "rate", 100, "requests per second (open loop only)")
	fs.IntVar(&c.Concurrency, "c", 16, "workers (closed loop) or most outstanding requests (open loop)")
	fs.Int64Var(&c.Count, "n", 1000, fmt.Sprintf("most requests to issue (at most %d)", load.MaxCount))
	fs.DurationVar(&c.Duration, "d", 30*time.Second, fmt.Sprintf("longest time to issue requests (at most %v)", load.MaxDuration))
	fs.Uint64Var(&c.Seed, "seed", 1, "seed for request payloads")
	fs.StringVar(&c.RunID, "run-id", "", "transaction ID prefix (default random)")
	fs.Float64Var(&c.DeclineShare, "decline-share", 0, "share (0..1) of card requests using the declining test card")
	fs.DurationVar(&c.PerRequestTimeout, "timeout", defaultTimeout, "timeout of each request")
	fs.StringVar(&o.ca, "ca", defaultCA, "CA certificate the GTR's TLS certificate is checked against (gtr target)")
	fs.StringVar(&o.keys, "keys", defaultKeys, "folder of <partner>.key API key files; the load spreads over these partners (gtr target)")
	fs.StringVar(&o.cert, "cert", "", "client certificate for the cell target, checked by the cell against -ca: the GTR's, the only identity a cell serves Process to (default gtr.crt beside -ca, as make run writes it)")
	fs.StringVar(&o.key, "key", "", "private key of -cert (cell target; default gtr.key beside -ca)")
	fs.BoolVar(&o.plaintext, "plaintext", false, "talk plaintext without API keys or certificates (a cell with no TLS files, or a test server); never the GTR")
	fs.StringVar(&o.answers, "answers", "", "write one JSON line per call to FILE: the checker's answers format (partner_id, id, status, ...) plus the endpoint that answered, or a follow-up's kind and original")
	fs.Float64Var(&c.FollowUps, "followups", 0, "share (0..1) of approved authorizations followed, within -d, by captures (one or two, of all or part of it) then refunds (one or two, of all or part of the captures), or by a void (a quarter of them), each follow-up with its own ID, on -c more workers (gtr target)")
	accessPoints := fs.String("access-points", "", fmt.Sprintf("for gtr, SITE=HOST:PORT,... (loopback only, up to %d, several per site) instead of -addr: sends through the client's failover between these access points by site, preferring the first listed of -home-site", client.MaxAccessPoints))
	fs.StringVar(&c.Client.HomeSite, "home-site", "", "the partner's home site, one of the sites of -access-points (required with it)")
	fo := &c.Client.Failover
	strategy := fs.String("failover", "", "failover strategy between the access points: probe, success-rate or both (default both)")
	fs.DurationVar(&fo.ProbeInterval, "probe-interval", 0, "failover: how often the primary (with -access-points, the first of -home-site) is probed (default 1m)")
	fs.DurationVar(&fo.EvalInterval, "eval-interval", 0, "failover: how often the primary's success rate is judged (default 1m)")
	fs.DurationVar(&fo.WindowAge, "window-age", 0, "failover: oldest result in the success-rate window (default 10m)")
	fs.IntVar(&fo.SplitRatio, "split", 0, "failover: percent of calls kept on the primary while it serves, 1..100 (default 99)")
	fs.IntVar(&fo.MaxSwitches, "max-switches", 0, "failover: most switches within -damp-window (default 4)")
	fs.DurationVar(&fo.DampWindow, "damp-window", 0, "failover: flap damping window (default 10m)")
	fs.DurationVar(&c.Client.CallTimeout, "call-timeout", 0, "failover: read timeout of one call before the retry on another access point (default -timeout/2)")
	fs.DurationVar(&c.Client.ProbeTimeout, "probe-timeout", 0, "failover: timeout of one probe (default 1s)")
	asJSON := fs.Bool("json", false, "print the report as JSON on stdout")
	bench := fs.Bool("bench", false, "print the report as BENCH lines on stdout, for benchrun (tx, throughput, latency percentiles, errors)")
	fs.BoolVar(&o.progress, "progress", false, "show a progress bar on stderr even when it is not a terminal")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, usageError(fs, stderr, "unexpected arguments: %v", fs.Args())
	}
	switch {
	case *asJSON && *bench:
		return o, usageError(fs, stderr, "-json and -bench: pick one report format")
	case *asJSON:
		o.format = formatJSON
	case *bench:
		o.format = formatBench
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["rate"] && c.Mode != load.ModeOpen {
		return o, usageError(fs, stderr, "-rate applies to -mode open only")
	}
	if err := checkFollowUps(o); err != nil {
		return o, usageError(fs, stderr, "%v", err)
	}
	fo.Strategy = failover.Strategy(*strategy)
	if addrs := strings.Split(c.Addr, ","); len(addrs) > 1 {
		if c.Target != load.TargetGTR {
			return o, usageError(fs, stderr, "-addr: a list of access points is for the gtr target only")
		}
		c.Endpoints = addrs
		c.Addr = addrs[0]
	}
	if err := setAccessPoints(c, *accessPoints, set); err != nil {
		return o, usageError(fs, stderr, "%v", err)
	}
	if c.Addr == "" && len(c.AccessPoints) == 0 { // with them, load.Run's default: the first of -home-site
		c.Addr = defaultGTRAddr
		if c.Target == load.TargetCell {
			c.Addr = defaultCellAddr
		}
	}
	if c.Target == load.TargetCell && !o.plaintext {
		// A cell serves Process to the GTR's identity only: play it.
		cert, key := cmp.Or(o.cert, filepath.Join(filepath.Dir(o.ca), "gtr.crt")), cmp.Or(o.key, filepath.Join(filepath.Dir(o.ca), "gtr.key"))
		opt, _, err := hop.DialOption(tlsconf.Files{Cert: cert, Key: key, CA: o.ca}, hop.IsCell) // reloads until the process exits
		if err != nil {
			return o, usageError(fs, stderr, "cell TLS: %v (make run writes the GTR's certificate; or -cert, -key, -ca)", err)
		}
		c.DialOptions = []grpc.DialOption{opt}
	} else if !o.plaintext {
		keys, err := partners.ReadKeyDir(o.keys)
		if err != nil {
			return o, usageError(fs, stderr, "API keys: %v (make run writes them; or -keys DIR)", err)
		}
		if len(keys) == 0 {
			return o, usageError(fs, stderr, "API keys: no <partner>.key file in %s", o.keys)
		}
		tlsOpt, err := client.TLS(o.ca)
		if err != nil {
			return o, usageError(fs, stderr, "-ca: %v", err)
		}
		for p := range keys {
			c.Partners = append(c.Partners, p)
		}
		slices.Sort(c.Partners)
		c.DialOptions = []grpc.DialOption{tlsOpt, grpc.WithChainUnaryInterceptor(client.PartnerKeys(keys))}
	}
	return o, nil
}

// checkFollowUps refuses, naming the flags, a -followups the run cannot
// play (load.Run would refuse it too, naming its fields): a share
// outside 0..1, a target without follow-ups, or a -run-id that leaves
// no room for a follow-up's suffix in its 64 characters.
func checkFollowUps(o options) error {
	c := o.cfg
	share := c.FollowUps
	if !(share >= 0 && share <= 1) {
		return fmt.Errorf("-followups %v: want a share 0..1", share)
	}
	if share == 0 {
		return nil
	}
	if c.Target != load.TargetGTR {
		return fmt.Errorf("-followups: follow-ups go through the Payments API, the gtr target only (-target %s)", c.Target)
	}
	if c.Count > 0 && c.Count <= load.MaxCount {
		if most := idempotency.MaxKeyLen - 1 - len(strconv.FormatInt(c.Count, 10)) - load.FollowUpSuffixLen; len(c.RunID) > most {
			return fmt.Errorf("-run-id %q: at most %d characters with -followups (a follow-up's ID is its authorization's and up to %d more)", c.RunID, most, load.FollowUpSuffixLen)
		}
	}
	return nil
}

// setAccessPoints sets c's access points from -access-points' list of
// SITE=HOST:PORT. It refuses, naming the flags, what load.Run would
// otherwise refuse naming its fields: a list for the cell target or
// beside -addr, an entry not of that form, more than
// client.MaxAccessPoints, and a -home-site missing, not among the sites
// or without the list. The sites' form and each address once are
// pkg/client's to check (load.Run passes its refusal on).
func setAccessPoints(c *load.Config, list string, set map[string]bool) error {
	home := c.Client.HomeSite
	if list == "" {
		if set["home-site"] {
			return fmt.Errorf("-home-site %q: with -access-points only", home)
		}
		return nil
	}
	if c.Target != load.TargetGTR {
		return fmt.Errorf("-access-points: access points are for the gtr target only (-target %s)", c.Target)
	}
	if set["addr"] {
		return errors.New("-addr and -access-points: give the access points in -access-points only")
	}
	var sites []string
	for e := range strings.SplitSeq(list, ",") {
		site, addr, ok := strings.Cut(e, "=")
		if !ok || site == "" || addr == "" {
			return fmt.Errorf("-access-points: %q: want SITE=HOST:PORT, such as site-a=127.0.0.1:7070", e)
		}
		c.AccessPoints = append(c.AccessPoints, client.AccessPoint{Addr: addr, Site: site})
		if !slices.Contains(sites, site) {
			sites = append(sites, site)
		}
	}
	switch {
	case len(c.AccessPoints) > client.MaxAccessPoints:
		return fmt.Errorf("-access-points: %d access points, at most %d", len(c.AccessPoints), client.MaxAccessPoints)
	case home == "":
		return fmt.Errorf("-home-site: required with -access-points, one of %q", sites)
	case !slices.Contains(sites, home):
		return fmt.Errorf("-home-site %q: no access point of -access-points is in it (sites %q)", home, sites)
	}
	return nil
}

func usageError(fs *flag.FlagSet, stderr io.Writer, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	fmt.Fprintf(stderr, "loadgen: %v\n", err)
	fs.Usage()
	return err
}
