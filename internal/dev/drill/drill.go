// Package drill runs the partner's half of a disaster recovery drill, as
// the WeChat Pay cross-city guide describes it: under load from the
// partners' client, cut one path (an access point or a cell), wait,
// restore it, then cut the next, and report when the client switched and
// switched back, what the partner saw, and the checker's verdict.
//
// The cutting is the caller's (a Target's Cut and Restore: a kill and
// restart, a freeze and thaw); the drill only sequences, times and
// reports. It sends load only to loopback (package load refuses anything
// else), and every wait is bounded by the durations of its Config.
package drill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cellpay/cellpay/internal/dev/checker"
	"github.com/cellpay/cellpay/internal/dev/load"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/client"
	"github.com/cellpay/cellpay/pkg/idempotency"
	"google.golang.org/grpc/status"
)

// Target is one path the drill cuts.
type Target struct {
	// Name says what is cut ("primary access point", "cell-b").
	Name string
	// Endpoint is the access point's address when the target is one, so
	// that the report can find the switches away from it and back.
	Endpoint string
	// Cut breaks the path and returns once it is broken; Restore heals
	// it and returns once it serves again. Both bounded by ctx.
	Cut, Restore func(ctx context.Context) error
}

// Config describes a drill.
type Config struct {
	// Load is the partners' traffic: Endpoints (or AccessPoints, with
	// their sites) must name the primary and
	// the backup. Duration and Count are set by the drill (Warmup, then
	// each target's Hold and Settle, then Settle); OnResult is chained.
	Load load.Config
	// Targets are cut one after the other.
	Targets []Target
	// Warmup runs load before the first cut [3s]; Hold is how long each
	// cut lasts [12s]; Settle runs after each restore [8s].
	Warmup, Hold, Settle time.Duration
	// Checker, if set, checks the run's invariants once every PENDING
	// answer has resolved (within ResolveWait [30s]).
	Checker     *checker.Config
	ResolveWait time.Duration
	// Log, if set, receives a line as each step happens.
	Log io.Writer
}

// Step is what happened around one target.
type Step struct {
	Target           string    `json:"target"`
	CutAt            time.Time `json:"cut_at"`
	RestoredAt       time.Time `json:"restored_at"`
	CutTook          float64   `json:"cut_took_s"`
	RestoreTook      float64   `json:"restore_took_s"`
	SwitchAwayAfter  float64   `json:"switch_away_after_s,omitempty"` // from the cut to the switch away from the target (-1: none)
	SwitchBackAfter  float64   `json:"switch_back_after_s,omitempty"` // from the restore to the switch back to it (-1: none)
	FirstOtherAfter  float64   `json:"first_other_after_s,omitempty"` // from the cut to the first call the other access point served
	FailedOverDuring int       `json:"failed_over_during"`            // calls during the cut that waited for the retry
	ErrorsDuring     int       `json:"errors_during"`                 // partner-visible errors among calls sent during the cut
	AnsweredByTarget int       `json:"answered_by_target_during"`     // calls the cut access point still answered
	// DisturbedUntil is the RTO a partner sees: from the cut to the end
	// of the last call sent during it that the cut disturbed (one that
	// waited for the retry on another access point, or failed); 0 when
	// none was. LongestDuring is the longest a call sent during the cut
	// took, its waits and retries included.
	DisturbedUntil     float64        `json:"disturbed_until_s"`
	LongestDuring      float64        `json:"longest_during_s"`
	SwitchesDuringStep []client.Event `json:"switches"`
}

// Report is a drill's outcome.
type Report struct {
	Start time.Time `json:"start"`
	// End is when the checker had finished (or the load, without it).
	End   time.Time   `json:"end"`
	Steps []Step      `json:"steps"`
	Load  load.Report `json:"load"`
	// Errors counts the partner's errors by gRPC code, Failed the answers
	// FAILED; both are what "business loss" means to a partner.
	Errors  map[string]int  `json:"errors"`
	Failed  int             `json:"failed"`
	Checker *checker.Report `json:"checker,omitempty"`
	// Results are every call, in the order they finished.
	Results []load.Result `json:"-"`
}

