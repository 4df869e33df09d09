package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

// twoSites is a platform of the test's own in the two-site layout of make
// run SITES=2 (site-a on 127.0.1.1, site-b on 127.0.2.1, an access point
// and two cells of two instances each, config/gtr-sites.yaml; each access
// point dialing the cells from its site's address), what the sites share
// on 127.0.0.1 on free ports; tool runs one of the project's commands
// against it.
type twoSites struct {
	p    *platform.Platform
	cfg  platform.Config
	tool func(name string, args ...string) string
}

func startTwoSites(t *testing.T, ctx context.Context) twoSites {
	t.Helper()
	dir := platformDir(t, "cellpay-sites-")
	ports, err := testutil.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	pgBase, err := testutil.FreePortRun(len(platform.TwoSitesCells))
	if err != nil {
		t.Fatal(err)
	}
	addr := func(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
	cfg := platform.TwoSites(platform.Config{
		NoFsync: true, // tests: see platform.Config.NoFsync
		BinDir:  env.bin, DataDir: filepath.Join(dir, "data"), GTRConfig: filepath.Join(env.root, platform.TwoSitesGTRConfig),
		RefData: filepath.Join(env.root, "config", "refdata.json"), CellInstances: 2,
		IssuerAddr: addr(ports[0]), PGBasePort: pgBase, NoStandby: true,
		NATS: true, NATSAddr: addr(natsPortRun(t)), NATSServers: 1, RefDataSource: filepath.Join(env.root, "config", "refdata"),
	})
	p, err := platform.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })
	ownLogs(p)
	tool := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(env.bin, name), args...)
		cmd.Env = append(os.Environ(), "CELLPAY_DATA="+cfg.DataDir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			for _, n := range []string{"gtr", "gtr-backup"} {
				t.Logf("%s's warnings and errors, last 30:\n%s", n, warnings(filepath.Join(p.LogDir(), n+".log"), 30))
			}
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	return twoSites{p: p, cfg: cfg, tool: tool}
}

// bothSitesUp waits until the access point at admin counts the four
// cells up, each in its site.
func (s twoSites) bothSitesUp(t *testing.T, admin string, within time.Duration) {
	t.Helper()
	testutil.Eventually(t, within, "both sites' cells up in "+admin+"'s view", func() bool {
		cells := s.cells(t, admin)
		up := 0
		for _, c := range platform.TwoSitesCells {
			cs := cells[c.ID]
			if cs != nil && cs.GetHealth() != adminproto.Health_HEALTH_DOWN && cs.GetHealthShare() > 0 && cs.GetSite() != "" {
				up++
			}
		}
		return up == len(platform.TwoSitesCells)
	})
}

// cells is the access point at admin's view of the cells (gtrctl cells
// -o json), by ID.
func (s twoSites) cells(t *testing.T, admin string) map[string]*adminproto.CellStatus {
	t.Helper()
	var resp adminproto.ListCellsResponse
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(s.tool("gtrctl", "cells", "-o", "json", "--addr", admin)), &resp); err != nil {
		t.Fatalf("gtrctl cells -o json: %v", err)
	}
	out := map[string]*adminproto.CellStatus{}
	for _, c := range resp.GetCells() {
		out[c.GetId()] = c
	}
	return out
}

// TestDrillSite: the two-site layout (startTwoSites), p-002 homed in
// site-b, and `cellpay drill -site site-b`: under load through both sites'
// access points, site-b's access point and every instance of its cells
// frozen, held, thawed. The partner sees no error, the checker finds
// nothing lost or twice.
//
// It found a gap about one run in five under make test's load
// (docs/design/sites.md, "What a frozen site finds"): a thawed site
// resumed the attempts it held, and its natural home, whose claim timed
// out in the burst, decided a transaction without a claim that a cell of
// the other site had claimed and decided meanwhile (two cells past the
// point of no return for one ID; the issuer applied it once). Closed by
// deciding without a claim only in a directory outage.
func TestDrillSite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := startTwoSites(t, ctx)
	s.tool("gtrctl", "partners", "set-home-site", "p-002", "site-b", "--addr", s.cfg.AdminAddr)
	s.bothSitesUp(t, s.cfg.BackupAdminAddr, 30*time.Second)

	out := s.tool("cellpay", "drill", "-data", s.cfg.DataDir, "-site", "site-b", "-rate", "30", "-hold", "6s", "-settle", "4s")
	t.Logf("cellpay drill:\n%s", out)
	for _, want := range []string{"cut site site-b (127.0.2.1: access point 127.0.2.1:7070, cells cell-c, cell-d)", "serves again", "RTO: the last call the cut disturbed ended", "RPO: 0 answers lost", "RESULT: OK", "verdict: PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report has no %q", want)
		}
	}
	kept(t, out, func(args ...string) string {
		return s.tool("gtrctl", append(args, "--addr", s.cfg.AdminAddr)...)
	}, "site site-b")
}
