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
	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/pkg/client"
	"github.com/cellpay/cellpay/pkg/client/failover"
)

// drillUsage is the drill subcommand's help.
const drillUsage = `cellpay drill [flags]: a disaster recovery drill against the running
local platform (make run), as the WeChat Pay cross-city guide describes:
under load from the partners' client through both access points, freeze one
path (SIGSTOP: an access point or a cell), wait, thaw it (SIGCONT), then the
next, and report when the client switched and switched back, the errors the
partner saw, and the checker's verdict. Exit status 0 when there was no
business loss, 1 when there was, 2 on a usage error.

The client's intervals are shortened from the guide's minute to a second so
that the drill takes about a minute; -probe-interval 1m -eval-interval 1m
-hold 3m runs it with the guide's numbers.

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
	json    bool
}

func parseDrill(args []string, stderr io.Writer) (drillOptions, error) {
	var o drillOptions
	fs := flag.NewFlagSet("cellpay drill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, drillUsage); fs.PrintDefaults() }
	fs.StringVar(&o.data, "data", env("CELLPAY_DATA", ".cellpay"), "the running platform's data directory (CELLPAY_DATA)")
	targets := fs.String("cut", "primary,backup", "what to cut, in order: primary, backup (access points) or a cell ID")
	fs.Float64Var(&o.rate, "rate", 50, "partner calls per second (open loop)")
	fs.DurationVar(&o.hold, "hold", 12*time.Second, "how long each cut lasts")
	fs.DurationVar(&o.settle, "settle", 8*time.Second, "load after each restore, before the next cut")
	strategy := fs.String("failover", string(failover.Both), "the client's failover strategy: probe, success-rate or both")
	fs.DurationVar(&o.fo.ProbeInterval, "probe-interval", time.Second, "the client's probe interval (the guide's is 1m)")
	fs.DurationVar(&o.fo.EvalInterval, "eval-interval", time.Second, "the client's success-rate evaluation interval (the guide's is 1m)")
	fs.DurationVar(&o.fo.WindowAge, "window-age", 10*time.Second, "the client's success-rate window (the guide's is 10m)")
	fs.DurationVar(&o.probeTO, "probe-timeout", 200*time.Millisecond, "one probe's timeout")
	fs.DurationVar(&o.callTO, "call-timeout", time.Second, "one call's read timeout before its retry on the other access point")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "cellpay drill: unexpected arguments %q\n", fs.Args())
		return o, errors.New("usage")
	}
	o.fo.Strategy = failover.Strategy(*strategy)
	for _, t := range strings.Split(*targets, ",") {
		if t = strings.TrimSpace(t); t != "" {
			o.targets = append(o.targets, t)
		}
	}
	if len(o.targets) == 0 {
		fmt.Fprintln(stderr, "cellpay drill: -cut names nothing")
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
	opsTLS, err := platform.ClientTLS(o.data, platform.OpsCertName)
	if err != nil {
		fmt.Fprintf(stderr, "cellpay drill: %v\n", err)
		return 2
	}
	var targets []drill.Target
	for _, name := range o.targets {
		t, err := freezeTarget(ri, name, gtrTLS, opsTLS)
		if err != nil {
			fmt.Fprintf(stderr, "cellpay drill: -cut %s: %v\n", name, err)
			return 2
		}
		targets = append(targets, t)
	}
	ccfg := checker.Config{GTRAddr: ri.GTRAddr, GTRDialOptions: opts, IssuerAddr: ri.IssuerAddr,
		IssuerDialOptions: []grpc.DialOption{opsTLS}}
	for _, c := range ri.Cells {
		ccfg.Cells = append(ccfg.Cells, checker.Cell{ID: c.ID, DatabaseURL: c.DatabaseURL})
	}
	lc := load.Config{
		Target: load.TargetGTR, Endpoints: []string{ri.GTRAddr, ri.BackupGTRAddr}, DialOptions: opts,
		Mode: load.ModeOpen, Rate: o.rate, Concurrency: 512, Seed: uint64(time.Now().UnixNano()),
		RunID: fmt.Sprintf("drill-%d", time.Now().Unix()), PerRequestTimeout: 15 * time.Second,
		// MaxAttempts: retries (same ID, safe) outlast a transaction that a
		// cut catches mid-handshake, which its cell holds until it stops
		// waiting for Proceed (10 s); PerRequestTimeout bounds them.
		Client: client.Config{Failover: o.fo, ProbeTimeout: o.probeTO, CallTimeout: o.callTO, MaxAttempts: 30},
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
	if !rep.OK() {
		return 1
	}
	return 0
}

// freezeTarget cuts name (primary, backup or a cell ID) of the running
// platform by SIGSTOP of its process group, and restores it by SIGCONT,
// waiting for its gRPC health (over TLS for an access point, mutual TLS
// as the tools' identity for a cell).
func freezeTarget(ri platform.RunInfo, name string, gtrTLS, opsTLS grpc.DialOption) (drill.Target, error) {
	proc, addr, endpoint := "", "", ""
	health := opsTLS
	switch name {
	case "primary":
		proc, addr, endpoint, health = platform.GTR, ri.GTRAddr, ri.GTRAddr, gtrTLS
	case "backup":
		proc, addr, endpoint, health = platform.GTRBackup, ri.BackupGTRAddr, ri.BackupGTRAddr, gtrTLS
	default:
		for _, c := range ri.Cells {
			if c.ID == name {
				proc, addr = c.ID, c.Addr
			}
		}
	}
	pid := ri.PIDs[proc]
	if proc == "" || pid <= 0 {
		return drill.Target{}, errors.New("no such access point or cell in the running platform")
	}
	label := name
	if endpoint != "" {
		label = name + " access point " + addr
	}
	return drill.Target{
		Name:     label + " (SIGSTOP)",
		Endpoint: endpoint,
		Cut: func(context.Context) error {
			return syscall.Kill(-pid, syscall.SIGSTOP)
		},
		Restore: func(ctx context.Context) error {
			if err := syscall.Kill(-pid, syscall.SIGCONT); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			for {
				if err := platform.CheckHealth(ctx, addr, health); err == nil {
					return nil
				} else if ctx.Err() != nil {
					return fmt.Errorf("%s not serving after SIGCONT: %w", name, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		},
	}, nil
}
