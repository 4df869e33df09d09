package refdata

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Source file names in a reference data directory (see
// config/refdata/README.md for the format).
const (
	SettingsFile   = "settings.json"
	CurrenciesFile = "currencies.csv"
	MCCFile        = "mcc.csv"
	FXRatesFile    = "fx_rates.csv"
)

// ReadSource reads reference data from path: a directory in the source
// format (settings.json, currencies.csv, mcc.csv, fx_rates.csv) or a single
// JSON file in the File format. It does not validate the content (FromFile
// does), so that a replicator can be told to publish it unchecked.
func ReadSource(path string) (File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return File{}, fmt.Errorf("refdata: source: %w", err)
	}
	if !fi.IsDir() {
		b, err := os.ReadFile(path)
		if err != nil {
			return File{}, fmt.Errorf("refdata: source: %w", err)
		}
		var f File
		if err := json.Unmarshal(b, &f); err != nil {
			return File{}, fmt.Errorf("refdata: source %s: %w", path, err)
		}
		return f, nil
	}
	return readDir(path)
}

func readDir(dir string) (File, error) {
	var f File
	b, err := os.ReadFile(filepath.Join(dir, SettingsFile))
	if err != nil {
		return f, fmt.Errorf("refdata: source: %w", err)
	}
	var settings struct {
		BaseCurrency              string            `json:"base_currency"`
		DefaultSettlementCurrency string            `json:"default_settlement_currency"`
		Partners                  map[string]string `json:"partners"`
		BlockedCategories         []string          `json:"blocked_categories"`
	}
	if err := json.Unmarshal(b, &settings); err != nil {
		return f, fmt.Errorf("refdata: source %s: %w", SettingsFile, err)
	}
	f.BaseCurrency = settings.BaseCurrency
	f.DefaultSettlementCurrency = settings.DefaultSettlementCurrency
	f.Partners = settings.Partners
	f.BlockedCategories = settings.BlockedCategories

	var errs []error
	f.Currencies = map[string]Currency{}
	errs = append(errs, readCSV(dir, CurrenciesFile, 3, func(rec []string) error {
		n, err := strconv.Atoi(rec[1])
		if err != nil {
			return fmt.Errorf("minor_units %q: not an integer", rec[1])
		}
		f.Currencies[rec[0]] = Currency{MinorUnits: n, Name: rec[2]}
		return nil
	}))
	f.FXRates = map[string]string{}
	errs = append(errs, readCSV(dir, FXRatesFile, 2, func(rec []string) error {
		f.FXRates[rec[0]] = rec[1]
		return nil
	}))
	f.MCC = map[string]MCC{}
	errs = append(errs, readCSV(dir, MCCFile, 4, func(rec []string) error {
		f.MCC[rec[0]] = MCC{Category: rec[1], Risk: rec[2]}
		return nil
	}))
	return f, errors.Join(errs...)
}

// readCSV calls row for every record after the header line, with at least
// min fields; the last field takes the rest of the line (descriptions hold
// commas). Lines starting with # are comments. A code seen twice is an
// error: the source would otherwise say two things.
func readCSV(dir, name string, min int, row func([]string) error) error {
	file, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return fmt.Errorf("refdata: source: %w", err)
	}
	defer file.Close()
	r := csv.NewReader(file)
	r.Comment = '#'
	r.FieldsPerRecord = -1
	r.TrimLeadingSpace = true
	seen := map[string]bool{}
	for header := true; ; header = false {
		rec, err := r.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("refdata: source %s: %w", name, err)
		}
		if header {
			continue
		}
		line, _ := r.FieldPos(0)
		if len(rec) < min {
			return fmt.Errorf("refdata: source %s:%d: want %d fields, have %d", name, line, min, len(rec))
		}
		rec[min-1] = strings.Join(rec[min-1:], ",")
		for i := range rec[:min] {
			rec[i] = strings.TrimSpace(rec[i])
		}
		if seen[rec[0]] {
			return fmt.Errorf("refdata: source %s:%d: %q appears twice", name, line, rec[0])
		}
		seen[rec[0]] = true
		if err := row(rec[:min]); err != nil {
			return fmt.Errorf("refdata: source %s:%d: %w", name, line, err)
		}
	}
}
