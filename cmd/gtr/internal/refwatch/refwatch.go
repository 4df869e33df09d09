// Package refwatch tells the GTR which reference data version each cell
// serves: it listens to the status reports cells publish over core NATS
// (refdata.StatusSubjectPrefix + cell ID, every second and on every change)
// and hands each cell's version to a Sink, the routing state, which gates
// rules with a minimum reference data version on it.
//
// It is never on the transaction path: reports arrive on the NATS client's
// goroutine, and the Sink recompiles the routing table there, off the hot
// path. When NATS is away nothing is reported and nothing is forgotten:
// every cell keeps the last version it reported (see
// state.State.SetRefdataVersion), and the subscription resumes when the
// connection does. Versions are this replica's own view, like health;
// they are not replicated.
package refwatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cellpay/cellpay/internal/refdata"
)

// Sink receives versions. *state.State implements it.
type Sink interface {
	// SetRefdataVersion records that cell cellID reports serving reference
	// data version v (0: none, or a bootstrap file). It is called once per
	// report, from one goroutine, in the order reports arrive; it must be
	// cheap when v did not change and must not block on I/O.
	SetRefdataVersion(cellID string, v uint64)
}

// Config configures a Watcher.
type Config struct {
	NATSURL string // required
	Sink    Sink   // required
	// Name names the NATS connection (e.g. "gtr <replica>").
	Name string
	Log  *slog.Logger
}

func (c *Config) validate() error {
	if c.NATSURL == "" || c.Sink == nil {
		return errors.New("refwatch: NATSURL and Sink are required")
	}
	if c.Name == "" {
		c.Name = "gtr refwatch"
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// Watcher is a running subscription. Close stops it.
type Watcher struct {
	cfg    Config
	nc     *nats.Conn
	closed chan struct{}
	once   sync.Once

	reports atomic.Uint64 // reports handed to the Sink
	dropped atomic.Uint64 // reports that could not be read
}

// Start subscribes to every cell's status reports. It never waits for
// NATS: with the server away it returns at once and the subscription
// starts when the connection does.
func Start(cfg Config) (*Watcher, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Watcher{cfg: cfg, closed: make(chan struct{})}
	nc, err := nats.Connect(cfg.NATSURL,
		nats.Name(cfg.Name),
		nats.RetryOnFailedConnect(true), // do not wait for NATS at start
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.Timeout(time.Second),
		nats.ClosedHandler(func(*nats.Conn) { close(w.closed) }),
	)
	if err != nil {
		return nil, fmt.Errorf("refwatch: %w", err)
	}
	w.nc = nc
	if _, err := nc.Subscribe(refdata.StatusSubjectPrefix+"*", w.handle); err != nil {
		nc.Close()
		return nil, fmt.Errorf("refwatch: subscribe: %w", err)
	}
	return w, nil
}

// handle reads one report. The cell is the subject's last token; a report
// that names another cell, or is not a Status, is dropped and counted.
func (w *Watcher) handle(m *nats.Msg) {
	cell := strings.TrimPrefix(m.Subject, refdata.StatusSubjectPrefix)
	var st refdata.Status
	err := json.Unmarshal(m.Data, &st)
	if err == nil && st.Cell != "" && st.Cell != cell {
		err = fmt.Errorf("report names cell %q", st.Cell)
	}
	if err != nil {
		// Log the first bad report and then every 100th: a misbehaving
		// publisher must not flood the GTR's log.
		if n := w.dropped.Add(1); n == 1 || n%100 == 0 {
			w.cfg.Log.Warn("refwatch: unreadable cell status dropped", "subject", m.Subject, "error", err, "dropped", n)
		}
		return
	}
	w.cfg.Sink.SetRefdataVersion(cell, st.Version)
	w.reports.Add(1)
}

// Stats are the watcher's counters since Start.
type Stats struct {
	Reports uint64 // reports handed to the Sink
	Dropped uint64 // reports that could not be read
}

// Stats returns the counters.
func (w *Watcher) Stats() Stats {
	return Stats{Reports: w.reports.Load(), Dropped: w.dropped.Load()}
}

// Close stops the subscription, letting a report being handled finish.
func (w *Watcher) Close() {
	w.once.Do(func() {
		if err := w.nc.Drain(); err != nil {
			w.nc.Close() // not connected: nothing to drain
		}
		select {
		case <-w.closed:
		case <-time.After(5 * time.Second):
			w.nc.Close()
		}
	})
}
