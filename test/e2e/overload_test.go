package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/internal/dev/platform"
	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/pkg/adminproto"
	"github.com/cellpay/cellpay/pkg/client"
)

// The overload benchmark (make bench-overload): saturation S measured
// closed loop through the GTR, then 2.5 × S offered open loop for 10 s,
// then 100 tx/s, on extra GTR replicas over the shared cells (admission
// control as shipped, an alternative (by default the former per-window
// rule, -admission-baseline 0), and none), side
// by side in one run. And the
// fairness measurement: one partner offering ten times its limit beside
// another at its normal rate.

func overloadBench(t *testing.T) {
	if os.Getenv("CELLPAY_OVERLOAD_BENCH") != "1" {
		t.Skip("set CELLPAY_OVERLOAD_BENCH=1 (make bench-overload)")
	}
}

// envOr is the environment variable name, or def when it is unset.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// phase is one load phase's outcome, as a partner saw it.
type phase struct {
	offered, seconds float64
	ok               int64
	codes            map[string]int64
	p99              float64 // ms, accepted (answered with a transaction)
	rep              load.Report
	cpu              string // CPU ms/s by process over the phase, when measured (measuredPhase)
}

func (p phase) goodput() float64 { return float64(p.ok) / p.seconds }

func (p phase) share(code string) float64 {
	var n int64
	for _, v := range p.codes {
		n += v
	}
	n += p.ok
	if n == 0 {
		return 0
	}
	return float64(p.codes[code]) / float64(n)
}

func runPhase(t *testing.T, ctx context.Context, addr, id string, mode string, rate float64, conc int, d time.Duration, partners []string, dial []grpc.DialOption) phase {
	t.Helper()
	var mu sync.Mutex
	p := phase{codes: map[string]int64{}, seconds: d.Seconds(), offered: rate}
	cfg := load.Config{Target: load.TargetGTR, Addr: addr, DialOptions: dial, Mode: mode, Rate: rate, Concurrency: conc,
		Count: load.MaxCount, Duration: d, Seed: uint64(time.Now().UnixNano()), RunID: id, Partners: partners, PerRequestTimeout: 5 * time.Second,
		OnResult: func(r load.Result) {
			mu.Lock()
			defer mu.Unlock()
			if r.Err != nil {
				p.codes[status.Code(r.Err).String()]++
				return
			}
			p.ok++
		}}
	if mode == load.ModeClosed {
		cfg.Rate = 0
	}
	rep, err := load.Run(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.rep, p.p99 = rep, rep.Latency.P99
	return p
}

// ejections counts, every 100 ms while running, cells a GTR shows below
// full health share; stop returns the most seen at once.
func watchEjections(ctx context.Context, adm adminproto.AdminClient) (stop func() int) {
	var most atomic.Int64
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			l, err := adm.ListCells(ctx, &adminproto.ListCellsRequest{})
			if err != nil {
				continue
			}
			n := int64(0)
			for _, c := range l.GetCells() {
				if c.GetHealth() != adminproto.Health_HEALTH_UP {
					n++
				}
			}
			if n > most.Load() {
				most.Store(n)
			}
		}
	}()
	return func() int { close(done); return int(most.Load()) }
}

