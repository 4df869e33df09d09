package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/cellpay/cellpay/pkg/adminproto"
)

// refCommands find a refused call by the reference a partner quotes.
func refCommands() []command {
	return []command{
		{name: "ref", args: "REFERENCE", help: "a partner's refused call by the reference its error quotes (request_id, or \"reference ...\" in the message), on every GTR replica: when, which method, partner and transaction, and why, with the platform error's detail",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return errUsage
				}
				cctx, cancel := c.call(ctx)
				defer cancel()
				resp, err := c.client.FindReference(cctx, &adminproto.FindReferenceRequest{RequestId: args[0]})
				if err != nil {
					return err
				}
				if c.json() {
					return c.printJSON(resp)
				}
				return c.printReference(resp)
			}},
	}
}

// printReference shows each refusal found, field per line, then the
// replicas searched.
func (c *cli) printReference(resp *adminproto.FindReferenceResponse) error {
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	for i, r := range resp.GetRefusals() {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		for _, f := range [][2]string{
			{"reference", r.GetRequestId()}, {"time", r.GetTime().AsTime().UTC().Format(time.RFC3339Nano)}, {"replica", r.GetReplica()},
			{"method", r.GetMethod()}, {"partner", r.GetPartnerId()}, {"transaction", r.GetTransactionId()},
			{"code", r.GetCode()}, {"reason", r.GetReason()}, {"detail", r.GetMessage()},
		} {
			if f[1] != "" {
				fmt.Fprintf(tw, "%s\t%s\n", f[0], f[1])
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "searched replicas: %v\n", resp.GetReplicas())
	return nil
}
