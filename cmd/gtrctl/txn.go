package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/cellpay/cellpay/pkg/adminproto"
)

// txnCommands find a transaction: what every cell holds of it.
func txnCommands() []command {
	return []command{
		{name: "txn get", args: "PARTNER ID", help: "a transaction in every cell: its record whatever its state (the attempt that wrote it: where it went, stepped back, was decided) and its callbacks",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 2 {
					return errUsage
				}
				cctx, cancel := c.call(ctx)
				defer cancel()
				resp, err := c.client.FindTransaction(cctx, &adminproto.FindTransactionRequest{PartnerId: args[0], TransactionId: args[1]})
				if err != nil {
					return err
				}
				if c.json() {
					return c.printJSON(resp)
				}
				return c.printTransaction(resp)
			}},
	}
}

// printTransaction shows one row per cell that holds a record (by
// attempt), then the callbacks, then the cells that did not answer.
func (c *cli) printTransaction(resp *adminproto.FindTransactionResponse) error {
	fmt.Fprintf(c.out, "partner %s, transaction %s\n", resp.GetPartnerId(), resp.GetTransactionId())
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CELL\tATTEMPT\tSTATE\tREASON\tAUTH\tAMOUNT\tCARD\tUPDATED")
	found, calls := 0, 0
	for _, cell := range resp.GetCells() {
		r := cell.GetRecord()
		if !r.GetFound() {
			continue
		}
		found++
		calls += len(r.GetCallbacks())
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d %s\t%s\t%s\n", cell.GetCellId(), r.GetAttempt(), r.GetState(), dash(r.GetDeclineReason()),
			dash(r.GetAuthCode()), r.GetAmountMinorUnits(), r.GetCurrency(), dash(r.GetMaskedPan()), r.GetUpdatedAt().AsTime().Format(time.RFC3339Nano))
	}
	tw.Flush()
	if found == 0 {
		fmt.Fprintln(c.out, "no cell that answered holds it")
	}
	if calls > 0 {
		fmt.Fprintln(c.out, "callbacks:")
		tw = tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CELL\tEVENT\tSTATUS\tATTEMPTS\tLAST ERROR")
		for _, cell := range resp.GetCells() {
			for _, e := range cell.GetRecord().GetCallbacks() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", cell.GetCellId(), e.GetEventId(), e.GetStatus(), e.GetAttempts(), dash(e.GetLastError()))
			}
		}
		tw.Flush()
	}
	for _, cell := range resp.GetCells() {
		if cell.GetError() != "" {
			fmt.Fprintf(c.out, "cell %s did not answer: %s\n", cell.GetCellId(), cell.GetError())
		}
	}
	return nil
}

// dash is s, or "-" for nothing.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
