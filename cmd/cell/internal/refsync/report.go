package refsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/cellpay/cellpay/internal/refdata"
)

// reportLoop publishes the status every StatusInterval and whenever the
// served version changes or a version is refused. Core NATS: a report lost
// while NATS is away is simply replaced by the next one.
func (s *Syncer) reportLoop(ctx context.Context, nc *nats.Conn) {
	t := time.NewTicker(s.cfg.StatusInterval)
	defer t.Stop()
	subject := refdata.StatusSubjectPrefix + s.cfg.CellID
	for {
		if nc.IsConnected() {
			if b, err := json.Marshal(s.Status()); err == nil {
				_ = nc.Publish(subject, b)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
	}
}

// serveMetrics serves /metrics in the Prometheus text format until stop.
func (s *Syncer) serveMetrics(ctx context.Context) (stop func(), err error) {
	lis, err := net.Listen("tcp", s.cfg.MetricsListen)
	if err != nil {
		return nil, fmt.Errorf("refsync: metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		s.writeMetrics(w)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Log.Warn("metrics server stopped", "error", err)
		}
	}()
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}, nil
}

// writeMetrics writes the reference data metrics, labelled with the cell.
func (s *Syncer) writeMetrics(w interface{ Write([]byte) (int, error) }) {
	st := s.Status()
	cell := fmt.Sprintf(`{cell=%q}`, s.cfg.CellID)
	connected := 0
	if s.connected.Load() {
		connected = 1
	}
	serving := 0
	if s.Serving() {
		serving = 1
	}
	fmt.Fprintf(w, "# HELP cellpay_refdata_version The reference data version the cell serves (0: a bootstrap file).\n# TYPE cellpay_refdata_version gauge\ncellpay_refdata_version%s %d\n", cell, st.Version)
	fmt.Fprintf(w, "# HELP cellpay_refdata_serving 1 when the cell serves a version.\n# TYPE cellpay_refdata_serving gauge\ncellpay_refdata_serving%s %d\n", cell, serving)
	fmt.Fprintf(w, "# HELP cellpay_refdata_staleness_seconds Age of the served version: since it was published (or the bootstrap file loaded).\n# TYPE cellpay_refdata_staleness_seconds gauge\ncellpay_refdata_staleness_seconds%s %.3f\n", cell, s.Staleness().Seconds())
	fmt.Fprintf(w, "# HELP cellpay_refdata_applied_total Versions applied from NATS since start.\n# TYPE cellpay_refdata_applied_total counter\ncellpay_refdata_applied_total%s %d\n", cell, s.applied.Load())
	fmt.Fprintf(w, "# HELP cellpay_refdata_refused_total Versions refused (malformed or inconsistent) since start.\n# TYPE cellpay_refdata_refused_total counter\ncellpay_refdata_refused_total%s %d\n", cell, st.Refused)
	fmt.Fprintf(w, "# HELP cellpay_refdata_last_apply_seconds How long the last apply took (validate, Postgres, memory).\n# TYPE cellpay_refdata_last_apply_seconds gauge\ncellpay_refdata_last_apply_seconds%s %.6f\n", cell, time.Duration(s.lastApply.Load()).Seconds())
	fmt.Fprintf(w, "# HELP cellpay_refdata_nats_connected 1 while the cell is connected to NATS.\n# TYPE cellpay_refdata_nats_connected gauge\ncellpay_refdata_nats_connected%s %d\n", cell, connected)
}
