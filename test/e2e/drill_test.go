package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/operators"
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
	if err != nil {
		// What the access points said meanwhile (a failed drill's report
		// holds what the partner saw, not why), then the report, last: a
		// log cut to a failed test's last lines keeps it.
		for _, name := range []string{"gtr", "gtr-backup"} {
			t.Logf("%s's warnings and errors, last 15:\n%s", name, warnings(filepath.Join(env.p.LogDir(), name+".log"), 15))
		}
		t.Fatalf("cellpay drill: %v:\n%s", err, out)
	}
	t.Logf("cellpay drill:\n%s", out)
	for _, want := range []string{"cut primary access point", "cut backup access point", "switch away: after", "RTO: the last call the cut disturbed ended", "RPO: 0 answers lost, 0 issuer effects without a record", "RESULT: OK", "verdict: PASS"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the report has no %q", want)
		}
	}
	kept(t, string(out), func(args ...string) string {
		code, out, errs := gtrctlAs(t, operators.RoleViewer, args...)
		if code != 0 {
			t.Fatalf("gtrctl %v: exit %d:\n%s%s", args, code, out, errs)
		}
		return out
	}, "cut primary access point", "cut backup access point")
}

// keptID finds the ID of the report a drill kept in its output.
var keptID = regexp.MustCompile(`report kept: ([0-9a-f]{16}) \(gtrctl drills\)`)

// kept checks that the drill whose output is out kept its report: signed
// by the operators' certificate, listed by gtrctl (which runs gtrctl
// against the drilled platform's admin API, failing the test on an exit
// status other than 0), verified by gtrctl itself, naming every cut in
// cuts.
func kept(t *testing.T, out string, gtrctl func(args ...string) string, cuts ...string) {
	t.Helper()
	m := keptID.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the drill did not say it kept its report:\n%s", out)
	}
	id := m[1]
	if list := gtrctl("drills"); !strings.Contains(list, id) {
		t.Fatalf("gtrctl drills does not list %s:\n%s", id, list)
	}
	show := gtrctl("drills", "show", id)
	for _, want := range append([]string{"PASS", "signature: verified", "RPO: 0 answers lost, 0 issuer effects without a record"}, cuts...) {
		if !strings.Contains(show, want) {
			t.Errorf("gtrctl drills show %s has no %q:\n%s", id, want, show)
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

// warnings returns the last n lines of the log at path logged at WARN or
// ERROR.
func warnings(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") || strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
