package issuersim

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults for the zero values of Config.
const (
	DefaultPerTxnLimit  int64 = 500_000
	DefaultPerCardLimit int64 = 5_000_000
)

// Config configures a Server. The zero value is usable.
type Config struct {
	// Now is the clock card expiry is checked against and effects are
	// recorded at (ListEffects). Default time.Now.
	// Fault latency and hangs use real time regardless.
	Now func() time.Time
	// PerTxnLimit is the largest amount_minor_units one authorization may
	// carry. Zero means DefaultPerTxnLimit.
	PerTxnLimit int64
	// PerCardLimit caps the cumulative approved amount per card. Zero means
	// DefaultPerCardLimit.
	PerCardLimit int64
	// Seed seeds the random source behind Faults.error_rate, so a test that
	// injects a partial error rate sees the same failures on every run.
	Seed uint64
	// Logger receives debug lines per decision and info lines on fault
	// changes. Default: discard.
	Logger *slog.Logger
}

// withDefaults returns c with its zero fields filled in.
func (c Config) withDefaults() Config {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.PerTxnLimit == 0 {
		c.PerTxnLimit = DefaultPerTxnLimit
	}
	if c.PerCardLimit == 0 {
		c.PerCardLimit = DefaultPerCardLimit
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate reports what is wrong with c after defaults are applied.
func (c Config) validate() error {
	var errs []error
	if c.PerTxnLimit < 0 {
		errs = append(errs, fmt.Errorf("PerTxnLimit must not be negative, got %d", c.PerTxnLimit))
	}
	if c.PerCardLimit < 0 {
		errs = append(errs, fmt.Errorf("PerCardLimit must not be negative, got %d", c.PerCardLimit))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("issuersim: config: %w", err)
	}
	return nil
}