// OK reports whether the partner saw no error and no failure, and the
// checker (if it ran) found nothing.
func (r Report) OK() bool {
	n := 0
	for _, v := range r.Errors {
		n += v
	}
	return n == 0 && r.Failed == 0 && (r.Checker == nil || (r.Checker.OK() && r.Checker.Pending == 0))
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Warmup, 3*time.Second)
	def(&c.Hold, 12*time.Second)
	def(&c.Settle, 8*time.Second)
	def(&c.ResolveWait, 30*time.Second)
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// Run runs the drill. It returns an error when the drill could not be run
// (load refused, a cut or restore failed); a drill the platform failed is
// a Report that is not OK.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg.defaults()
	endpoints := cfg.Load.Endpoints
	if len(endpoints) == 0 {
		for _, ap := range cfg.Load.AccessPoints {
			endpoints = append(endpoints, ap.Addr)
		}
	}
	if len(endpoints) != 2 {
		return Report{}, errors.New("drill: Load.Endpoints (or AccessPoints, with their sites) must name the primary and the backup")
	}
	total := cfg.Warmup + time.Duration(len(cfg.Targets))*(cfg.Hold+cfg.Settle) + cfg.Settle
	lc := cfg.Load
	lc.Duration = total
	if lc.Mode == load.ModeOpen {
		lc.Count = int64(lc.Rate*total.Seconds()) + 1
	} else if lc.Count == 0 {
		lc.Count = load.MaxCount
	}
	var mu sync.Mutex
	var results []load.Result
	next := lc.OnResult
	lc.OnResult = func(r load.Result) {
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
		if next != nil {
			next(r)
		}
	}
	rep := Report{Start: time.Now(), Errors: map[string]int{}}
	logf := func(format string, args ...any) {
		fmt.Fprintf(cfg.Log, "%6.1fs  %s\n", time.Since(rep.Start).Seconds(), fmt.Sprintf(format, args...))
	}
	type loadDone struct {
		rep load.Report
		err error
	}
	done := make(chan loadDone, 1)
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	go func() {
		r, err := load.Run(loadCtx, lc, nil)
		done <- loadDone{r, err}
	}()
	logf("load: %s %s loop through %s", lc.Target, lc.Mode, strings.Join(endpoints, ", "))

	stepErr := func() error {
		if err := sleep(ctx, cfg.Warmup); err != nil {
			return err
		}
		for _, t := range cfg.Targets {
			var s Step
			s.Target = t.Name
			begin := time.Now()
			logf("cut %s", t.Name)
			if err := t.Cut(ctx); err != nil {
				return fmt.Errorf("drill: cut %s: %w", t.Name, err)
			}
			s.CutAt, s.CutTook = begin, time.Since(begin).Seconds()
			if err := sleep(ctx, cfg.Hold-time.Since(begin)); err != nil {
				return err
			}
			logf("restore %s", t.Name)
			begin = time.Now()
			if err := t.Restore(ctx); err != nil {
				return fmt.Errorf("drill: restore %s: %w", t.Name, err)
			}
			s.RestoredAt, s.RestoreTook = begin, time.Since(begin).Seconds()
			logf("%s serves again (%.1fs)", t.Name, s.RestoreTook)
			rep.Steps = append(rep.Steps, s)
			if err := sleep(ctx, cfg.Settle-time.Since(begin)); err != nil {
				return err
			}
		}
		return nil
	}()
	if stepErr != nil {
		stopLoad()
	}
	ld := <-done
	if stepErr != nil {
		return rep, stepErr
	}
	if ld.err != nil {
		return rep, fmt.Errorf("drill: load: %w", ld.err)
	}
	rep.Load = ld.rep
	rep.Results = results
	for i := range rep.Steps {
		end := time.Now()
		if i+1 < len(rep.Steps) {
			end = rep.Steps[i+1].CutAt
		}
		analyse(&rep.Steps[i], cfg.Targets[i], endpoints, results, rep.Load.Switches, end)
		s := rep.Steps[i]
		logf("%s: switch away %s, back %s; first call on the other access point %.3fs after the cut; %d calls failed over, %d errors",
			s.Target, secs(s.SwitchAwayAfter), secs(s.SwitchBackAfter), s.FirstOtherAfter, s.FailedOverDuring, s.ErrorsDuring)
	}
	answers := make([]checker.Answer, 0, len(results))
	for _, r := range results {
		a := checker.AnswerOf(r.PartnerID, r.Request.GetTransactionId(), r.Transaction, r.Err)
		answers = append(answers, a)
		switch {
		case a.Err():
			rep.Errors[checker.CodeName(a.Code)]++
		case a.Status == cellpayv1.TransactionStatus_FAILED:
			rep.Failed++
		}
	}
	if cfg.Checker != nil {
		keys := make([]idempotency.Key, len(answers))
		for i, a := range answers {
			keys[i] = a.Key()
		}
		if _, err := checker.WaitResolved(ctx, *cfg.Checker, keys, cfg.ResolveWait); err != nil && !errors.Is(err, checker.ErrNotResolved) {
			return rep, fmt.Errorf("drill: checker: %w", err)
		}
		cr, err := checker.Check(ctx, *cfg.Checker, answers)
		if err != nil {
			return rep, fmt.Errorf("drill: checker: %w", err)
		}
		rep.Checker = &cr
	}
	rep.End = time.Now()
	return rep, nil
}

