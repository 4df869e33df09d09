package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/load"
)

// TestDrillCommand runs `cellpay drill` against the running platform, as
// an operator would after make run: the guide's drill, cutting the primary
// access point, restoring it, then the backup, with the checker's verdict.
func TestDrillCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The drill measures cuts of a warm platform. A cold one's first calls
	// can outlast the client's read timeout, and such a call retried on
	// the other access point while its first attempt lives may be routed
	// to another cell by a replica whose health view differs (seen once:
	// 36 transactions past the PNR in two cells, one issuer effect each):
	// a known gap between per-replica coalescing and cross-replica
	// retries, left to the GTR (docs/partners/access-points.md, "A known gap").
	warm(t, ctx)
	cmd := exec.CommandContext(ctx, filepath.Join(env.bin, "cellpay"), "drill", "-data", env.p.Config().DataDir,
		"-cut", "primary,backup", "-rate", "30", "-hold", "6s", "-settle", "4s")
	out, err := cmd.CombinedOutput()
	t.Logf("cellpay drill:\n%s", out)
	if err != nil {
		t.Fatalf("cellpay drill: %v", err)
	}
	for _, want := range []string{"cut primary access point", "cut backup access point", "switch away: after", "RESULT: OK", "verdict: PASS"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the report has no %q", want)
		}
	}
}

// warm sends a few calls through each access point.
func warm(t *testing.T, ctx context.Context) {
	t.Helper()
	for _, addr := range []string{env.gtrAddr, env.backupAddr} {
		cfg := load.Config{Target: load.TargetGTR, Addr: addr, DialOptions: env.gtrOpts, Mode: load.ModeClosed, Concurrency: 8,
			Count: 100, Duration: 20 * time.Second, RunID: runID + "-warm-" + strings.ReplaceAll(addr, ":", "-"), PerRequestTimeout: 10 * time.Second}
		if _, err := load.Run(ctx, cfg, nil); err != nil {
			t.Fatal(err)
		}
	}
}
