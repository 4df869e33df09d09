package e2e

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"github.com/cellpay/cellpay/pkg/issuerproto"
)

// The fault tests run sustained open-loop load through the GTR, break
// something real in the middle (kill -9 a cell, stop its Postgres, freeze
// it, make the issuer slow or fail after the point of no return), heal it,
// wait for every PENDING answer to resolve, and check docs/design/README.md's
// invariants with the checker over the GTR, the issuer's effect counters
// and every cell's database. Rates and lengths fit a 2-core CI machine;
// `make soak` runs them longer and harder, and has a share of the approved
// authorizations captured and refunded, or voided, while the fault lasts
// (load.Config.FollowUps), so that the checker holds their amounts too.

// faultLoad is the load of one fault test; `make soak` raises it through
// CELLPAY_SOAK_RATE and CELLPAY_SOAK_SECONDS, and adds follow-ups through
// CELLPAY_SOAK_FOLLOWUPS (a share 0..1 of the approved authorizations;
// none by default, so that make test's fault tests are as before).
var faultLoad = struct {
	rate      float64
	duration  time.Duration
	followUps float64
}{
	rate:      envFloat("CELLPAY_SOAK_RATE", 60),
	duration:  time.Duration(envFloat("CELLPAY_SOAK_SECONDS", 9) * float64(time.Second)),
	followUps: envFloat("CELLPAY_SOAK_FOLLOWUPS", 0),
}

func envFloat(name string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil && v > 0 {
		return v
	}
	return def
}

// fault breaks something at about a third of the run and heals it later.
type fault struct {
	name   string
	break_ func(t *testing.T, ctx context.Context)
	heal   func(t *testing.T, ctx context.Context)
	// hold is how long the fault lasts.
	hold time.Duration
	// load is how long the load runs, if not faultLoad.duration: a fault
	// held longer than a third of it needs more, so that load goes on
	// through the whole fault and after it.
	load time.Duration
	// extra, if set, returns the answers of calls the fault made itself,
	// checked with the load's.
	extra func() []checker.Answer
}

// faultTarget is a platform the fault tests load, break and check: the
// shared one (sharedTarget), or one a test starts for itself.
type faultTarget struct {
	p        *platform.Platform
	gtrAddr  string
	gtrOpts  []grpc.DialOption
	payments cellpayv1.PaymentsClient
	issuer   issuerproto.IssuerClient
	cells    []platform.CellSpec
	// accessPoints, when set, are the partners' access points with their
	// sites (the load's client fails over between them, preferring
	// homeSite's), instead of gtrAddr alone.
	accessPoints []client.AccessPoint
	homeSite     string
}

func sharedTarget() faultTarget {
	return faultTarget{p: env.p, gtrAddr: env.gtrAddr, gtrOpts: env.gtrOpts, payments: env.payments, issuer: env.issuer, cells: env.cells}
}

// runFault runs load with the fault in the middle, then checks the
// invariants. It returns the answers for further checks.
func runFault(t *testing.T, f fault) []checker.Answer {
	t.Helper()
	return runFaultOn(t, sharedTarget(), f)
}

