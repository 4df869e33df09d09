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

	"github.com/cellpay/cellpay/internal/natsconn"
	"github.com/cellpay/cellpay/internal/refdata"
	"github.com/cellpay/cellpay/internal/tlsconf"
	"github.com/cellpay/cellpay/pkg/routing"
)

// Sink receives versions. *state.State implements it.
type Sink interface {
	// SetRefdataVersion records that cell cellID reports serving reference
	// data version v (0: none, or a bootstrap file). It is called once per
	// report, from one goroutine, in the order reports arrive; it must be
	// cheap when v did not change and must not block on I/O. It returns
	// false for a cell it does not know (one not in the routing table).
	SetRefdataVersion(cellID string, v uint64) bool
}

// Config configures a Watcher.
type Config struct {
	NATSURL string // required
	// NATSTLS is the component's certificate as its NATS identity; zero
	// for plaintext NATS without authentication (tests, benchmarks).
	NATSTLS tlsconf.Files
	Sink    Sink // required
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
	unknown atomic.Uint64 // reports of cells the Sink does not know
}

// Start subscribes to every cell's status reports. It never waits for
// NATS: with the server away it returns at once and the subscription
// starts when the connection does.
func Start(cfg Config) (*Watcher, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Watcher{cfg: cfg, closed: make(chan struct{})}
	nc, err := natsconn.Connect(cfg.NATSURL, cfg.Name, cfg.NATSTLS,
		nats.ClosedHandler(func(*nats.Conn) { close(w.closed) }))
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

// maxReport bounds a status report: a real one is a few hundred bytes.
const maxReport = 4 << 10

// decodeReport reads one report published on subject: the cell is the
// subject's last token (at most routing.MaxNameLen bytes), the body a
// refdata.Status of at most maxReport bytes that names that cell or none,
// with a version in 0..refdata.MaxVersion (0: none served). Anything else
// is an error: a report of 2^64-1 would otherwise pass every rule's
// minimum reference data version.
func decodeReport(subject string, data []byte) (cell string, version uint64, err error) {
	cell = strings.TrimPrefix(subject, refdata.StatusSubjectPrefix)
	switch {
	case cell == "" || cell == subject || strings.Contains(cell, "."):
		return "", 0, fmt.Errorf("subject %.80q is not %s<cell>", subject, refdata.StatusSubjectPrefix)
	case len(cell) > routing.MaxNameLen:
		return "", 0, fmt.Errorf("cell ID of %d bytes, longer than %d", len(cell), routing.MaxNameLen)
	case len(data) > maxReport:
		return "", 0, fmt.Errorf("report of %d bytes, more than %d", len(data), maxReport)
	}
	var st refdata.Status
	if err := json.Unmarshal(data, &st); err != nil {
		return "", 0, err
	}
	if st.Cell != "" && st.Cell != cell {
		return "", 0, fmt.Errorf("report names cell %.80q", st.Cell)
	}
	if st.Version > refdata.MaxVersion {
		return "", 0, fmt.Errorf("%w: reported version %d", refdata.ErrVersionRange, st.Version)
	}
	return cell, st.Version, nil
}

// handle reads one report (decodeReport); one that does not decode is
// dropped and counted.
func (w *Watcher) handle(m *nats.Msg) {
	cell, version, err := decodeReport(m.Subject, m.Data)
	if err != nil {
		// Log the first bad report and then every 100th: a misbehaving
		// publisher must not flood the GTR's log.
		if n := w.dropped.Add(1); n == 1 || n%100 == 0 {
			w.cfg.Log.Warn("refwatch: unreadable cell status dropped", "subject", m.Subject, "error", err, "dropped", n)
		}
		return
	}
	if !w.cfg.Sink.SetRefdataVersion(cell, version) {
		if n := w.unknown.Add(1); n == 1 || n%100 == 0 {
			w.cfg.Log.Warn("refwatch: status of a cell not in the routing table dropped", "cell", cell, "dropped", n)
		}
		return
	}
	w.reports.Add(1)
}

// Stats are the watcher's counters since Start.
type Stats struct {
	Reports uint64 // reports handed to the Sink
	Dropped uint64 // reports that could not be read
	Unknown uint64 // reports of cells the Sink does not know
}

// Stats returns the counters.
func (w *Watcher) Stats() Stats {
	return Stats{Reports: w.reports.Load(), Dropped: w.dropped.Load(), Unknown: w.unknown.Load()}
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