// TestFairnessBenchmark: partner B at its normal rate, alone and then beside
// partner A offering ten times A's limit: B's p99 should not move by more
// than 20%. A is a load tool process of its own, as another partner's
// client is: in the test's process, A's goroutines would share B's
// scheduler and B would measure the load tool, not the GTR. It runs at
// SCHED_IDLE, on the CPU the platform leaves: a partner's client runs on
// the partner's machines, and here its CPU (about 0.6 ms a call, twice the
// GTR's cost of refusing it) would otherwise be charged to the platform.
// What refusing A's excess costs the GTR is charged in full.
func TestFairnessBenchmark(t *testing.T) {
	overloadBench(t)
	ctx := ctxFor(t, 8*time.Minute)
	adm := platformAdmin(t)
	ids := map[string]string{}
	keys := map[string]string{}
	aKeys := t.TempDir() // A's API key, for its load tool
	for _, who := range []string{"a", "b"} {
		id := fmt.Sprintf("p-fair-%s-%s", who, runID)
		r, err := adm.AddPartner(ctx, &adminproto.AddPartnerRequest{PartnerId: id, Limits: &adminproto.PartnerLimits{RatePerSecond: 40, Burst: 40, MaxInFlight: 40}})
		if err != nil {
			t.Fatal(err)
		}
		ids[who], keys[id] = id, r.GetKey().GetApiKey()
		if who == "a" {
			if err := partners.WriteKeyFile(filepath.Join(aKeys, id+".key"), r.GetKey().GetApiKey()); err != nil {
				t.Fatal(err)
			}
		}
	}
	tlsOpt, err := client.TLS(env.p.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	dial := []grpc.DialOption{tlsOpt, grpc.WithChainUnaryInterceptor(client.PartnerKeys(keys))}
	time.Sleep(2 * time.Second) // both replicas of the registry have them
	// A busy host (a suite or benchmark that just ended, its callbacks
	// still being delivered) would be measured instead of A.
	quiet(t, ctx, 0.4, 2*time.Minute)

	const bRate, bFor = 30, 12 * time.Second // 360 calls: B's p99 is not its 2nd-worst call
	bPhase := func(tag string) phase {
		busy, cpu := hostBusy(t), procsCPU(env.p.Processes())
		p := runPhase(t, ctx, env.gtrAddr, runID+"-fair-"+tag, load.ModeOpen, bRate, 256, bFor, []string{ids["b"]}, dial)
		l := p.rep.Latency
		t.Logf("B %s: p50 %.1f, p90 %.1f, p99 %.1f, max %.1f ms; host CPU busy %.0f%%; CPU ms/s by process: %s", tag, l.P50, l.P90, l.P99, l.Max, 100*busy(), cpu())
		return p
	}
	// B beside A offering rate: A starts a second before B and ends a
	// second after.
	beside := func(tag string, rate float64) (b phase, a load.Report) {
		aFor := bFor + 2*time.Second
		cmd := exec.CommandContext(ctx, "chrt", "--idle", "0", filepath.Join(env.bin, "loadgen"), "-target", "gtr", "-addr", env.gtrAddr,
			"-mode", "open", "-rate", fmt.Sprint(rate), "-c", "2048", "-n", fmt.Sprint(int(rate*aFor.Seconds())), "-d", aFor.String(),
			"-json", "-run-id", runID+"-fair-"+tag+"-a", "-ca", env.p.CAFile(), "-keys", aKeys)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		b = bPhase(tag + "-b")
		if err := cmd.Wait(); err != nil {
			t.Fatalf("A's load tool: %v\n%s", err, errOut.String())
		}
		if err := json.Unmarshal(out.Bytes(), &a); err != nil {
			t.Fatalf("A's report: %v\n%s", err, out.String())
		}
		return b, a
	}
	_ = bPhase("warm") // the first calls open connections and prepare statements
	var alone, atLimit, flooded []float64
	for round := range 3 {
		b := bPhase(fmt.Sprintf("alone-%d", round))
		bl, al := beside(fmt.Sprintf("limit-%d", round), 40)
		bf, af := beside(fmt.Sprintf("flood-%d", round), 400)
		alone, atLimit, flooded = append(alone, b.p99), append(atLimit, bl.p99), append(flooded, bf.p99)
		t.Logf("round %d: B alone p99 %.1f ms (%d ok, errors %v); beside A at its limit %.1f ms (%d ok, errors %v; A sent %d, %d ok, %v); beside A's flood %.1f ms (%d ok, errors %v; A sent %d, %d ok, %v)", round,
			b.p99, b.ok, b.codes, bl.p99, bl.ok, bl.codes, al.Sent, al.Completed, al.Errors, bf.p99, bf.ok, bf.codes, af.Sent, af.Completed, af.Errors)
		// The round's figures as BENCH lines, for benchrun (make
		// bench-overload runs this test through it): three samples a run.
		testutil.BenchLine(t, "p99_b_alone", b.p99, "ms")
		testutil.BenchLine(t, "p99_b_beside_limit", bl.p99, "ms")
		testutil.BenchLine(t, "p99_b_beside_flood", bf.p99, "ms")
		testutil.BenchLine(t, "errors_b_beside_flood", float64(countCodes(bf.codes)), "count")
	}
	sort.Float64s(alone)
	sort.Float64s(atLimit)
	sort.Float64s(flooded)
	t.Logf("median B p99: alone %.1f ms, beside A at its limit (40/s) %.1f ms, beside A at 10× its limit %.1f ms (%.2f× alone, %.2f× beside A at its limit)",
		alone[1], atLimit[1], flooded[1], flooded[1]/alone[1], flooded[1]/atLimit[1])
	testutil.BenchLine(t, "p99_b_flood_vs_alone", flooded[1]/alone[1], "ratio")
	testutil.BenchLine(t, "p99_b_flood_vs_limit", flooded[1]/atLimit[1], "ratio")
}

// countCodes is the number of calls a phase's error codes count.
func countCodes(codes map[string]int64) int64 {
	var n int64
	for _, v := range codes {
		n += v
	}
	return n
}

func TestOverloadBenchmark(t *testing.T) {
	overloadBench(t)
	ctx := ctxFor(t, 10*time.Minute)
	dir := t.TempDir()
	tok := "overload-" + runID
	on := newGTR(t, dir, "gtr-adm-on", env.p.Config().GTRConfig, env.p.NATSURL(), tok)
	off := newGTR(t, dir, "gtr-adm-off", env.p.Config().GTRConfig, env.p.NATSURL(), tok)
	off.args = append(off.args, "-no-admission")
	// The alternative, by default the former rule (gtr -admission-baseline
	// 0: the limits' average moves per window of samples, no fair share at
	// the GTR-wide limit); CELLPAY_OVERLOAD_EXP sets its flags, and
	// CELLPAY_OVERLOAD_MODES which replicas run, in which order.
	exp := newGTR(t, dir, "gtr-adm-exp", env.p.Config().GTRConfig, env.p.NATSURL(), tok)
	exp.args = append(exp.args, strings.Fields(envOr("CELLPAY_OVERLOAD_EXP", "-admission-baseline 0"))...)
	byName := map[string]*gtrProc{"on": on, "exp": exp, "off": off}
	var modes []*gtrProc
	for _, m := range strings.Split(envOr("CELLPAY_OVERLOAD_MODES", "on,exp,off"), ",") {
		g, ok := byName[strings.TrimSpace(m)]
		if !ok {
			t.Fatalf("CELLPAY_OVERLOAD_MODES: %q is not one of on, exp, off, or is named twice", m)
		}
		delete(byName, strings.TrimSpace(m))
		g.Start(t)
		modes = append(modes, g)
	}
	for _, g := range modes {
		name := g.ID
		// The mode before (its backlog, the callbacks of its transactions
		// still being delivered) or the fairness test would be measured
		// instead: the first mode after it found S at two thirds of the
		// others' in two runs.
		quiet(t, ctx, 0.4, 2*time.Minute)
		_ = runPhase(t, ctx, g.Addr, runID+"-"+name+"-warm", load.ModeClosed, 0, 32, 3*time.Second, nil, env.gtrOpts)
		sat, knee := saturation(t, ctx, g, runID+"-"+name)
		S := sat.goodput()
		stop := watchEjections(ctx, adminClientFor(t, g.AdminAddr, tok))
		over := measuredPhase(t, ctx, g, runID+"-"+name+"-over", load.ModeOpen, 2.5*S, 8192, 10*time.Second)
		ej := stop()
		t.Logf("%s: ejections and re-routes logged so far: %v", name, ejectionReasons(g.logPath))
		t.Logf("%s: CPU ms/s at S: %s; under the overload: %s", name, sat.cpu, over.cpu)
		t.Logf("%s: the knee (the fewest workers within 5%% of S): %d workers, %.0f tx/s, p99 %.1f ms; p99 accepted under the overload %.2f× that",
			name, knee.rep.Concurrency, knee.goodput(), knee.p99, over.p99/knee.p99)
		// Recovery: 100 tx/s right after.
		after := runPhase(t, ctx, g.Addr, runID+"-"+name+"-after", load.ModeOpen, 100, 512, 5*time.Second, nil, env.gtrOpts)
		t.Logf("%s: S = %.0f tx/s (p99 %.1f ms); at 2.5×S offered: goodput %.0f tx/s (%.2f×S), p99 accepted %.1f ms (%.2f× p99 at S), DEADLINE_EXCEEDED %.1f%%, UNAVAILABLE %.1f%%, RESOURCE_EXHAUSTED %.1f%%, dropped by the load tool %d, cells below full health at once: %d; after: %d ok of %d, errors %v",
			name, S, sat.p99, over.goodput(), over.goodput()/S, over.p99, over.p99/sat.p99,
			100*over.share("DeadlineExceeded"), 100*over.share("Unavailable"), 100*over.share("ResourceExhausted"), over.rep.Dropped, ej,
			after.ok, after.rep.Sent, after.codes)
		// The same figures as BENCH lines, for benchrun (make bench-overload
		// runs this test through it), the mode (on, exp, off) in each name.
		mode := strings.TrimPrefix(name, "gtr-adm-")
		testutil.BenchLine(t, "saturation_"+mode, S, "tx/s")
		testutil.BenchLine(t, "p99_at_saturation_"+mode, sat.p99, "ms")
		testutil.BenchLine(t, "p99_at_knee_"+mode, knee.p99, "ms")
		testutil.BenchLine(t, "goodput_"+mode, over.goodput(), "tx/s")
		testutil.BenchLine(t, "goodput_vs_saturation_"+mode, over.goodput()/S, "ratio")
		testutil.BenchLine(t, "p99_accepted_"+mode, over.p99, "ms")
		testutil.BenchLine(t, "p99_accepted_vs_saturation_"+mode, over.p99/sat.p99, "ratio")
		testutil.BenchLine(t, "timeouts_"+mode, 100*over.share("DeadlineExceeded"), "%")
		testutil.BenchLine(t, "unavailable_"+mode, 100*over.share("Unavailable"), "%")
		testutil.BenchLine(t, "shed_"+mode, 100*over.share("ResourceExhausted"), "%")
		testutil.BenchLine(t, "dropped_"+mode, float64(over.rep.Dropped), "count")
		testutil.BenchLine(t, "cells_below_full_health_"+mode, float64(ej), "count")
		testutil.BenchLine(t, "errors_after_"+mode, float64(countCodes(after.codes)), "count")
	}
}

// measuredPhase is runPhase with the CPU of the GTR replica g, of this
// test process (the load tool) and of the platform's processes measured
// over it, and the host's share busy.
func measuredPhase(t *testing.T, ctx context.Context, g *gtrProc, id string, mode string, rate float64, conc int, d time.Duration) phase {
	t.Helper()
	procs := []namedPid{{g.ID, g.cmd.Process.Pid}, {"load tool", os.Getpid()}}
	for _, p := range env.p.Processes() {
		procs = append(procs, namedPid{p.Name, p.Pid()})
	}
	busy, cpu := hostBusy(t), pidsCPU(procs)
	p := runPhase(t, ctx, g.Addr, id, mode, rate, conc, d, nil, env.gtrOpts)
	p.cpu = fmt.Sprintf("host %.0f%% busy; %s", 100*busy(), cpu())
	return p
}

// saturation is the closed-loop phase of the most goodput through the GTR
// replica g: workers doubled from 32 (up to 1,024) until two doublings in a
// row gain less than 5% over the best phase so far. With group commit the
// cells' throughput grows with concurrency, so a fixed number of workers
// measured their latency, not the platform's saturation (32 workers found
// a third of it); and on a shared 2-core host one phase can come out low
// (312 tx/s at 128 workers, a run whose GTR then served 541 tx/s under
// the overload), so one doubling without a gain does not end the search.
// knee is the phase of the fewest workers within 5% of S: where the
// goodput is flat over several phases, the p99 at S depends on which of
// them S happens to be, and the knee's is the lowest of them.
func saturation(t *testing.T, ctx context.Context, g *gtrProc, id string) (best, knee phase) {
	t.Helper()
	var phases []phase
	flat := 0
	for conc := 32; conc <= 1024 && flat < 2; conc *= 2 {
		p := measuredPhase(t, ctx, g, fmt.Sprintf("%s-sat%d", id, conc), load.ModeClosed, 0, conc, 6*time.Second)
		t.Logf("%s: closed loop, %d workers: %.0f tx/s, p99 %.1f ms, errors %v", id, conc, p.goodput(), p.p99, p.codes)
		phases = append(phases, p)
		switch {
		case best.seconds == 0: // the first phase (an empty one's goodput is NaN)
			best = p
		case p.goodput() < 1.05*best.goodput():
			flat++
		default:
			flat = 0
		}
		if p.goodput() > best.goodput() {
			best = p
		}
	}
	for _, p := range phases {
		if p.goodput() >= 0.95*best.goodput() {
			return best, p
		}
	}
	return best, best
}

// adminClientFor is an Admin API client of a GTR replica (the platform's,
// or one started by newGTR; all serve the platform's GTR certificate) with
// token.
func adminClientFor(t *testing.T, addr, token string) adminproto.AdminClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, env.adminTLS, grpc.WithPerRPCCredentials(bearerToken(token)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return adminproto.NewAdminClient(conn)
}

// procsCPU starts measuring the CPU the platform's processes use (their
// utime+stime from /proc, Postgres servers not among them); the function
// it returns ends the measurement and says it per process, in ms per
// second of wall time.
func procsCPU(procs []*platform.Proc) func() string {
	named := make([]namedPid, len(procs))
	for i, p := range procs {
		named[i] = namedPid{p.Name, p.Pid()}
	}
	return pidsCPU(named)
}

// namedPid is a process to measure, by name.
type namedPid struct {
	name string
	pid  int
}

// pidsCPU is procsCPU for processes by pid; names must be unique.
func pidsCPU(procs []namedPid) func() string {
	read := func() map[string]float64 {
		m := map[string]float64{}
		for _, p := range procs {
			if cpu, ok := cpuTime(p.pid); ok {
				m[p.name] = float64(cpu.Milliseconds())
			}
		}
		return m
	}
	start, c0 := time.Now(), read()
	return func() string {
		secs, c1 := time.Since(start).Seconds(), read()
		var out []string
		for _, p := range procs { // names are unique: a cell's instance n > 1 is <cell>-<n>
			if v, ok := c1[p.name]; ok {
				out = append(out, fmt.Sprintf("%s %.0f", p.name, (v-c0[p.name])/secs))
			}
		}
		return strings.Join(out, ", ")
	}
}

// cpuTime is the CPU time process pid has used (utime+stime, from /proc),
// false if it is gone.
func cpuTime(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	var ut, st int64
	if len(f) > 12 {
		fmt.Sscan(f[11], &ut)
		fmt.Sscan(f[12], &st)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, true // clock ticks (USER_HZ) of 10 ms
}

// hostBusy starts measuring the share of the host's CPU time that is not
// idle (from /proc/stat); the function it returns ends the measurement.
func hostBusy(t *testing.T) func() float64 {
	t.Helper()
	read := func() (busy, total float64) {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			t.Fatal(err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
		for i, v := range f[1:] {
			var n float64
			if _, err := fmt.Sscan(v, &n); err != nil {
				t.Fatalf("/proc/stat: %q: %v", line, err)
			}
			total += n
			if i != 3 && i != 4 { // idle, iowait
				busy += n
			}
		}
		return busy, total
	}
	b0, t0 := read()
	return func() float64 {
		b1, t1 := read()
		if t1 == t0 {
			return 0
		}
		return (b1 - b0) / (t1 - t0)
	}
}

// quiet waits, up to within, until the host's CPU is busy less than
// share of the time over 3 s, and fails the test if it never is.
func quiet(t *testing.T, ctx context.Context, share float64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		busy := hostBusy(t)
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(3 * time.Second):
		}
		b := busy()
		if b < share {
			t.Logf("host CPU busy %.0f%% before measuring", 100*b)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host stayed busy (%.0f%% of its CPU over 3 s, want < %.0f%%) for %v: nothing to measure against", 100*b, 100*share, within)
		}
	}
}

// ejectionReasons counts the GTR log's ejections by reason, and the
// re-routes before them by cell and reason (its first 100 bytes), which
// say what the cell failed with.
func ejectionReasons(logPath string) map[string]int {
	b, _ := os.ReadFile(logPath)
	out := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		ejected, rerouted := strings.Contains(line, "cell ejected"), strings.Contains(line, "re-routing before the point of no return")
		if !ejected && !rerouted {
			continue
		}
		var rec struct{ Reason, Cell string }
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if ejected {
			out[rec.Cell+" ejected: "+rec.Reason]++
		} else {
			out[rec.Cell+" re-routed: "+rec.Reason[:min(len(rec.Reason), 100)]]++
		}
	}
	return out
}
