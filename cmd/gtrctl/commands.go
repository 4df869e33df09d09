package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cellpay/cellpay/pkg/adminproto"
)

func commands() []command {
	var (
		percent              int
		over                 time.Duration
		noWait               bool
		partner, market, typ string
		merchant, txn        string
		file                 string
		dryRun               bool
		samples              int
		expected             uint64
		effective            bool
		reason               string
	)
	rampFlags := func(fs *flag.FlagSet) {
		fs.DurationVar(&over, "over", 0, "ramp the change over this duration (default: now)")
		fs.BoolVar(&noWait, "no-wait", false, "return at once instead of showing the ramp's progress")
	}
	siteFlags := func(fs *flag.FlagSet) {
		rampFlags(fs)
		fs.BoolVar(&dryRun, "dry-run", false, "change nothing; show the share of sampled keys that would move, from which cell to which, once any ramp has ended")
		fs.IntVar(&samples, "samples", 100000, "synthetic keys the dry run routes through the table in force and the changed one")
	}
	return append([]command{
		{name: "cells", help: "list cells: health, weight, in-flight, success rate, traffic share",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 0 {
					return errUsage
				}
				cctx, cancel := c.call(ctx)
				defer cancel()
				resp, err := c.client.ListCells(cctx, &adminproto.ListCellsRequest{})
				if err != nil {
					return err
				}
				return c.printCells(resp)
			}},
		{name: "drain", args: "CELL", help: "move --percent N of a cell's keys to other cells, now or --over a duration",
			flags: func(fs *flag.FlagSet) {
				fs.IntVar(&percent, "percent", -1, "share of the cell's keys to move away, 0..100 (required)")
				rampFlags(fs)
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 || percent < 0 {
					return errUsage
				}
				return c.weightChange(ctx, over, noWait, func(cctx context.Context) (*adminproto.CellStatus, error) {
					return c.client.Drain(cctx, &adminproto.DrainRequest{CellId: args[0], Percent: int32(percent), Over: dur(over)})
				})
			}},
		{name: "restore", args: "CELL", help: "return a cell to its table weight, now or --over a duration",
			flags: rampFlags,
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return errUsage
				}
				return c.weightChange(ctx, over, noWait, func(cctx context.Context) (*adminproto.CellStatus, error) {
					return c.client.Restore(cctx, &adminproto.RestoreRequest{CellId: args[0], Over: dur(over)})
				})
			}},
		{name: "evacuate", args: "SITE", help: "move every key of a site's cells to other sites' cells (weight 0; work in flight finishes where it is), now or --over a duration; --dry-run shows which keys would move",
			flags: siteFlags,
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return errUsage
				}
				return c.siteChange(ctx, evacuation, over, noWait, func(cctx context.Context) (*adminproto.SiteChange, error) {
					return c.client.EvacuateSite(cctx, &adminproto.EvacuateSiteRequest{Site: args[0], Over: dur(over), DryRun: dryRun, Samples: int32(samples)})
				})
			}},
		{name: "restore-site", args: "SITE", help: "return every cell of a site to its table weight, now or --over a duration; --dry-run shows which keys would move back",
			flags: siteFlags,
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return errUsage
				}
				return c.siteChange(ctx, restoration, over, noWait, func(cctx context.Context) (*adminproto.SiteChange, error) {
					return c.client.RestoreSite(cctx, &adminproto.RestoreSiteRequest{Site: args[0], Over: dur(over), DryRun: dryRun, Samples: int32(samples)})
				})
			}},
		{name: "release", args: "CELL", help: "declare a cell lost for good (admin, audited): its directory entries not final go to the next cell their transaction reaches, resolved by inquiry at the issuer; --reason is required",
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&reason, "reason", "", "why the cell is lost, for the audit log (required)")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 || reason == "" {
					return errUsage
				}
				cctx, cancel := c.call(ctx)
				defer cancel()
				resp, err := c.client.ReleaseCell(cctx, &adminproto.ReleaseCellRequest{CellId: args[0], Reason: reason})
				if err != nil {
					return err
				}
				fmt.Fprintf(c.out, "released %s (directory revision %d): its transactions not final are resolved by inquiry by the next cell they reach\n", resp.GetCellId(), resp.GetRevision())
				return nil
			}},
		{name: "weight", args: "CELL N", help: "set a cell's weight (0..100), now or --over a duration",
			flags: rampFlags,
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 2 {
					return errUsage
				}
				w, err := strconv.Atoi(args[1])
				if err != nil {
					return fmt.Errorf("weight %q: not a number", args[1])
				}
				return c.weightChange(ctx, over, noWait, func(cctx context.Context) (*adminproto.CellStatus, error) {
					return c.client.SetWeight(cctx, &adminproto.SetWeightRequest{CellId: args[0], Weight: int32(w), Over: dur(over)})
				})
			}},
		{name: "explain", help: "explain how a transaction's attributes route",
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&partner, "partner", "", "partner ID")
				fs.StringVar(&market, "market", "", "market (ISO 3166-1 alpha-2)")
				fs.StringVar(&typ, "type", "CARD_AUTHORIZATION", "payment type: CARD_AUTHORIZATION, CARD_REFUND or BANK_TRANSFER")
				fs.StringVar(&merchant, "merchant", "", "merchant ID (for rules hashing on merchant)")
				fs.StringVar(&txn, "txn", "", "transaction ID (for rules hashing on transaction)")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 0 {
					return errUsage
				}
				cctx, cancel := c.call(ctx)
				defer cancel()
				resp, err := c.client.Explain(cctx, &adminproto.ExplainRequest{Attrs: &adminproto.Attrs{
					PartnerId: partner, Market: market, PaymentType: typ, MerchantId: merchant, TransactionId: txn,
				}})
				if err != nil {
					return err
				}
				return c.printExplain(resp)
			}},
		{name: "table get", help: "print the operator's table, configured weights (YAML, or -o json), to edit and apply; --effective: this replica's compiled view",
			flags: func(fs *flag.FlagSet) {
				fs.BoolVar(&effective, "effective", false, "print the effective view of the answering replica instead: weights scaled by its health shares and moved along ramps, as routing uses them (not a table to apply)")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 0 {
					return errUsage
				}
				cctx, cancel := c.call(ctx)
				defer cancel()
				if effective {
					e, err := c.client.GetEffectiveTable(cctx, &adminproto.GetEffectiveTableRequest{})
					if err != nil {
						return err
					}
					return c.printEffective(e)
				}
				t, err := c.client.GetTable(cctx, &adminproto.GetTableRequest{})
				if err != nil {
					return err
				}
				if c.json() {
					return c.printJSON(t)
				}
				return writeTableYAML(c.out, t)
			}},
		{name: "table apply", help: "validate and replace the routing table from -f FILE (YAML or JSON); --dry-run shows which keys would move",
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&file, "f", "", "table file, in the GTR's config format (required)")
				fs.BoolVar(&dryRun, "dry-run", false, "change nothing; show the share of sampled keys that would move, from which cell to which")
				fs.IntVar(&samples, "samples", 100000, "synthetic keys the dry run routes through the old and new tables")
				fs.Uint64Var(&expected, "expected-version", 0, "refuse unless this is the version in force (optimistic concurrency)")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 0 || file == "" {
					return errUsage
				}
				b, err := os.ReadFile(file)
				if err != nil {
					return err
				}
				t, err := parseTable(b)
				if err != nil {
					return fmt.Errorf("%s: %w", file, err)
				}
				cctx, cancel := c.call(ctx)
				defer cancel()
				resp, err := c.client.ApplyTable(cctx, &adminproto.ApplyTableRequest{Table: t, DryRun: dryRun, Samples: int32(samples), ExpectedVersion: expected})
				if err != nil {
					return err
				}
				return c.printApply(resp)
			}},
	}, append(append(append(partnerCommands(), callbackCommands()...), append(append(append(append(auditCommands(), drillCommands()...), txnCommands()...), statementCommands()...), refCommands()...)...), command{
		name: "operators init", args: "DIR", offline: true, run: operatorsInit,
		help: "write a token per role (viewer, operator, admin: DIR/ROLE.token) and the GTR's operators file of their hashes (DIR/operators.yaml); keeps a complete set, never overwrites; needs no GTR",
	}, versionCommand(), completionCommand())...)
}

