package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/internal/natsconn"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/internal/refdata/refnats"
	"github.com/cellpay/cellpay/internal/tlsconf"
)

var commands = map[string]func(ctx context.Context, target natsTarget, args []string) error{
	"snapshot": snapshotCmd,
	"update":   updateCmd,
	"watch":    watchCmd,
	"status":   statusCmd,
}

// opTimeout bounds one publish or status read.
const opTimeout = 15 * time.Second

// natsTarget is the NATS server and the replicator's identity there
// (TLS zero: plaintext, no authentication).
type natsTarget struct {
	URL string
	TLS tlsconf.Files
	// Replicas is the reference data stream's replica count if a publish
	// creates it.
	Replicas int
}

func connect(target natsTarget) (*nats.Conn, *refnats.Publisher, error) {
	tlsOpts, err := natsconn.TLSOptions(target.TLS)
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(target.URL, append([]nats.Option{nats.Name("cellpay-replicator"), nats.Timeout(5 * time.Second)}, tlsOpts...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("nats %s: %w", target.URL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, &refnats.Publisher{JS: js, Replicas: target.Replicas, OnDiffers: func(d []string) {
		fmt.Fprintf(os.Stderr, "replicator: the stream %s exists with other limits, kept as they are: %s\n", refdata.Stream, strings.Join(d, "; "))
	}}, nil
}

func snapshotCmd(ctx context.Context, target natsTarget, args []string) error {
	fs := flag.NewFlagSet("snapshot", flag.ContinueOnError)
	source := fs.String("source", "config/refdata", "reference data directory or JSON file")
	unchecked := fs.Bool("unchecked", false, "publish without validating (to test the cells' refusal; never in production)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parse(fs, "replicator [FLAGS] snapshot [-source DIR|FILE] [-unchecked] [-json]", args); err != nil {
		return err
	}
	f, err := refdata.ReadSource(*source)
	if err != nil {
		return err
	}
	nc, pub, err := connect(target)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	res, err := pub.Snapshot(ctx, f, !*unchecked)
	if err != nil {
		return err
	}
	return report(res, refdata.KindSnapshot, *asJSON)
}

// multi collects a repeated flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func updateCmd(ctx context.Context, target natsTarget, args []string) error {
	fs := flag.NewFlagSet("update", flag.ContinueOnError)
	var rates, mccs multi
	fs.Var(&rates, "rate", "CUR=RATE: units of CUR per base unit, an exact decimal (repeatable)")
	fs.Var(&mccs, "mcc", "CODE=CATEGORY:RISK, risk low, medium or high (repeatable)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := parse(fs, "replicator [FLAGS] update [-rate CUR=RATE]... [-mcc CODE=CATEGORY:RISK]... [-json]", args); err != nil {
		return err
	}
	u := refdata.Update{}
	for _, r := range rates {
		cur, rate, ok := strings.Cut(r, "=")
		if !ok {
			return usageError{fmt.Errorf("-rate %q: want CUR=RATE", r)}
		}
		if u.FXRates == nil {
			u.FXRates = map[string]string{}
		}
		u.FXRates[cur] = rate
	}
	for _, m := range mccs {
		code, rest, ok1 := strings.Cut(m, "=")
		cat, risk, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 {
			return usageError{fmt.Errorf("-mcc %q: want CODE=CATEGORY:RISK", m)}
		}
		if u.MCC == nil {
			u.MCC = map[string]refdata.MCC{}
		}
		u.MCC[code] = refdata.MCC{Category: cat, Risk: risk}
	}
	nc, pub, err := connect(target)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	res, err := pub.Update(ctx, u)
	if err != nil {
		return err
	}
	return report(res, refdata.KindUpdate, *asJSON)
}

func report(res refnats.Result, kind string, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	switch {
	case res.Unchanged:
		fmt.Printf("unchanged: version %d already holds this snapshot\n", res.Version)
	case res.Duplicate:
		fmt.Printf("duplicate: version %d was already published\n", res.Version)
	default:
		fmt.Printf("published %s as version %d\n", kind, res.Version)
	}
	return nil
}

// watchCmd polls the source and publishes a snapshot whenever its content
// changes. Polling by content hash, not file events: an editor's rename
// dance or a half-written file is read again at the next tick, and a file
// that does not validate is reported and skipped.
func watchCmd(ctx context.Context, target natsTarget, args []string) error {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	source := fs.String("source", "config/refdata", "reference data directory or JSON file")
	interval := fs.Duration("interval", time.Second, "how often to read the source")
	if err := parse(fs, "replicator [FLAGS] watch [-source DIR|FILE] [-interval 1s]", args); err != nil {
		return err
	}
	nc, pub, err := connect(target)
	if err != nil {
		return err
	}
	defer nc.Close()
	t := time.NewTicker(*interval)
	defer t.Stop()
	last := ""
	for {
		if f, err := refdata.ReadSource(*source); err != nil {
			fmt.Fprintln(os.Stderr, "watch:", err)
		} else if h := refdata.ContentHash(f); h != last {
			pctx, cancel := context.WithTimeout(ctx, opTimeout)
			res, err := pub.Snapshot(pctx, f, true)
			cancel()
			if err != nil {
				fmt.Fprintln(os.Stderr, "watch:", err)
			} else {
				last = h
				_ = report(res, refdata.KindSnapshot, false)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func statusCmd(ctx context.Context, target natsTarget, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	wait := fs.Duration("wait", refdata.StatusInterval*5/2, "how long to listen for the cells' reports")
	asJSON := fs.Bool("json", false, "print as JSON")
	if err := parse(fs, "replicator [FLAGS] status [-wait 2.5s] [-json]", args); err != nil {
		return err
	}
	nc, pub, err := connect(target)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, *wait+opTimeout)
	defer cancel()
	latest, err := refnats.LastVersion(ctx, pub.JS)
	if err != nil {
		return err
	}
	cells, err := refnats.CollectStatus(ctx, nc, *wait)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(struct {
			Latest uint64                    `json:"latest"`
			Cells  map[string]refdata.Status `json:"cells"`
		}{latest, cells})
	}
	fmt.Printf("latest published version: %d\n", latest)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CELL\tVERSION\tSOURCE\tAPPLIED\tAGE\tREFUSED")
	ids := make([]string, 0, len(cells))
	for id := range cells {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		st := cells[id]
		age := "-"
		if !st.PublishedAt.IsZero() {
			age = st.ReportedAt.Sub(st.PublishedAt).Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\n", id, st.Version, st.Source, st.AppliedAt.Format(time.RFC3339Nano), age, st.Refused)
	}
	return tw.Flush()
}