// analyse fills in a step's numbers from the calls and switches between
// its cut and end.
func analyse(s *Step, t Target, endpoints []string, results []load.Result, switches []client.Event, end time.Time) {
	s.SwitchAwayAfter, s.SwitchBackAfter, s.FirstOtherAfter = -1, -1, -1
	for _, e := range switches {
		if e.At.Before(s.CutAt) || !e.At.Before(end) {
			continue
		}
		s.SwitchesDuringStep = append(s.SwitchesDuringStep, e)
		if t.Endpoint != "" && e.From == t.Endpoint && s.SwitchAwayAfter < 0 {
			s.SwitchAwayAfter = e.At.Sub(s.CutAt).Seconds()
		}
		if t.Endpoint != "" && e.To == t.Endpoint && !e.At.Before(s.RestoredAt) && s.SwitchBackAfter < 0 {
			s.SwitchBackAfter = e.At.Sub(s.RestoredAt).Seconds()
		}
	}
	other := ""
	if i := slices.Index(endpoints, t.Endpoint); i >= 0 {
		other = endpoints[1-i]
	}
	for _, r := range results {
		if r.Sent.Before(s.CutAt) || !r.Sent.Before(s.RestoredAt) {
			continue
		}
		if r.FailedOver {
			s.FailedOverDuring++
		}
		s.LongestDuring = max(s.LongestDuring, r.Latency.Seconds())
		if r.FailedOver || r.Err != nil || r.Transaction.GetStatus() == cellpayv1.TransactionStatus_FAILED {
			s.DisturbedUntil = max(s.DisturbedUntil, r.Sent.Add(r.Latency).Sub(s.CutAt).Seconds())
		}
		if r.Err != nil || r.Transaction.GetStatus() == cellpayv1.TransactionStatus_FAILED {
			s.ErrorsDuring++
		}
		if r.Err == nil && r.Endpoint == t.Endpoint && t.Endpoint != "" {
			s.AnsweredByTarget++
		}
		if r.Err == nil && other != "" && r.Endpoint == other {
			if d := r.Sent.Add(r.Latency).Sub(s.CutAt).Seconds(); s.FirstOtherAfter < 0 || d < s.FirstOtherAfter {
				s.FirstOtherAfter = d
			}
		}
	}
}

func secs(v float64) string {
	if v < 0 {
		return "none"
	}
	return fmt.Sprintf("after %.2fs", v)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Print writes the report for a person.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "\ndrill report (started %s)\n", r.Start.Format(time.RFC3339))
	for _, s := range r.Steps {
		fmt.Fprintf(w, "\n  cut %s at +%.1fs (took %.2fs), restored at +%.1fs (took %.2fs)\n", s.Target,
			s.CutAt.Sub(r.Start).Seconds(), s.CutTook, s.RestoredAt.Sub(r.Start).Seconds(), s.RestoreTook)
		fmt.Fprintf(w, "    switch away: %s   switch back: %s (after the restore)\n", secs(s.SwitchAwayAfter), secs(s.SwitchBackAfter))
		if s.FirstOtherAfter >= 0 {
			fmt.Fprintf(w, "    first call served by the other access point %.3fs after the cut\n", s.FirstOtherAfter)
		}
		fmt.Fprintf(w, "    during the cut: %d calls waited for the retry on the other access point, %d errors seen by the partner\n", s.FailedOverDuring, s.ErrorsDuring)
		fmt.Fprintf(w, "    RTO: the last call the cut disturbed ended %.2fs after it; the longest call sent during it took %.2fs\n", s.DisturbedUntil, s.LongestDuring)
		for _, e := range s.SwitchesDuringStep {
			fmt.Fprintf(w, "    +%.2fs  %s -> %s  (%s)\n", e.At.Sub(r.Start).Seconds(), e.From, e.To, e.Reason)
		}
	}
	l := r.Load
	fmt.Fprintf(w, "\n  load: sent %d, completed %d, dropped %d, statuses %v, p99 %.1f ms\n", l.Sent, l.Completed, l.Dropped, l.Statuses, l.Latency.P99)
	fmt.Fprintf(w, "  answers per access point: %v; failed over: %d\n", l.Endpoints, l.FailedOver)
	fmt.Fprintf(w, "  errors seen by the partner: %v, FAILED answers: %d\n", r.Errors, r.Failed)
	r.printFailures(w, 5)
	if r.Checker != nil {
		fmt.Fprintf(w, "  RPO: %d answers lost, %d issuer effects without a record (the checker's)\n", r.Checker.Lost, r.Checker.EffectsWithoutRecord)
		fmt.Fprintf(w, "  checker: %s\n", strings.ReplaceAll(r.Checker.String(), "\n", "; "))
	}
	verdict := "PASS: no business loss"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "  verdict: %s\n", verdict)
}

// printFailures writes up to n of the calls the partner saw fail: which,
// when, how long it took and where it ended.
func (r Report) printFailures(w io.Writer, n int) {
	for _, res := range r.Results {
		if n == 0 {
			return
		}
		if res.Err == nil && res.Transaction.GetStatus() != cellpayv1.TransactionStatus_FAILED {
			continue
		}
		n--
		what := "FAILED " + res.Transaction.GetDeclineReason()
		if res.Err != nil {
			what = status.Code(res.Err).String()
		}
		fmt.Fprintf(w, "    %s/%s: %s, sent at +%.1fs, after %.2fs, last at %s\n", res.PartnerID, res.Request.GetTransactionId(), what,
			res.Sent.Sub(r.Start).Seconds(), res.Latency.Seconds(), cmp.Or(res.Endpoint, "?"))
	}
}
