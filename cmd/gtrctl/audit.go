package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cellpay/cellpay/pkg/adminproto"
)

func auditCommands() []command {
	var (
		since string
		limit int
	)
	return []command{
		{name: "audit", help: "the admin audit log: who changed what, when, before -> after (newest --limit records, oldest first)",
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&since, "since", "", "only records at or after this time (RFC 3339) or this long ago (e.g. 1h)")
				fs.IntVar(&limit, "limit", 100, "at most this many records, the newest (up to 10000)")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 0 {
					return errUsage
				}
				ts, err := parseSince(since)
				if err != nil {
					return err
				}
				cctx, cancel := c.call(ctx)
				defer cancel()
				resp, err := c.client.ListAudit(cctx, &adminproto.ListAuditRequest{Since: ts, Limit: int32(limit)})
				if err != nil {
					return err
				}
				return c.printAudit(resp)
			}},
	}
}

func (c *cli) printAudit(resp *adminproto.ListAuditResponse) error {
	if c.json() {
		return c.printJSON(resp)
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tACTOR\tROLE\tCALL\tOUTCOME\tBEFORE -> AFTER")
	for _, r := range resp.GetRecords() {
		change := compact(r.GetBefore()) + " -> " + compact(r.GetAfter())
		if r.GetOutcome() != "OK" {
			change = r.GetError()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.GetTime().AsTime().Local().Format(time.RFC3339), r.GetActor(), r.GetRole(),
			r.GetMethod(), r.GetOutcome(), change)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := resp.GetPending(); n > 0 {
		fmt.Fprintf(c.out, "\n%d records of this replica wait in its local spool for the audit stream\n", n)
	}
	return nil
}

// compact shows a record's JSON state on one line, or "-" for none.
func compact(s string) string {
	if s == "" || s == "null" {
		return "-"
	}
	var v any
	if json.Unmarshal([]byte(s), &v) != nil {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// defaultTokenFile is the admin operator's token of a local platform
// (make run), when gtrctl runs where it was started: $CELLPAY_DATA or
// .cellpay, then operators/admin.token.
func defaultTokenFile() string { return localFile("operators", "admin.token") }

// defaultCAFile is a local platform's development CA, when there is one.
func defaultCAFile() string { return localFile("pki", "ca.crt") }

// localFile is the file at path in a local platform's data folder
// ($CELLPAY_DATA or .cellpay), or "" when there is none.
func localFile(path ...string) string {
	p := filepath.Join(append([]string{envOr("CELLPAY_DATA", ".cellpay")}, path...)...)
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// readToken reads a token file.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}
