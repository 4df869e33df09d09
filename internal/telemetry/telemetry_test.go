package telemetry

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestScrapeOverLoopback(t *testing.T) {
	t.Setenv(EndpointEnv, "")
	// A cell: its ID is a label of every metric.
	tel, err := Setup(ctxT(t), Config{Service: "cell", Instance: "cell-t", Labels: map[string]string{"cell": "cell-t"},
		MetricsListen: "127.0.0.1:0", Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctxT(t))
	c, err := tel.Meter("test").Int64Counter("cellpay.test.things")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(ctxT(t), 3)
	cm, err := NewCell(tel.Meter("cell"))
	if err != nil {
		t.Fatal(err)
	}
	cm.Finished("sending")
	cm.PNR(true)
	cm.Reconciled("approved")
	expect(t, testutil.Scrape(t, tel.MetricsAddr()),
		`cellpay_test_things_total{cell="cell-t",service_instance_id="cell-t",service_name="cell"} 3`,
		`cellpay_cell_transactions_total{cell="cell-t",service_instance_id="cell-t",service_name="cell",state="pending"} 1`,
		`cellpay_cell_pnr_total{cell="cell-t",result="confirmed",`,
		`cellpay_cell_reconciled_total{cell="cell-t",service_instance_id="cell-t",service_name="cell",state="approved"} 1`,
		`target_info{`,
		`go_goroutines`,
	)

	// A GTR replica, whose metrics name cells.
	gt, err := Setup(ctxT(t), Config{Service: "gtr", Instance: "r1", MetricsListen: "127.0.0.1:0", Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer gt.Shutdown(ctxT(t))
	g, err := NewGTR(gt.Meter("gtr"), slices.Values([]CellGauge{{ID: "cell-a", HealthShare: 100, InFlight: 2}, {ID: "cell-b", HealthShare: 10}}))
	if err != nil {
		t.Fatal(err)
	}
	g.Done(&cellpayv1.Transaction{Status: cellpayv1.TransactionStatus_APPROVED}, nil, 1)
	g.Done(nil, status.Error(codes.Unavailable, "no cell"), 3)
	g.Rerouted("cell-b", status.Error(codes.Unavailable, "down"), false)
	expect(t, testutil.Scrape(t, gt.MetricsAddr()),
		`cellpay_gtr_transactions_total{code="OK",service_instance_id="r1",service_name="gtr",status="APPROVED"} 1`,
		`cellpay_gtr_transactions_total{code="Unavailable",service_instance_id="r1",service_name="gtr",status="none"} 1`,
		`cellpay_gtr_reroutes_total{cell="cell-b",reason="unavailable",service_instance_id="r1",service_name="gtr"} 1`,
		`cellpay_gtr_attempts_bucket{service_instance_id="r1",service_name="gtr",le="3"} 2`,
		`cellpay_gtr_cell_health_share{cell="cell-b",service_instance_id="r1",service_name="gtr"} 10`,
		`cellpay_gtr_cell_in_flight{cell="cell-a",service_instance_id="r1",service_name="gtr"} 2`,
	)
}

func expect(t *testing.T, text string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("scrape lacks %s\n%s", w, text)
		}
	}
}

func TestNoTracingWithoutEndpoint(t *testing.T) {
	t.Setenv(EndpointEnv, "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tel, err := Setup(ctxT(t), Config{Service: "gtr", Instance: "r1", Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctxT(t))
	if tel.MetricsAddr() != "" {
		t.Fatalf("serving metrics without MetricsListen: %s", tel.MetricsAddr())
	}
	_, span := tel.TracerProvider().Tracer("t").Start(ctxT(t), "op")
	defer span.End()
	if span.IsRecording() || span.SpanContext().IsSampled() || span.SpanContext().IsValid() {
		t.Fatalf("a span without an endpoint: %+v", span.SpanContext())
	}
}

func TestTracingWithEndpointNeverBlocks(t *testing.T) {
	// A collector that is not there: spans are dropped, nothing waits.
	t.Setenv(EndpointEnv, "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "200") // ms, each export
	tel, err := Setup(ctxT(t), Config{Service: "gtr", Instance: "r1", Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for range 100 {
		_, span := tel.TracerProvider().Tracer("t").Start(ctxT(t), "op")
		if !span.IsRecording() {
			t.Fatal("no span with an endpoint")
		}
		span.End()
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("recording spans took %v", d)
	}
	start = time.Now()
	_ = tel.Shutdown(ctxT(t)) // the export fails within its timeout
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Shutdown took %v", d)
	}
}

func TestShutdownStopsListener(t *testing.T) {
	tel, err := Setup(ctxT(t), Config{Service: "cell", Instance: "c", MetricsListen: "127.0.0.1:0", Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	addr := tel.MetricsAddr()
	_ = testutil.Scrape(t, addr)
	if err := tel.Shutdown(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("still listening after Shutdown")
	}
}

func TestSetupErrors(t *testing.T) {
	if _, err := Setup(ctxT(t), Config{Service: "cell"}); err == nil {
		t.Fatal("no instance: accepted")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	if _, err := Setup(ctxT(t), Config{Service: "cell", Instance: "c", MetricsListen: lis.Addr().String(), Log: quiet()}); err == nil {
		t.Fatal("a taken port: accepted")
	}
}

func TestRerouteReason(t *testing.T) {
	for _, c := range []struct {
		err     error
		healthy bool
		want    string
	}{
		{errors.New("cell said no"), true, "not_for_cell"},
		{status.Error(codes.Unavailable, "x"), false, "unavailable"},
		{status.Error(codes.Canceled, "x"), false, "timeout"},
		{status.Error(codes.DeadlineExceeded, "x"), false, "timeout"},
		{errors.New("cell-a: database down"), false, "cell_fault"},
	} {
		if got := RerouteReason(c.err, c.healthy); got != c.want {
			t.Errorf("%v %v: %s, want %s", c.err, c.healthy, got, c.want)
		}
	}
}

func TestRecordingDoesNotAllocate(t *testing.T) {
	tel, err := Setup(ctxT(t), Config{Service: "gtr", Instance: "r1", Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctxT(t))
	g, err := NewGTR(tel.Meter("gtr"), slices.Values([]CellGauge(nil)))
	if err != nil {
		t.Fatal(err)
	}
	txn := &cellpayv1.Transaction{Status: cellpayv1.TransactionStatus_DECLINED}
	g.Done(txn, nil, 2)
	if n := testing.AllocsPerRun(100, func() { g.Done(txn, nil, 2) }); n > 0 {
		t.Fatalf("Done allocates %v times", n)
	}
}

// TestCPUProfileOnRequest: with ProfileDirEnv set, Setup starts a CPU
// profile and Shutdown leaves it complete in that directory, named after
// the process; without it, nothing is written.
func TestCPUProfileOnRequest(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(ProfileDirEnv, dir)
	tel, err := Setup(ctxT(t), Config{Service: "cell", Instance: "cell-a", Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := tel.Shutdown(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "cell-cell-a.pprof"))
	if err != nil || len(b) == 0 {
		t.Fatalf("profile: %d bytes, %v", len(b), err)
	}
	if b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("the profile is not a gzipped pprof protobuf: % x", b[:2])
	}
	t.Setenv(ProfileDirEnv, "")
	tel, err = Setup(ctxT(t), Config{Service: "cell", Instance: "cell-b", Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	_ = tel.Shutdown(ctxT(t))
	if _, err := os.Stat(filepath.Join(dir, "cell-cell-b.pprof")); !os.IsNotExist(err) {
		t.Fatalf("a profile without %s: %v", ProfileDirEnv, err)
	}
}