// runFaultOn runs f under load on target and checks the invariants. It
// returns the submits' answers (and f.extra's) for further checks; the
// follow-ups' (faultLoad.followUps) go to the checker with them, which
// holds their amounts to the minor unit, but are not returned: a
// follow-up whose authorization's cell is down is answered UNAVAILABLE,
// never re-routed (the cell holds the authorization), which the checker
// counts as an error answer, not a broken invariant, and which the
// callers' noFailuresShown, a promise about submits, must not judge.
func runFaultOn(t *testing.T, target faultTarget, f fault) []checker.Answer {
	t.Helper()
	ctx := ctxFor(t, 3*time.Minute)
	var mu sync.Mutex
	var answers, followUps []checker.Answer
	duration := cmp.Or(f.load, faultLoad.duration)
	cfg := load.Config{
		// Through the partners' client (pkg/client), as a partner sends:
		// a request the GTR sheds (RESOURCE_EXHAUSTED, sent to no cell) is
		// resent under the same ID after its hint, for as long as the
		// request's budget lasts (MaxAttempts 30: under a loaded host the
		// GTR shed one call five times in a row, the default's bound). Its
		// one call may take the request's whole budget, so only a quick
		// refusal is retried.
		Target: load.TargetGTR, DialOptions: target.gtrOpts, Mode: load.ModeOpen,
		Client: client.Config{CallTimeout: 12 * time.Second, MaxAttempts: 30},
		Rate:   faultLoad.rate, Concurrency: 256, Count: int64(faultLoad.rate * duration.Seconds()),
		Duration: duration, Seed: uint64(time.Now().UnixNano()), RunID: runID + "-" + f.name,
		PerRequestTimeout: 12 * time.Second,
		OnResult: func(r load.Result) {
			a := checker.AnswerOf(r.PartnerID, r.Request.GetTransactionId(), r.Transaction, r.Err)
			mu.Lock()
			answers = append(answers, a)
			mu.Unlock()
		},
		FollowUps: faultLoad.followUps,
		OnFollowUp: func(r load.FollowUpResult) {
			a := checker.AnswerOf(r.PartnerID, r.ID, r.Transaction, r.Err)
			mu.Lock()
			followUps = append(followUps, a)
			mu.Unlock()
		},
	}
	if len(target.accessPoints) > 0 {
		cfg.AccessPoints, cfg.Client.HomeSite = target.accessPoints, target.homeSite
	} else {
		cfg.Endpoints = []string{target.gtrAddr}
	}
	done := make(chan error, 1)
	var rep load.Report
	go func() {
		var err error
		rep, err = load.Run(ctx, cfg, nil)
		done <- err
	}()
	time.Sleep(duration / 3)
	t.Logf("%s: breaking", f.name)
	f.break_(t, ctx)
	time.Sleep(f.hold)
	t.Logf("%s: healing", f.name)
	f.heal(t, ctx)
	healed := time.Now()
	if err := <-done; err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Logf("%s: load: sent %d, completed %d, statuses %v, errors %v, p99 %.1f ms",
		f.name, rep.Sent, rep.Completed, rep.Statuses, rep.Errors, rep.Latency.P99)
	if fu := rep.FollowUps; fu != nil {
		t.Logf("%s: follow-ups (share %g): lives %v, sent %d, answered %d, unsent %d, dropped %d, calls %v",
			f.name, fu.Share, fu.Lives, fu.Sent, fu.Answered, fu.Unsent, fu.Dropped, fu.Calls)
		if fu.Sent == 0 || fu.Sent != int64(len(followUps)) {
			t.Fatalf("follow-ups: %d sent, %d answers: the run asked for a share of %g", fu.Sent, len(followUps), fu.Share)
		}
		logFollowUpErrors(t, f.name, followUps)
	}

	if f.extra != nil {
		answers = append(answers, f.extra()...)
	}
	judged := append(slices.Clip(answers), followUps...)
	ccfg := target.checkerConfig()
	keys := make([]idempotency.Key, 0, len(judged))
	for _, a := range judged {
		keys = append(keys, a.Key())
	}
	took, err := checker.WaitResolved(ctx, ccfg, keys, 30*time.Second)
	if err != nil {
		t.Fatalf("PENDING not resolved within 30 s of healing: %v", err)
	}
	t.Logf("%s: every PENDING resolved %.1f s after healing (waited %.1f s)", f.name, time.Since(healed).Seconds(), took.Seconds())
	report, err := checker.Check(ctx, ccfg, judged)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: checker: %s", f.name, strings.ReplaceAll(report.String(), "\n", "; "))
	// OK holds every amount (AmountMismatches), the follow-ups' included;
	// their error answers are Errors, which it does not judge.
	if !report.OK() || report.Pending != 0 {
		t.Fatalf("invariants broken:\n%s", report.String())
	}
	if report.Attempted < int(cfg.Count)*9/10 {
		t.Fatalf("only %d of %d transactions attempted", report.Attempted, cfg.Count)
	}
	return answers
}

