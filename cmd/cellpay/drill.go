package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/internal/dev/drill"
	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/hop"
	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/pkg/client"
	"github.com/cellpay/cellpay/pkg/client/failover"
)

// drillUsage is the drill subcommand's help.
const drillUsage = `cellpay drill [flags]: a disaster recovery drill against the running
local platform (make run), as the WeChat Pay cross-city guide describes:
under load from the partners' client through both access points, freeze one
path (SIGSTOP: an access point, a cell, or with make run SITES=2 a whole
site, -site SITE), wait, thaw it (SIGCONT), then the next, and report when
the client switched and switched back, the errors the partner saw, and the
checker's verdict. Exit status 0 when there was no
business loss, 1 when there was, 2 on a usage error.

The report is signed with the operators' certificate (pki/ops.crt) and
kept by the primary access point's GTR (Admin.RecordDrill, with the
operator role's token, operators/operator.token): it prints the report's
ID, which gtrctl drills lists and gtrctl drills show prints, verified.
A report that could not be kept is said on stderr, and the drill exits 1
even when it passed, so that no report is lost unnoticed; -keep=false
does not keep it, -report FILE writes the signed report to FILE too.

The client's intervals are shortened from the guide's minute to a second so
that the drill takes about a minute; -probe-interval 1m -eval-interval 1m
-damp-window 10m -hold 3m runs it with the guide's numbers.

`

// drillOptions are the drill's flags.
type drillOptions struct {
	data    string
	targets []string
	rate    float64
	hold    time.Duration
	settle  time.Duration
	fo      failover.Config
	probeTO time.Duration
	callTO  time.Duration
	// requestTO: the partner's budget for a transaction, retries included.
	requestTO time.Duration
	json      bool
	// keep: record the signed report with the GTR; reportFile, if set,
	// gets the signed report too; tokenFile is the operator's token.
	keep                  bool
	reportFile, tokenFile string
}