func dur(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// weightChange makes a weight change and, for a ramp, follows it with a
// progress bar until the weight reaches its target.
func (c *cli) weightChange(ctx context.Context, over time.Duration, noWait bool, do func(context.Context) (*adminproto.CellStatus, error)) error {
	cctx, cancel := c.call(ctx)
	cs, err := do(cctx)
	cancel()
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(cs)
	}
	if r := cs.GetRamp(); r != nil && !noWait {
		return c.follow(ctx, fmt.Sprintf("%s weight %d -> %d", cs.GetId(), r.GetFromWeight(), r.GetToWeight()), []*adminproto.CellStatus{cs}, "")
	}
	c.printCellChange(cs)
	return nil
}

// siteChange makes a site's change (evacuate, restore-site) and prints
// it: a dry run's moves and the site's cells as they are, or the site's
// cells after the change, following their ramps unless noWait.
func (c *cli) siteChange(ctx context.Context, v siteVerb, over time.Duration, noWait bool, do func(context.Context) (*adminproto.SiteChange, error)) error {
	cctx, cancel := c.call(ctx)
	resp, err := do(cctx)
	cancel()
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp)
	}
	if !resp.GetApplied() {
		return c.printSiteDryRun(resp, v, over)
	}
	ramping := 0
	for _, cs := range resp.GetCells() {
		if cs.GetRamp() != nil {
			ramping++
		}
	}
	if ramping > 0 && !noWait {
		return c.follow(ctx, fmt.Sprintf("site %s: %d cells ramping", resp.GetSite(), ramping), resp.GetCells(), siteHead(resp, v))
	}
	fmt.Fprintln(c.out, siteHead(resp, v))
	for _, cs := range resp.GetCells() {
		c.printCellChange(cs)
	}
	return nil
}