// logFollowUpErrors logs the first few follow-ups answered with an
// error, with the platforms' log lines of their reference: not a failure
// (an UNAVAILABLE is expected of a follow-up whose authorization's cell is
// down), but what a soak's reader needs to tell one from another.
func logFollowUpErrors(t *testing.T, name string, followUps []checker.Answer) {
	t.Helper()
	n := 0
	for _, a := range followUps {
		if !a.Err() {
			continue
		}
		if n++; n <= 5 {
			t.Logf("%s: follow-up %s answered %s: %s%s", name, a.Key(), checker.CodeName(a.Code), a.Message, logsFor(a.Message))
		}
	}
	if n > 5 {
		t.Logf("%s: %d follow-ups answered with an error in all", name, n)
	}
}

func checkerConfig() checker.Config { return sharedTarget().checkerConfig() }

func (target faultTarget) checkerConfig() checker.Config {
	cfg := checker.Config{Payments: target.payments, Issuer: target.issuer}
	for _, c := range target.cells {
		cfg.Cells = append(cfg.Cells, checker.Cell{ID: c.ID, DatabaseURL: target.p.CellDatabaseURL(c.ID)})
	}
	return cfg
}

// noFailuresShown: partners never see a transaction that stopped before
// its point of no return as a failure; the GTR restarts it elsewhere.
// logDirs are the log directories of the platforms the tests started
// for themselves (ownLogs), besides the shared one's.
var logDirs struct {
	sync.Mutex
	dirs []string
}

// ownLogs adds p's logs to those logsFor searches.
func ownLogs(p *platform.Platform) {
	logDirs.Lock()
	defer logDirs.Unlock()
	logDirs.dirs = append(logDirs.dirs, p.LogDir())
}

// logsFor returns the platforms' log lines that carry the reference the
// GTR's generic error message names, so that a failed run says why.
func logsFor(msg string) string {
	_, ref, ok := strings.Cut(msg, "(reference ")
	ref, _, _ = strings.Cut(ref, ")")
	if !ok || ref == "" {
		return ""
	}
	var files []string
	if env.p != nil { // a shard of platforms of its own has no shared one
		files, _ = filepath.Glob(filepath.Join(env.p.LogDir(), "*"))
	}
	logDirs.Lock()
	for _, d := range logDirs.dirs {
		more, _ := filepath.Glob(filepath.Join(d, "*"))
		files = append(files, more...)
	}
	logDirs.Unlock()
	var out strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, ref) {
				fmt.Fprintf(&out, "\n\t%s: %s", filepath.Base(f), line)
			}
		}
	}
	return out.String()
}

