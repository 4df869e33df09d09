package refwatch

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/pkg/routing"
)

// FuzzDecodeReport feeds the GTR's decoder of cell status reports any
// subject and body: it must never panic, and what it accepts names the
// subject's cell, a short cell ID and a version a cell can serve.
func FuzzDecodeReport(f *testing.F) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	report, _ := json.Marshal(refdata.Status{Cell: "cell-a", Version: 42, Source: "nats", AppliedAt: at, PublishedAt: at, Refused: 2, LastRefused: "version 43: refdata: inconsistent version", ReportedAt: at})
	f.Add("cell-a", report)
	f.Add("cell-b", report)
	f.Add("cell-a", []byte(`{"cell":"cell-a","version":0,"source":"none","applied_at":"0001-01-01T00:00:00Z","published_at":"0001-01-01T00:00:00Z","refused":0,"reported_at":"2026-01-01T00:00:00Z"}`))
	f.Add("cell-a", []byte(`{"version":18446744073709551615}`))
	f.Add("cell-a", []byte(`{"version":9007199254740992}`))
	f.Add("cell-a", []byte(`{"version":-1}`))
	f.Add("", []byte(`{}`))
	f.Add("a.b", []byte(`{}`))
	f.Add("cell-a", []byte(`not json`))
	f.Fuzz(func(t *testing.T, cellToken string, body []byte) {
		subject := refdata.StatusSubjectPrefix + cellToken
		cell, v, err := decodeReport(subject, body)
		if err != nil {
			if cell != "" || v != 0 {
				t.Fatal("a refused report came back with values")
			}
			return
		}
		if cell != cellToken || cell == "" || len(cell) > routing.MaxNameLen || strings.Contains(cell, ".") {
			t.Fatalf("accepted cell %q from subject %q", cell, subject)
		}
		if v > refdata.MaxVersion {
			t.Fatalf("accepted version %d", v)
		}
		var st refdata.Status
		if json.Unmarshal(body, &st) != nil || (st.Cell != "" && st.Cell != cell) || st.Version != v {
			t.Fatalf("accepted %q for %q as version %d", body, cell, v)
		}
	})
}

func TestDecodeReportRefusesPoison(t *testing.T) {
	for _, body := range []string{`{"version":18446744073709551615}`, `{"version":9223372036854775807}`} {
		if _, _, err := decodeReport(refdata.StatusSubjectPrefix+"cell-a", []byte(body)); !errors.Is(err, refdata.ErrVersionRange) {
			t.Errorf("%s: %v", body, err)
		}
	}
	if _, _, err := decodeReport(refdata.StatusSubjectPrefix+"cell-a", []byte(`{"version":`+strings.Repeat(" ", maxReport)+`1}`)); err == nil {
		t.Error("an oversized report was accepted")
	}
}
