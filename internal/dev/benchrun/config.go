package benchrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Hard caps: a benchmark is always bounded, and never by more than these.
const (
	MaxRuns     = 100
	MaxVariants = 16
	// MaxSamples bounds the metric samples one command run may print.
	MaxSamples = 10_000
	// MaxLine bounds one line of a command's stdout, in bytes.
	MaxLine = 1 << 20
	// MaxTimeout bounds Config.Timeout.
	MaxTimeout = 24 * time.Hour
)

// Defaults, as the benchrun command's flags give them.
const (
	DefaultRuns      = 5
	DefaultQuiet     = 0.15
	DefaultQuietWait = 2 * time.Minute
	DefaultTimeout   = 30 * time.Minute
)

// ErrInvalidConfig wraps every configuration error returned by Run, so that
// callers can tell a refused configuration from a failed run.
var ErrInvalidConfig = errors.New("benchrun: invalid config")

// ErrCommandFailed wraps the error of Run when a command failed (exited
// non-zero, timed out, printed too much or not the -per metric).
var ErrCommandFailed = errors.New("benchrun: command failed")

// Variant is one of the commands compared.
type Variant struct {
	// Name labels the variant in the output: 1..64 characters, no space
	// or '='.
	Name string
	// Command is run with sh -c.
	Command string
}

// Config says what to run and how. Its problems are reported with the
// benchrun command's flag names (-runs, -quiet, ...): the command is the
// package's reason to exist.
type Config struct {
	// Variants are compared with the first, the baseline. One variant is
	// allowed: medians and spread only.
	Variants []Variant
	// Runs is how many times every variant runs (1..MaxRuns).
	Runs int
	// Quiet is the CPU busy share (0..1) under which the host counts as
	// quiet.
	Quiet float64
	// QuietWait is the longest wait for a quiet host before each command;
	// 0 skips the check (no wait, and the run is not marked either way).
	QuietWait time.Duration
	// Procs, when not 0, is the PID whose direct children's process trees
	// are measured per run, one metric "cpu:<name>" each.
	Procs int
	// Per names a metric the command prints (by name, or "name unit"); its
	// total in a run divides the run's CPU figures into µs per unit of it.
	Per string
	// Timeout bounds each command run; its process group is then killed.
	Timeout time.Duration

	// Log receives each command's stdout, each line prefixed with
	// "[NAME #i] ", its stderr as it comes, and the harness's notes.
	// Writes are serialised. Nil discards.
	Log io.Writer
	// Host reads /proc; nil is the real one.
	Host Host
	// Exec runs one command; nil is Shell.
	Exec ExecFunc
	// Sleep waits d or until ctx ends (the quiet-host poll); nil is a
	// timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now dates the result; nil is time.Now.
	Now func() time.Time
}

// validate reports the first problem with c, wrapped in ErrInvalidConfig.
func (c Config) validate() error {
	if err := c.validateShape(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

func (c Config) validateShape() error {
	if len(c.Variants) == 0 {
		return errors.New("-v: no variant (want -v NAME=COMMAND)")
	}
	if len(c.Variants) > MaxVariants {
		return fmt.Errorf("-v: %d variants, at most %d", len(c.Variants), MaxVariants)
	}
	seen := map[string]bool{}
	for _, v := range c.Variants {
		if v.Name == "" || len(v.Name) > 64 || strings.ContainsAny(v.Name, " \t\n=") {
			return fmt.Errorf("-v %q: want a name of 1..64 characters without spaces or '='", v.Name)
		}
		if seen[v.Name] {
			return fmt.Errorf("-v %s: the name is used twice", v.Name)
		}
		seen[v.Name] = true
		if strings.TrimSpace(v.Command) == "" {
			return fmt.Errorf("-v %s: empty command", v.Name)
		}
	}
	if c.Runs < 1 || c.Runs > MaxRuns {
		return fmt.Errorf("-runs %d: want 1..%d", c.Runs, MaxRuns)
	}
	if !(c.Quiet > 0 && c.Quiet <= 1) {
		return fmt.Errorf("-quiet %v: want a busy share in (0, 1]", c.Quiet)
	}
	if c.QuietWait < 0 || c.QuietWait > MaxTimeout {
		return fmt.Errorf("-quiet-wait %v: want 0..%v", c.QuietWait, MaxTimeout)
	}
	if c.Procs < 0 {
		return fmt.Errorf("-procs %d: want a PID", c.Procs)
	}
	if c.Timeout <= 0 || c.Timeout > MaxTimeout {
		return fmt.Errorf("-timeout %v: want > 0 and <= %v", c.Timeout, MaxTimeout)
	}
	if c.Per != "" && (strings.TrimSpace(c.Per) != c.Per || isReserved(c.Per)) {
		return fmt.Errorf("-per %q: want the name of a metric the command prints", c.Per)
	}
	return nil
}
