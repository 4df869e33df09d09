package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// statementCommands show a partner's statement of a day: what every cell
// holds of it, and the total.
func statementCommands() []command {
	return []command{
		{name: "statement", args: "PARTNER DATE", help: "a partner's statement of a UTC day (YYYY-MM-DD) by payment type, status and currency: each cell's and the total (the partner's GetStatement); names the cells that did not answer",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 2 {
					return errUsage
				}
				if err := checkStatementArgs(args[0], args[1]); err != nil {
					return err
				}
				cctx, cancel := c.call(ctx)
				defer cancel()
				resp, err := c.client.GetStatement(cctx, &adminproto.GetStatementRequest{PartnerId: args[0], Date: args[1]})
				if err != nil {
					return err
				}
				if c.json() {
					return c.printJSON(resp)
				}
				return c.printStatement(resp)
			}},
	}
}

// checkStatementArgs checks PARTNER and DATE before any call, naming
// the one at fault.
func checkStatementArgs(partner, date string) error {
	if err := idempotency.ValidateKey(partner); err != nil {
		return fmt.Errorf("PARTNER %q: %v", partner, err)
	}
	if _, err := time.Parse(time.DateOnly, date); err != nil {
		return fmt.Errorf("DATE %q: want a UTC day, YYYY-MM-DD", date)
	}
	return nil
}

// printStatement shows each cell's lines (a cell that answered with none
// as one row of dashes), then the total's, then the cells that did not
// answer, which the total leaves out.
func (c *cli) printStatement(resp *adminproto.GetStatementResponse) error {
	fmt.Fprintf(c.out, "partner %s, UTC day %s (amounts in minor units)\n", resp.GetPartnerId(), resp.GetDate())
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CELL\tPAYMENT TYPE\tSTATUS\tCURRENCY\tCOUNT\tAMOUNT")
	for _, cell := range resp.GetCells() {
		if cell.GetError() == "" {
			statementRows(tw, cell.GetCellId(), cell.GetLines())
		}
	}
	statementRows(tw, "total", resp.GetTotal())
	if err := tw.Flush(); err != nil {
		return err
	}
	missing := 0
	for _, cell := range resp.GetCells() {
		if cell.GetError() != "" {
			missing++
			fmt.Fprintf(c.out, "cell %s did not answer: %s\n", cell.GetCellId(), cell.GetError())
		}
	}
	if !resp.GetComplete() {
		fmt.Fprintf(c.out, "incomplete: the total leaves out %d cell(s) that did not answer\n", missing)
	}
	return nil
}

// statementRows writes one row per line under name, or a row of dashes
// when there is none.
func statementRows(tw *tabwriter.Writer, name string, lines []*cellpayv1.StatementLine) {
	if len(lines) == 0 {
		fmt.Fprintf(tw, "%s\t-\t-\t-\t0\t0\n", name)
	}
	for _, l := range lines {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", name, l.GetPaymentType(), l.GetStatus(), l.GetCurrency(), l.GetCount(), l.GetAmountMinorUnits())
	}
}
