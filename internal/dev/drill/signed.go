package drill

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cellpay/cellpay/internal/drillreport"
)

// Summary is the report's summary as a signed report carries it
// (package drillreport): derived from the report, never kept apart
// from it.
func (r Report) Summary() drillreport.Summary {
	s := drillreport.Summary{Start: r.Start, End: r.End, Passed: r.OK(), Failed: r.Failed, Sent: r.Load.Sent}
	if s.End.IsZero() {
		s.End = time.Now()
	}
	for code, n := range r.Errors {
		if n > 0 {
			if s.PartnerErrors == nil {
				s.PartnerErrors = map[string]int{}
			}
			s.PartnerErrors[code] = n
		}
	}
	for _, st := range r.Steps {
		s.Cuts = append(s.Cuts, drillreport.Cut{Target: st.Target, RTO: st.DisturbedUntil, Longest: st.LongestDuring, Errors: st.ErrorsDuring})
	}
	if c := r.Checker; c != nil {
		s.RPO = &drillreport.RPO{AnswersLost: c.Lost, EffectsWithoutRecord: c.EffectsWithoutRecord, Unresolved: c.Pending}
	}
	return s
}

// Document is the report's bytes to be signed: its summary and the whole
// report, or, should the report pass drillreport.MaxReport (a drill of
// very many cuts), its summary alone.
func (r Report) Document() ([]byte, error) {
	full, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("drill: report: %w", err)
	}
	d := drillreport.Document{Summary: r.Summary(), Report: full}
	if b, err := d.Marshal(); err == nil {
		return b, nil
	}
	d.Report = nil
	return d.Marshal()
}

// Sign signs the report with cert, the operators' certificate.
func (r Report) Sign(cert tls.Certificate) (drillreport.Signed, error) {
	b, err := r.Document()
	if err != nil {
		return drillreport.Signed{}, err
	}
	return drillreport.Sign(b, cert)
}