func noFailuresShown(t *testing.T, answers []checker.Answer, allowed ...string) {
	t.Helper()
	ok := map[string]bool{}
	for _, r := range allowed {
		ok[r] = true
	}
	bad := 0
	for _, a := range answers {
		switch {
		case a.Err():
			bad++
			if bad <= 5 {
				t.Errorf("partner saw an error for %s: %v: %s%s", a.Key(), a.Code, a.Message, logsFor(a.Message))
			}
		case a.Status == cellpayv1.TransactionStatus_FAILED && !ok[a.DeclineReason]:
			bad++
			if bad <= 5 {
				t.Errorf("partner saw FAILED (%s) for %s", a.DeclineReason, a.Key())
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d answers showed a failure", bad, len(answers))
	}
}

func restartCell(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	if err := env.p.Process(id).Restart(ctx); err != nil {
		t.Fatalf("restart %s: %v", id, err)
	}
	waitCellUp(t, id, "restarted")
}

// waitCellDown waits, with a bound, until the cell no longer answers its
// gRPC health check as SERVING: the fault has taken effect, and its hold
// starts from there rather than from the moment the signal was sent.
func waitCellDown(t *testing.T, id, why string) {
	t.Helper()
	testutil.Eventually(t, 15*time.Second, id+" not serving after it was "+why, func() bool {
		return !serving(id, 300*time.Millisecond)
	})
}

// waitCellUp waits, with a bound, until the cell answers SERVING again.
func waitCellUp(t *testing.T, id, why string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, id+" serving again after it was "+why, func() bool {
		return serving(id, time.Second)
	})
}

// serving checks the platform's component id (a cell) as the launcher
// does: over mutual TLS as the tools' identity.
func serving(id string, d time.Duration) bool { return sharedTarget().serving(id, d) }

// serving checks target's component id as the launcher does.
func (target faultTarget) serving(id string, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return target.p.Process(id).CheckHealth(ctx) == nil
}

func cellAddr(t *testing.T, id string) string {
	t.Helper()
	for _, c := range env.cells {
		if c.ID == id {
			return c.Addr
		}
	}
	t.Fatalf("no cell %s in the platform", id)
	return ""
}

func TestFaultKillCell(t *testing.T) {
	answers := runFault(t, fault{
		name: "kill",
		break_: func(t *testing.T, _ context.Context) {
			if err := env.p.Process("cell-b").Kill(); err != nil {
				t.Fatal(err)
			}
			waitCellDown(t, "cell-b", "killed")
		},
		hold: 3 * time.Second,
		heal: func(t *testing.T, ctx context.Context) { restartCell(t, ctx, "cell-b") },
	})
	noFailuresShown(t, answers)
}

// TestFaultKillCellMidBatch: kill -9 of a cell while its group commit
// has batches in flight, and those batches then commit with nobody left
// to hear it. The issuer is made slow (300 ms), so that many of cell-b's
// transactions are past their point of no return at once; then cell-b's
// synchronous standby is frozen (SIGSTOP), so every commit on its primary
// waits for the standby's flush. Once the primary shows both group
// committers' commits waiting (pg_stat_activity's wait_event SyncRep:
// the batch sent, its commit record written, its writers not yet told)
// and the transactions at the issuer have come back to queue their final
// states behind them, the cell is killed and the standby thawed. The
// waiting batches commit on a server whose client is gone (sending
// records whose Proceed never went out, final states whose answer was
// never sent); the writes still queued in the dead process are lost
// before they were durable (transactions left in sending, after their
// PNR). The GTR restarts on other cells the attempts it had no Proceed
// for and answers PENDING those past it; the restarted cell's reconciler
// resolves what it finds. The checker finds nothing lost, nothing applied
// twice and every PENDING resolved; no partner sees a failure.
func TestFaultKillCellMidBatch(t *testing.T) {
	const cell = "cell-b"
	// An earlier fault may have left the pair degraded (no synchronous
	// standby, so no commit would wait): wait for it to stream again.
	testutil.Eventually(t, 90*time.Second, cell+"'s synchronous standby streaming", func() bool {
		sb := env.p.Standby(cell)
		return sb != nil && sb.Running() && !env.p.Degraded(cell)
	})
	sb := env.p.Standby(cell)
	var waiting int
	answers := runFault(t, fault{
		name: "killbatch",
		break_: func(t *testing.T, ctx context.Context) {
			db := cellDB(t, ctx, cell)
			setIssuerFaults(t, ctx, &issuerproto.Faults{LatencyMs: 300})
			defer setIssuerFaults(t, context.Background(), &issuerproto.Faults{})
			time.Sleep(500 * time.Millisecond) // transactions pile up at the issuer
			if err := sb.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			thawed := false
			thaw := func() {
				if !thawed {
					thawed = true
					if err := sb.Signal(syscall.SIGCONT); err != nil {
						t.Errorf("thaw %s's standby: %v", cell, err)
					}
				}
			}
			defer thaw() // also when a wait below fails the test
			testutil.Eventually(t, 5*time.Second, cell+"'s group commits waiting for its frozen standby", func() bool {
				err := db.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND datname = current_database()").Scan(&waiting)
				return err == nil && waiting >= 2
			})
			// The transactions at the issuer come back and queue their
			// final states behind the waiting batches.
			time.Sleep(400 * time.Millisecond)
			if err := env.p.Process(cell).Kill(); err != nil {
				t.Fatal(err)
			}
			thaw()
			t.Logf("killbatch: %s killed with %d commits waiting for its standby, then the standby thawed", cell, waiting)
			waitCellDown(t, cell, "killed mid-batch")
		},
		hold: 3 * time.Second,
		heal: func(t *testing.T, ctx context.Context) { restartCell(t, ctx, cell) },
	})
	noFailuresShown(t, answers)
	pending := countPending(answers)
	// Transactions at the issuer when the cell died were past their PNR:
	// answered PENDING, never restarted. None means the kill missed them.
	if pending == 0 {
		t.Fatal("no transaction was answered PENDING: the kill caught none past its point of no return")
	}
	t.Logf("killbatch: %d answers PENDING, all resolved", pending)
}

func TestFaultStopCellPostgres(t *testing.T) {
	answers := runFault(t, fault{
		name: "pgstop",
		break_: func(t *testing.T, _ context.Context) {
			if err := env.p.Postgres("cell-c").Stop(); err != nil {
				t.Fatal(err)
			}
			waitCellDown(t, "cell-c", "its Postgres stopped")
		},
		hold: 3 * time.Second,
		heal: func(t *testing.T, ctx context.Context) {
			if err := env.p.Postgres("cell-c").Restart(ctx); err != nil {
				t.Fatal(err)
			}
			waitCellUp(t, "cell-c", "its Postgres restarted")
		},
	})
	noFailuresShown(t, answers)
}

func TestFaultFreezeCell(t *testing.T) {
	answers := runFault(t, fault{
		name: "freeze",
		break_: func(t *testing.T, _ context.Context) {
			if err := env.p.Process("cell-a").Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 10*time.Second, "cell-a stopped after SIGSTOP", func() bool {
				return testutil.Stopped(env.p.Process("cell-a").Pid())
			})
			waitCellDown(t, "cell-a", "frozen")
		},
		hold: 3 * time.Second,
		heal: func(t *testing.T, _ context.Context) {
			if err := env.p.Process("cell-a").Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			waitCellUp(t, "cell-a", "thawed")
		},
	})
	noFailuresShown(t, answers)
}

