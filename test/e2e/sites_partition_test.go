package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// partition cuts the link between the two sites' addresses on this host
// (nftables: every packet from one to the other dropped, both ways, as a
// cut line drops them) until heal is called; the cut is healed when the
// test ends whatever happens.
func partition(t *testing.T, a, b string) (heal func()) {
	t.Helper()
	nft, err := exec.LookPath("nft")
	if err != nil {
		if _, err2 := os.Stat("/usr/sbin/nft"); err2 != nil {
			t.Fatalf("nft: %v (scripts/deps.sh installs nftables)", err)
		}
		nft = "/usr/sbin/nft"
	}
	table := fmt.Sprintf("cellpay_partition_%d", os.Getpid())
	rules := fmt.Sprintf(`table inet %s {
	chain output {
		type filter hook output priority 0; policy accept;
		ip saddr %s ip daddr %s drop
		ip saddr %s ip daddr %s drop
	}
}
`, table, a, b, b, a)
	cmd := exec.Command(nft, "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: cutting %s from %s: %v\n%s", a, b, err, out)
	}
	var once sync.Once
	heal = func() {
		once.Do(func() {
			if out, err := exec.Command(nft, "delete", "table", "inet", table).CombinedOutput(); err != nil {
				t.Errorf("nft: healing the cut: %v\n%s", err, out)
			}
		})
	}
	t.Cleanup(heal)
	return heal
}

// TestSitesPartitioned: the two-site layout (startTwoSites), the line
// between the sites cut for 60 s under load (nftables on their addresses:
// each site's access point loses the other's cells, and the other site's
// health checks with them), with partners of each home site calling
// through both sites' access points, preferring their own. Each site
// keeps serving its home partners from its own cells throughout: no
// partner sees an error, and what reaches the home site's access point is
// answered by the home site's cells; once the line is back both access
// points see all four cells again, and the checker finds nothing lost,
// nothing twice, no answer that differs. The client's split (about 1% of
// calls to the next in line, here the other site's access point, by the
// guide's rule) is served in the other site while the line is cut: its
// access point reaches only its own cells, and below spill_below the
// key's pool spills there, the one directory both sites still share
// keeping one decider.
//
// What the sites share here (one NATS cluster, so one transaction
// directory; the issuer; the Postgres servers) stays reachable from both:
// docs/design/sites.md, "A site cut off", says what changes with a
// directory per site.
func TestSitesPartitioned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := startTwoSites(t, ctx)
	homes := map[string]string{"p-001": "site-a", "p-003": "site-a", "p-002": "site-b", "p-004": "site-b"}
	for partner, site := range homes {
		s.tool("gtrctl", "partners", "set-home-site", partner, site, "--addr", s.cfg.AdminAddr)
	}
	s.bothSitesUp(t, s.cfg.AdminAddr, 30*time.Second)
	s.bothSitesUp(t, s.cfg.BackupAdminAddr, 30*time.Second)
	siteOf := map[string]string{}
	for _, c := range platform.TwoSitesCells {
		siteOf[c.ID] = "site-a"
		if strings.HasPrefix(c.Addr, platform.SiteBHost+":") {
			siteOf[c.ID] = platform.SiteB
		}
	}

	gtrOpts, err := s.p.GTRDialOptions()
	if err != nil {
		t.Fatal(err)
	}
	aps := []client.AccessPoint{{Addr: s.cfg.GTRAddr, Site: "site-a"}, {Addr: s.cfg.BackupGTRAddr, Site: "site-b"}}
	const (
		rate    = 15 // per home site
		loadFor = 80 * time.Second
		cutAt   = 10 * time.Second
		cutFor  = 60 * time.Second
	)
	var (
		mu          sync.Mutex
		answers     []checker.Answer
		cutFrom     time.Time
		cutTo       time.Time
		crossed     []string
		servedAt    = map[string]int{} // site of the cell that answered, during the cut, through the home site's access point
		split       = map[string]int{} // the same through the other site's
		homeHost    = map[string]string{"site-a": platform.SiteAHost, platform.SiteB: platform.SiteBHost}
		reports     = map[string]load.Report{}
		errs        = map[string]error{}
		wg          sync.WaitGroup
		partnersFor = map[string][]string{}
	)
	for p, site := range homes {
		partnersFor[site] = append(partnersFor[site], p)
	}
	for _, site := range []string{"site-a", "site-b"} {
		cfg := load.Config{
			Target: load.TargetGTR, DialOptions: gtrOpts, Mode: load.ModeOpen, AccessPoints: aps,
			Client:   client.Config{HomeSite: site, CallTimeout: 12 * time.Second, MaxAttempts: 30},
			Partners: partnersFor[site], Rate: rate, Concurrency: 128, Count: int64(rate * loadFor.Seconds()),
			Duration: loadFor, Seed: uint64(time.Now().UnixNano()), RunID: runID + "-partition-" + site, PerRequestTimeout: 12 * time.Second,
			OnResult: func(r load.Result) {
				a := checker.AnswerOf(r.PartnerID, r.Request.GetTransactionId(), r.Transaction, r.Err)
				mu.Lock()
				defer mu.Unlock()
				answers = append(answers, a)
				end := r.Sent.Add(r.Latency)
				if r.Err != nil || cutFrom.IsZero() || r.Sent.Before(cutFrom) || (!cutTo.IsZero() && end.After(cutTo)) {
					return
				}
				at := siteOf[r.Transaction.GetCellId()]
				if !strings.HasPrefix(r.Endpoint, homeHost[homes[r.PartnerID]]+":") {
					// The client's split (about 1% to the next in line,
					// the other site's access point here, by the
					// guide's rule): served there, by that site's cells
					// while the line is cut.
					split[at]++
					return
				}
				servedAt[at]++
				if at != homes[r.PartnerID] && len(crossed) < 5 {
					crossed = append(crossed, fmt.Sprintf("%s/%s (home %s) by %s through %s (failed over %v, sent %v after the cut, took %v)", r.PartnerID, r.Request.GetTransactionId(),
						homes[r.PartnerID], r.Transaction.GetCellId(), r.Endpoint, r.FailedOver, r.Sent.Sub(cutFrom).Round(time.Millisecond), r.Latency.Round(time.Millisecond)))
				}
			},
		}
		wg.Go(func() {
			rep, err := load.Run(ctx, cfg, nil)
			mu.Lock()
			reports[site], errs[site] = rep, err
			mu.Unlock()
		})
	}
	time.Sleep(cutAt)
	heal := partition(t, platform.SiteAHost, platform.SiteBHost)
	mu.Lock()
	cutFrom = time.Now()
	mu.Unlock()
	t.Logf("partition: the line between %s and %s cut", platform.SiteAHost, platform.SiteBHost)
	// The cut is seen: each access point loses the other site's cells.
	waitCellsDown(t, s, s.cfg.AdminAddr, "cell-c", "cell-d")
	waitCellsDown(t, s, s.cfg.BackupAdminAddr, "cell-a", "cell-b")
	time.Sleep(time.Until(cutFrom.Add(cutFor)))
	heal()
	mu.Lock()
	cutTo = time.Now()
	mu.Unlock()
	t.Logf("partition: healed after %v", cutTo.Sub(cutFrom).Round(time.Second))
	s.bothSitesUp(t, s.cfg.AdminAddr, 30*time.Second)
	s.bothSitesUp(t, s.cfg.BackupAdminAddr, 30*time.Second)
	t.Logf("partition: both access points see all four cells up %v after the heal", time.Since(cutTo).Round(100*time.Millisecond))
	wg.Wait()

	for site, rep := range reports {
		if errs[site] != nil {
			t.Fatalf("%s's partners' load: %v", site, errs[site])
		}
		t.Logf("%s's partners: sent %d, completed %d, statuses %v, errors %v, answers per access point %v, p99 %.1f ms",
			site, rep.Sent, rep.Completed, rep.Statuses, rep.Errors, rep.Endpoints, rep.Latency.P99)
		if len(rep.Errors) > 0 || rep.Statuses["FAILED"] > 0 {
			t.Errorf("%s's partners saw errors %v and %d FAILED", site, rep.Errors, rep.Statuses["FAILED"])
		}
	}
	t.Logf("partition: answered during the cut through the home site's access point by the cells of %v; through the other's (the client's split) by %v", servedAt, split)
	if servedAt["site-a"] == 0 || servedAt["site-b"] == 0 {
		t.Errorf("a site served none of its partners during the cut: %v", servedAt)
	}
	if len(crossed) > 0 {
		t.Errorf("answered during the cut by a cell of another site than the partner's home: %v", crossed)
	}

	checkAll(t, ctx, s, answers)
}

