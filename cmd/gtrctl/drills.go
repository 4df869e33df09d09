package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cellpay/cellpay/internal/drillreport"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

// drillCommands list and show the drills' signed reports the GTR keeps
// (cellpay drill records them). gtrctl verifies each report itself,
// against --ca, and shows what the verified bytes say, never the GTR's
// reading of them.
func drillCommands() []command {
	var limit int
	return []command{
		{name: "drills", help: "the drills kept (cellpay drill): time, what was cut, verdict, partner errors, RPO and RTO, signer; each report's signature verified against --ca (newest --limit first)",
			flags: func(fs *flag.FlagSet) {
				fs.IntVar(&limit, "limit", 20, "at most this many drills, the newest (up to 100)")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 0 {
					return errUsage
				}
				roots, err := c.drillRoots()
				if err != nil {
					return err
				}
				cctx, cancel := c.call(ctx)
				defer cancel()
				resp, err := c.client.ListDrills(cctx, &adminproto.ListDrillsRequest{Limit: int32(limit)})
				if err != nil {
					return err
				}
				var shown []shownDrill
				for _, r := range resp.GetDrills() {
					shown = append(shown, verifyDrill(r, roots))
				}
				return c.printDrills(shown, false)
			}},
		{name: "drills show", args: "ID", help: "one drill kept: its summary and whole report, its signature verified against --ca",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return errUsage
				}
				roots, err := c.drillRoots()
				if err != nil {
					return err
				}
				cctx, cancel := c.call(ctx)
				defer cancel()
				r, err := c.client.GetDrill(cctx, &adminproto.GetDrillRequest{Id: args[0]})
				if err != nil {
					return err
				}
				return c.printDrills([]shownDrill{verifyDrill(r, roots)}, true)
			}},
	}
}

// drillRoots is the CA the reports are verified against: --ca, else a
// local platform's. Without one gtrctl cannot verify, and says so.
func (c *cli) drillRoots() (*x509.CertPool, error) {
	caFile := c.g.ca
	if caFile == "" {
		caFile = defaultCAFile()
	}
	if caFile == "" {
		return nil, errors.New("--ca: the platform's CA is needed to verify the drills' reports")
	}
	roots, err := tlsconf.CertPool(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca: %w", err)
	}
	return roots, nil
}

// shownDrill is a kept drill as gtrctl shows it: what its verified
// report says, or why it did not verify.
type shownDrill struct {
	ID         string               `json:"id"`
	Verified   bool                 `json:"verified"`
	Error      string               `json:"error,omitempty"`
	Signer     string               `json:"signer,omitempty"`
	SignerCert string               `json:"signer_cert,omitempty"`
	Summary    *drillreport.Summary `json:"summary,omitempty"`
	RecordedAt *time.Time           `json:"recorded_at,omitempty"`
	RecordedBy string               `json:"recorded_by,omitempty"`
	Replica    string               `json:"replica,omitempty"`
	// Report is the drill's whole report (drills show only).
	Report json.RawMessage `json:"report,omitempty"`
}

// verifyDrill verifies r's signed report as of its certificate's start
// (the GTR verified it as of its recording).
func verifyDrill(r *adminproto.DrillRecord, roots *x509.CertPool) shownDrill {
	sr := r.GetReport()
	s := shownDrill{ID: drillreport.ID(sr.GetReport()), RecordedBy: r.GetRecordedBy(), Replica: r.GetReplica()}
	if r.GetRecordedAt() != nil {
		t := r.GetRecordedAt().AsTime()
		s.RecordedAt = &t
	}
	v, err := drillreport.Verify(drillreport.Signed{Report: sr.GetReport(), Signature: sr.GetSignature(), Certificate: sr.GetCertificate()}, roots, time.Time{})
	if err != nil {
		s.Error = err.Error()
		return s
	}
	s.Verified, s.Signer, s.SignerCert = true, v.Signer, v.CertID
	s.Summary, s.Report = &v.Document.Summary, v.Document.Report
	return s
}

// printDrills prints drills; whole adds each one's report. It fails when
// any report did not verify, after printing them all.
func (c *cli) printDrills(drills []shownDrill, whole bool) error {
	bad := 0
	for _, d := range drills {
		if !d.Verified {
			bad++
		}
	}
	if c.json() {
		if !whole {
			for i := range drills {
				drills[i].Report = nil
			}
		}
		enc := json.NewEncoder(c.out)
		enc.SetIndent("", "  ")
		var err error
		if whole && len(drills) == 1 {
			err = enc.Encode(drills[0])
		} else {
			err = enc.Encode(map[string]any{"drills": drills})
		}
		if err != nil {
			return err
		}
	} else {
		if len(drills) == 0 {
			fmt.Fprintln(c.out, "no drill kept (cellpay drill keeps its report)")
		}
		for i, d := range drills {
			if i > 0 {
				fmt.Fprintln(c.out)
			}
			printDrill(c.out, d, whole)
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d drills' reports do not verify", bad, len(drills))
	}
	return nil
}

// printDrill writes one drill for a person.
func printDrill(w io.Writer, d shownDrill, whole bool) {
	if !d.Verified {
		fmt.Fprintf(w, "drill %s\n  signature: NOT VERIFIED: %s\n", d.ID, d.Error)
		printKept(w, d)
		return
	}
	s := d.Summary
	fmt.Fprintf(w, "drill %s  %s  %s (%.0fs)\n", d.ID, s.Verdict(), s.Start.Local().Format(time.RFC3339), s.End.Sub(s.Start).Seconds())
	for _, cut := range s.Cuts {
		fmt.Fprintf(w, "  cut %s\n    RTO: the last call the cut disturbed ended %.2fs after it; the longest call sent during it took %.2fs; %d errors\n",
			cut.Target, cut.RTO, cut.Longest, cut.Errors)
	}
	errs := "none"
	if len(s.PartnerErrors) > 0 {
		var parts []string
		for _, code := range slices.Sorted(maps.Keys(s.PartnerErrors)) {
			parts = append(parts, fmt.Sprintf("%s=%d", code, s.PartnerErrors[code]))
		}
		errs = strings.Join(parts, " ")
	}
	fmt.Fprintf(w, "  partner errors: %s; FAILED answers: %d; calls sent: %d\n", errs, s.Failed, s.Sent)
	if r := s.RPO; r != nil {
		fmt.Fprintf(w, "  RPO: %d answers lost, %d issuer effects without a record, %d unresolved (the checker's)\n", r.AnswersLost, r.EffectsWithoutRecord, r.Unresolved)
	} else {
		fmt.Fprintln(w, "  RPO: not checked (the checker did not run)")
	}
	fmt.Fprintf(w, "  signer: %s (certificate %s)\n  signature: verified\n", d.Signer, d.SignerCert)
	printKept(w, d)
	if whole && len(d.Report) > 0 {
		var v any
		if json.Unmarshal(d.Report, &v) == nil {
			b, _ := json.MarshalIndent(v, "  ", "  ")
			fmt.Fprintf(w, "  report:\n  %s\n", b)
		}
	}
}

func printKept(w io.Writer, d shownDrill) {
	if d.RecordedAt != nil {
		fmt.Fprintf(w, "  kept %s by %s on %s\n", d.RecordedAt.Local().Format(time.RFC3339), dash(d.RecordedBy), dash(d.Replica))
	}
}
