// Package checker verifies a Cellpay run after the fact, from the outside:
// it reads every attempted transaction back through the GTR's
// GetTransaction, the issuer simulator's effect counters and every cell's
// own database, and compares them with what the partner was told. It
// reports the docs/design/README.md invariants a failover can break: issuer effects per
// transaction, records past the point of no return in more than one cell,
// lost transactions and answers that differ from the final record. A
// transaction is (partner, transaction ID) everywhere it looks: transaction
// IDs are a namespace per partner.
//
// It only reads. It must never write to a cell's database or call
// SubmitTransaction: a checker that changes what it checks proves nothing.
package checker

import (
	"errors"
	"fmt"
	"google.golang.org/grpc"
	"time"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// Cell names one cell's database.
type Cell struct {
	// ID is the cell's ID (cell-a); it labels the cell's records in the
	// report.
	ID string
	// DatabaseURL is a pgx connection string for the cell's Postgres.
	DatabaseURL string
}

// Defaults for the zero values of Config.
const (
	DefaultConcurrency  = 32
	DefaultEffectsBatch = 1000
	DefaultExamples     = 10
	DefaultPollInterval = 200 * time.Millisecond
	// DefaultCallTimeout bounds one GetTransaction or Effects call.
	DefaultCallTimeout = 10 * time.Second
)

// DefaultPrePNRFailures are the decline reasons of records a cell fails on
// its own, before its point of no return (see the orchestrator's enrich):
// a failed record with one of them never reached the issuer.
var DefaultPrePNRFailures = []string{"no_fx_rate"}

// Config says where to read a run from.
type Config struct {
	// GTRAddr is the GTR's partner API (host:port). Ignored when Payments
	// is set.
	GTRAddr string
	// GTRDialOptions connect to GTRAddr: TLS and the partners' API keys
	// (pkg/client's TLS and PartnerKeys); plaintext when empty.
	GTRDialOptions []grpc.DialOption
	// IssuerAddr is the issuer simulator (host:port). Ignored when Issuer
	// is set.
	IssuerAddr string
	// IssuerDialOptions connect to IssuerAddr: mutual TLS as the tools'
	// identity (hop.Ops), which alone may read Effects; plaintext when
	// empty.
	IssuerDialOptions []grpc.DialOption
	// Payments and Issuer, when set, are used instead of dialing GTRAddr
	// and IssuerAddr (tests that already hold clients).
	Payments cellpayv1.PaymentsClient
	Issuer   issuerproto.IssuerClient
	// Cells are the databases of every cell that may hold a record; a cell
	// left out can hide a duplicate.
	Cells []Cell
	// Concurrency bounds concurrent GetTransaction calls; default
	// DefaultConcurrency.
	Concurrency int
	// EffectsBatch is the number of transactions per Effects call; default
	// DefaultEffectsBatch.
	EffectsBatch int
	// Examples caps the example transactions kept per problem; default
	// DefaultExamples. Negative keeps none.
	Examples int
	// PollInterval is how often WaitResolved polls; default
	// DefaultPollInterval.
	PollInterval time.Duration
	// CallTimeout bounds one RPC; default DefaultCallTimeout.
	CallTimeout time.Duration
	// PrePNRFailures are the reasons of failed records that never passed
	// the point of no return; default DefaultPrePNRFailures. Every other
	// failed record counts as past it: a wrong guess here over-reports
	// re-routes, never hides one.
	PrePNRFailures []string
}

func (c Config) withDefaults() Config {
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.EffectsBatch <= 0 {
		c.EffectsBatch = DefaultEffectsBatch
	}
	if c.Examples == 0 {
		c.Examples = DefaultExamples
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.PrePNRFailures == nil {
		c.PrePNRFailures = DefaultPrePNRFailures
	}
	return c
}

// ErrInvalidConfig wraps every configuration error.
var ErrInvalidConfig = errors.New("checker: invalid config")

func (c Config) validate() error {
	var errs []error
	if c.Payments == nil && c.GTRAddr == "" {
		errs = append(errs, errors.New("GTRAddr is required"))
	}
	if c.Issuer == nil && c.IssuerAddr == "" {
		errs = append(errs, errors.New("IssuerAddr is required"))
	}
	if len(c.Cells) == 0 {
		errs = append(errs, errors.New("at least one cell database is required"))
	}
	seen := map[string]bool{}
	for i, cell := range c.Cells {
		switch {
		case cell.ID == "":
			errs = append(errs, fmt.Errorf("cell %d: ID is required", i))
		case seen[cell.ID]:
			errs = append(errs, fmt.Errorf("cell %s: listed twice", cell.ID))
		}
		seen[cell.ID] = true
		if cell.DatabaseURL == "" {
			errs = append(errs, fmt.Errorf("cell %q: DatabaseURL is required", cell.ID))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}
