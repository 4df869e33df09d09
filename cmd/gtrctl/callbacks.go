package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/cellproto"
)

// callbackCommands set partners' callback settings and list and replay
// the cells' callback events. add-secret prints the new signing secret
// once (or writes it to --secret-out, 0600): nothing shows it again.
func callbackCommands() []command {
	var (
		mode, endpoints, public, secretOut, status, since, event string
		failed, dropOlder                                        bool
		limit                                                    int
	)
	return []command{
		{name: "callbacks set", args: "PARTNER", help: "set a partner's callback mode, endpoints and public endpoint (its signing secrets stay)",
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&mode, "mode", "ordered", "random, ordered or reverse")
				fs.StringVar(&endpoints, "endpoints", "", "comma-separated https:// endpoints, in order")
				fs.StringVar(&public, "public", "", "the public endpoint, used when every private one fails")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return errUsage
				}
				return c.partnerChange(ctx, func(cctx context.Context) (*adminproto.PartnerChange, error) {
					return c.client.SetCallbacks(cctx, &adminproto.SetCallbacksRequest{PartnerId: args[0], Mode: mode, Endpoints: list(endpoints), Public: public})
				})
			}},
		{name: "callbacks add-secret", args: "PARTNER", help: "make a new signing secret (newest first; cells sign with every one), printed once",
			flags: func(fs *flag.FlagSet) {
				fs.BoolVar(&dropOlder, "drop-older", false, "keep only the new secret (end a rotation)")
				fs.StringVar(&secretOut, "secret-out", "", "write the new secret to this file (mode 0600) instead of printing it")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return errUsage
				}
				cctx, cancel := c.call(ctx)
				defer cancel()
				resp, err := c.client.AddCallbackSecret(cctx, &adminproto.AddCallbackSecretRequest{PartnerId: args[0], DropOlder: dropOlder})
				if err != nil {
					return err
				}
				if secretOut != "" {
					if err := os.WriteFile(secretOut, []byte(resp.GetSecret()+"\n"), 0o600); err != nil {
						return fmt.Errorf("the secret was made but could not be written (%w); make another with --drop-older", err)
					}
					resp.Secret = ""
				}
				if c.json() {
					return c.printJSON(resp)
				}
				n := resp.GetPartner().GetCallbacks().GetSigningSecrets()
				if secretOut != "" {
					fmt.Fprintf(c.out, "partner %s: signing secret written to %s (mode 0600), %d secrets, registry version %d\n", args[0], secretOut, n, resp.GetRegistryVersion())
					return nil
				}
				fmt.Fprintf(c.out, "partner %s: %d signing secrets, registry version %d\nsecret  %s\nThis secret will not be shown again: store it now (or use --secret-out FILE).\n",
					args[0], n, resp.GetRegistryVersion(), resp.GetSecret())
				return nil
			}},
		{name: "callbacks list", args: "[PARTNER]", help: "list callback events in every cell (default: pending and dead; --status, --failed)",
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&status, "status", "pending,dead", "comma-separated: pending, delivered, dead; \"\" for all")
				fs.BoolVar(&failed, "failed", false, "only events with a failed attempt, not delivered")
				fs.StringVar(&since, "since", "", "only events created at or after this time (RFC 3339) or this long ago (e.g. 1h)")
				fs.IntVar(&limit, "limit", 100, "at most this many events per cell")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) > 1 {
					return errUsage
				}
				req := &cellproto.ListCallbacksRequest{Statuses: list(status), Failed: failed, Limit: int32(limit)}
				if len(args) == 1 {
					req.PartnerId = args[0]
				}
				var err error
				if req.Since, err = parseSince(since); err != nil {
					return err
				}
				cctx, cancel := c.call(ctx)
				defer cancel()
				resp, err := c.client.ListCallbacks(cctx, req)
				if err != nil {
					return err
				}
				return c.printCallbacks(resp)
			}},
		{name: "callbacks replay", args: "PARTNER", help: "replay one event (--event) or every dead and pending one from a time (--since); re-enables endpoints a 410 disabled",
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&event, "event", "", "the event ID to replay")
				fs.StringVar(&since, "since", "", "replay every dead or pending event created at or after this time (RFC 3339) or this long ago (e.g. 1h)")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 || (event == "") == (since == "") {
					return fmt.Errorf("%w: give PARTNER and one of --event or --since", errUsage)
				}
				ts, err := parseSince(since)
				if err != nil {
					return err
				}
				cctx, cancel := c.call(ctx)
				defer cancel()
				resp, err := c.client.ReplayCallbacks(cctx, &cellproto.ReplayCallbacksRequest{PartnerId: args[0], EventId: event, Since: ts})
				if err != nil {
					return err
				}
				if c.json() {
					return c.printJSON(resp)
				}
				fmt.Fprintf(c.out, "partner %s: %d events due again\n", args[0], resp.GetReplayed())
				for _, cell := range resp.GetCells() {
					if cell.GetError() != "" {
						fmt.Fprintf(c.out, "cell %s did not answer: %s\n", cell.GetCellId(), cell.GetError())
					}
				}
				return nil
			}},
	}
}

// parseSince reads an RFC 3339 time or a duration ago; "" is none.
func parseSince(s string) (*timestamppb.Timestamp, error) {
	if s == "" {
		return nil, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return timestamppb.New(time.Now().Add(-d)), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return nil, fmt.Errorf("--since %q: want an RFC 3339 time or a duration such as 1h", s)
	}
	return timestamppb.New(t), nil
}

func (c *cli) printCallbacks(resp *adminproto.ListCallbacksResponse) error {
	if c.json() {
		return c.printJSON(resp)
	}
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "EVENT\tPARTNER\tTRANSACTION\tCELL\tSTATUS\tATTEMPTS\tNEXT\tLAST")
	for _, e := range resp.GetEvents() {
		next := "-"
		if e.GetStatus() == "pending" {
			next = e.GetNextAttemptAt().AsTime().Local().Format(time.TimeOnly)
		}
		last := e.GetLastError()
		if e.GetStatus() == "delivered" {
			last = "to " + e.GetDeliveredTo()
		} else if e.GetLastEndpoint() != "" {
			last += " at " + e.GetLastEndpoint()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", e.GetEventId(), e.GetPartnerId(), e.GetTransactionId(), e.GetCellId(),
			e.GetStatus(), e.GetAttempts(), next, last)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, cell := range resp.GetCells() {
		if cell.GetError() != "" {
			fmt.Fprintf(c.out, "cell %s did not answer: %s\n", cell.GetCellId(), cell.GetError())
			continue
		}
		fmt.Fprintf(c.out, "cell %s: %d pending, %d dead in its outbox; registry version %d\n", cell.GetCellId(), cell.GetPending(), cell.GetDead(), cell.GetRegistryVersion())
	}
	return nil
}