// TestFaultIssuerAfterPNR: the issuer fails half the calls after applying
// them, then is slower than the cells' issuer timeout. Transactions past
// their point of no return are answered PENDING, never resent, and resolved
// by inquiry once the issuer heals.
func TestFaultIssuerAfterPNR(t *testing.T) {
	answers := runFault(t, fault{
		name: "issuer",
		break_: func(t *testing.T, ctx context.Context) {
			setIssuerFaults(t, ctx, &issuerproto.Faults{ErrorRate: 0.5, AfterEffect: true})
			go func() {
				time.Sleep(1500 * time.Millisecond)
				setIssuerFaults(t, context.Background(), &issuerproto.Faults{LatencyMs: 6000})
			}()
		},
		hold: 3 * time.Second,
		heal: func(t *testing.T, ctx context.Context) { setIssuerFaults(t, ctx, &issuerproto.Faults{}) },
	})
	pending := countPending(answers)
	if pending == 0 {
		t.Fatal("no transaction was answered PENDING: the fault did not bite")
	}
	// The only failures partners may see are transactions the issuer never
	// received (its calls timed out before the effect): resolved FAILED by
	// inquiry, after their point of no return.
	noFailuresShown(t, answers, "issuer_not_reached")
	t.Logf("issuer: %d answers PENDING, all resolved", pending)
}

// setIssuerFaults sets the issuer simulator's faults, within 10 s of ctx.
// It reports a failure with t.Errorf, so a goroutine of the test may call it.
func setIssuerFaults(t *testing.T, ctx context.Context, f *issuerproto.Faults) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := env.issuer.SetFaults(ctx, f); err != nil {
		t.Errorf("issuer faults %v: %v", f, err)
	}
}

// countPending counts the answers that were PENDING.
func countPending(answers []checker.Answer) int {
	n := 0
	for _, a := range answers {
		if a.Status == cellpayv1.TransactionStatus_PENDING {
			n++
		}
	}
	return n
}