// waitCellsDown waits until the access point at admin counts cells down.
func waitCellsDown(t *testing.T, s twoSites, admin string, cells ...string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("%v down in %s's view", cells, admin), func() bool {
		view := s.cells(t, admin)
		for _, c := range cells {
			if view[c].GetHealth() != adminproto.Health_HEALTH_DOWN {
				return false
			}
		}
		return true
	})
}

// checkAll runs the checker over answers, reading through the site-a
// access point, once every PENDING has its outcome.
func checkAll(t *testing.T, ctx context.Context, s twoSites, answers []checker.Answer) {
	t.Helper()
	opsTLS, err := s.p.ClientTLS(platform.OpsCertName)
	if err != nil {
		t.Fatal(err)
	}
	ccfg := checker.Config{Payments: cellpayv1.NewPaymentsClient(dialPlatformGTR(t, s.p, s.cfg.GTRAddr)),
		Issuer: issuerproto.NewIssuerClient(dial(s.cfg.IssuerAddr, opsTLS))}
	for _, c := range platform.TwoSitesCells {
		ccfg.Cells = append(ccfg.Cells, checker.Cell{ID: c.ID, DatabaseURL: s.p.CellDatabaseURL(c.ID)})
	}
	keys := make([]idempotency.Key, 0, len(answers))
	for _, a := range answers {
		keys = append(keys, a.Key())
	}
	if _, err := checker.WaitResolved(ctx, ccfg, keys, 30*time.Second); err != nil {
		t.Fatalf("PENDING not resolved within 30 s: %v", err)
	}
	report, err := checker.Check(ctx, ccfg, answers)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checker: %s", strings.ReplaceAll(report.String(), "\n", "; "))
	if !report.OK() || report.Pending != 0 {
		t.Fatalf("invariants broken:\n%s", report.String())
	}
}