func parseDrill(args []string, stderr io.Writer) (drillOptions, error) {
	var o drillOptions
	fs := flag.NewFlagSet("cellpay drill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, drillUsage); fs.PrintDefaults() }
	fs.StringVar(&o.data, "data", env("CELLPAY_DATA", ".cellpay"), "the running platform's data directory (CELLPAY_DATA)")
	targets := fs.String("cut", "primary,backup", "what to cut, in order: primary, backup (access points), a cell ID, or a site of a platform run with -sites 2 (its access point and its cells)")
	site := fs.String("site", "", "cut this site whole instead (-cut SITE): on a platform run with -sites 2, its access point and its cells")
	fs.Float64Var(&o.rate, "rate", 50, "partner calls per second (open loop)")
	fs.DurationVar(&o.hold, "hold", 12*time.Second, "how long each cut lasts")
	fs.DurationVar(&o.settle, "settle", 8*time.Second, "load after each restore, before the next cut")
	strategy := fs.String("failover", string(failover.Both), "the client's failover strategy: probe, success-rate or both")
	fs.DurationVar(&o.fo.ProbeInterval, "probe-interval", time.Second, "the client's probe interval (the guide's is 1m)")
	fs.DurationVar(&o.fo.EvalInterval, "eval-interval", time.Second, "the client's success-rate evaluation interval (the guide's is 1m)")
	fs.DurationVar(&o.fo.WindowAge, "window-age", 10*time.Second, "the client's success-rate window (the guide's is 10m)")
	fs.DurationVar(&o.fo.DampWindow, "damp-window", 10*time.Second, "the client's flap damping window, at most 4 switches in it (the client's default is 10m: with the drill's shortened intervals, a drill of several cuts would leave it damped away after the second)")
	fs.DurationVar(&o.probeTO, "probe-timeout", 200*time.Millisecond, "one probe's timeout")
	fs.DurationVar(&o.callTO, "call-timeout", time.Second, "one call's read timeout before its retry on the other access point")
	fs.DurationVar(&o.requestTO, "request-timeout", 30*time.Second, "a partner's budget for one transaction, its retries included: well over the 10 s a cell holds a transaction that a cut caught mid-handshake")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	fs.BoolVar(&o.keep, "keep", true, "sign the report with the operators' certificate and keep it in the primary GTR (gtrctl drills)")
	fs.StringVar(&o.reportFile, "report", "", "write the signed report to this file too (JSON: the report's bytes, signature and certificate)")
	fs.StringVar(&o.tokenFile, "token-file", "", "the operator token the report is kept with (default <data>/operators/operator.token)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "cellpay drill: unexpected arguments %q\n", fs.Args())
		return o, errors.New("usage")
	}
	o.fo.Strategy = failover.Strategy(*strategy)
	if *site != "" {
		*targets = *site
	}
	for _, t := range strings.Split(*targets, ",") {
		if t = strings.TrimSpace(t); t != "" {
			o.targets = append(o.targets, t)
		}
	}
	if len(o.targets) == 0 {
		fmt.Fprintln(stderr, "cellpay drill: -cut names nothing")
		return o, errors.New("usage")
	}
	if o.tokenFile == "" {
		o.tokenFile = defaultDrillToken(o.data)
	}
	if o.requestTO <= o.callTO {
		fmt.Fprintf(stderr, "cellpay drill: -request-timeout %v: want more than -call-timeout (%v), to leave room for a retry\n", o.requestTO, o.callTO)
		return o, errors.New("usage")
	}
	return o, nil
}

// runDrill is `cellpay drill`.
func runDrill(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseDrill(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	ri, err := platform.ReadRunInfo(o.data)
	if err != nil {
		fmt.Fprintf(stderr, "cellpay drill: %v (start it with make run)\n", err)
		return 2
	}
	if ri.BackupGTRAddr == "" {
		fmt.Fprintln(stderr, "cellpay drill: the platform runs without a backup access point (-backup-gtr=false)")
		return 2
	}
	opts, err := platform.PartnerDialOptions(filepath.Join(o.data, "pki", "ca.crt"), filepath.Join(o.data, "partners"))
	if err != nil {
		fmt.Fprintf(stderr, "cellpay drill: partner credentials: %v\n", err)
		return 2
	}
	gtrTLS, err := client.TLS(filepath.Join(o.data, "pki", "ca.crt"))
	if err != nil {
		fmt.Fprintf(stderr, "cellpay drill: %v\n", err)
		return 2
	}
	// The tools' identity, pinned to each peer it dials (the issuer, a
	// cell), as the components pin theirs.
	opsTLS := func(peer string) (grpc.DialOption, error) {
		return platform.ClientTLSTo(o.data, platform.OpsCertName, peer)
	}
	issuerTLS, err := opsTLS(hop.Issuer)
	if err != nil {
		fmt.Fprintf(stderr, "cellpay drill: %v\n", err)
		return 2
	}
	var targets []drill.Target
	for _, name := range o.targets {
		t, err := freezeTarget(ri, name, gtrTLS, func(cell string) (grpc.DialOption, error) { return opsTLS(hop.Cell(cell)) })
		if err != nil {
			fmt.Fprintf(stderr, "cellpay drill: -cut %s: %v\n", name, err)
			return 2
		}
		targets = append(targets, t)
	}
	ccfg := checker.Config{GTRAddr: ri.GTRAddr, GTRDialOptions: opts, IssuerAddr: ri.IssuerAddr,
		IssuerDialOptions: []grpc.DialOption{issuerTLS}}
	for _, c := range ri.Cells {
		ccfg.Cells = append(ccfg.Cells, checker.Cell{ID: c.ID, DatabaseURL: c.DatabaseURL})
	}
	lc := load.Config{
		Target: load.TargetGTR, Endpoints: []string{ri.GTRAddr, ri.BackupGTRAddr}, DialOptions: opts,
		Mode: load.ModeOpen, Rate: o.rate, Concurrency: 512, Seed: uint64(time.Now().UnixNano()),
		RunID: fmt.Sprintf("drill-%d", time.Now().Unix()), PerRequestTimeout: o.requestTO,
		// MaxAttempts: retries (same ID, safe) outlast a transaction that a
		// cut catches mid-handshake, which its cell holds until it stops
		// waiting for Proceed (10 s); PerRequestTimeout bounds them. At
		// 15 s, a loaded host's slower answers after such a hold ran some
		// over it (CI, 2026-12-07).
		Client: client.Config{Failover: o.fo, ProbeTimeout: o.probeTO, CallTimeout: o.callTO, MaxAttempts: 30},
	}
	if ri.BackupGTRSite != "" && ri.GTRSite != ri.BackupGTRSite {
		// Two sites: the client knows each access point's site and prefers
		// the primary's, as a partner homed there does.
		lc.Endpoints = nil
		lc.AccessPoints = []client.AccessPoint{{Addr: ri.GTRAddr, Site: ri.GTRSite}, {Addr: ri.BackupGTRAddr, Site: ri.BackupGTRSite}}
		lc.Client.HomeSite = ri.GTRSite
	}
	if keys, err := partners.ReadKeyDir(filepath.Join(o.data, "partners")); err == nil {
		for p := range keys {
			lc.Partners = append(lc.Partners, p)
		}
		slices.Sort(lc.Partners)
	}
	// However the drill ends, nothing stays frozen.
	defer func() {
		for _, t := range targets {
			_ = t.Restore(context.Background())
		}
	}()
	logw := stderr
	if !o.json {
		logw = stdout
	}
	rep, err := drill.Run(ctx, drill.Config{Load: lc, Targets: targets, Hold: o.hold, Settle: o.settle, Checker: &ccfg, Log: logw})
	if err != nil {
		fmt.Fprintf(stderr, "cellpay drill: %v\n", err)
		return 1
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		rep.Print(stdout)
	}
	code := 0
	if !rep.OK() {
		code = 1
	}
	if !keepReport(ctx, o, ri, rep, stdout, stderr) {
		code = 1
	}
	return code
}

// keepReport signs the report and writes it to -report, and keeps it in
// the primary GTR unless -keep=false. It says what went wrong on stderr
// and returns false when any of that failed.
func keepReport(ctx context.Context, o drillOptions, ri platform.RunInfo, rep drill.Report, stdout, stderr io.Writer) bool {
	if !o.keep && o.reportFile == "" {
		return true
	}
	signed, err := signDrill(o.data, rep)
	if err != nil {
		fmt.Fprintf(stderr, "cellpay drill: the report is neither signed nor kept: %v\n", err)
		return false
	}
	ok := true
	if o.reportFile != "" {
		if err := writeSigned(o.reportFile, signed); err != nil {
			fmt.Fprintf(stderr, "cellpay drill: -report: %v\n", err)
			ok = false
		}
	}
	if !o.keep {
		return ok
	}
	id, err := keepDrill(ctx, o.data, ri.AdminAddr, o.tokenFile, signed)
	if err != nil {
		fmt.Fprintf(stderr, "cellpay drill: the report was not kept: %v\n", err)
		return false
	}
	w := stdout
	if o.json {
		w = stderr // stdout is the report's JSON alone
	}
	fmt.Fprintf(w, "report kept: %s (gtrctl drills)\n", id)
	return ok
}

// frozen is a process a drill's target freezes: its name in the run
// info, and the address and credentials its health is checked with once
// it is thawed.
type frozen struct {
	proc, addr string
	health     grpc.DialOption
}

// freezeTarget is what -cut name freezes (SIGSTOP, the process group of
// each process) and thaws (SIGCONT, then each serving again): primary or
// backup (an access point), a cell ID (its first instance), or a site of
// a platform started with two (-sites 2): its access point and every
// instance of its cells, the processes on its access point's address.
func freezeTarget(ri platform.RunInfo, name string, gtrTLS grpc.DialOption, cellTLS func(cell string) (grpc.DialOption, error)) (drill.Target, error) {
	var procs []frozen
	label, endpoint := name, ""
	ap := func(proc, addr string) {
		procs = append(procs, frozen{proc, addr, gtrTLS})
		endpoint = addr
	}
	cell := func(c platform.RunCell, instances int) error {
		creds, err := cellTLS(c.ID)
		if err != nil {
			return err
		}
		for i, addr := range c.Instances[:min(instances, len(c.Instances))] {
			proc := c.ID
			if i > 0 {
				proc = fmt.Sprintf("%s-%d", c.ID, i+1)
			}
			procs = append(procs, frozen{proc, addr, creds})
		}
		return nil
	}
	twoSites := ri.BackupGTRSite != "" && ri.GTRSite != ri.BackupGTRSite
	switch {
	case name == "primary":
		ap(platform.GTR, ri.GTRAddr)
		label = name + " access point " + ri.GTRAddr
	case name == "backup":
		ap(platform.GTRBackup, ri.BackupGTRAddr)
		label = name + " access point " + ri.BackupGTRAddr
	case twoSites && (name == ri.GTRSite || name == ri.BackupGTRSite):
		if name == ri.GTRSite {
			ap(platform.GTR, ri.GTRAddr)
		} else {
			ap(platform.GTRBackup, ri.BackupGTRAddr)
		}
		host, _, _ := strings.Cut(endpoint, ":")
		var ids []string
		for _, c := range ri.Cells {
			if h, _, _ := strings.Cut(c.Addr, ":"); h == host {
				if err := cell(c, len(c.Instances)); err != nil {
					return drill.Target{}, err
				}
				ids = append(ids, c.ID)
			}
		}
		label = fmt.Sprintf("site %s (%s: access point %s, cells %s)", name, host, endpoint, strings.Join(ids, ", "))
	default:
		for _, c := range ri.Cells {
			if c.ID == name && len(c.Instances) > 0 {
				if err := cell(c, 1); err != nil {
					return drill.Target{}, err
				}
			}
		}
	}
	var pids []int
	for _, f := range procs {
		pid := ri.PIDs[f.proc]
		if pid <= 0 {
			return drill.Target{}, fmt.Errorf("%s is not running", f.proc)
		}
		pids = append(pids, pid)
	}
	if len(procs) == 0 {
		return drill.Target{}, errors.New("no such access point, cell or site in the running platform")
	}
	signal := func(sig syscall.Signal) error {
		var errs []error
		for _, pid := range pids {
			errs = append(errs, syscall.Kill(-pid, sig))
		}
		return errors.Join(errs...)
	}
	return drill.Target{
		Name:     label + " (SIGSTOP)",
		Endpoint: endpoint,
		Cut:      func(context.Context) error { return signal(syscall.SIGSTOP) },
		Restore: func(ctx context.Context) error {
			if err := signal(syscall.SIGCONT); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			for _, f := range procs {
				for {
					if err := platform.CheckHealth(ctx, f.addr, f.health); err == nil {
						break
					} else if ctx.Err() != nil {
						return fmt.Errorf("%s not serving after SIGCONT: %w", f.proc, err)
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			return nil
		},
	}, nil
}
