package checker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
	"github.com/cellpay/cellpay/pkg/idempotency"
)

// Check reads back every transaction (partner and ID) in answers and
// reports what it finds. It returns an error only when a source cannot be
// read at all (a cell's database, the issuer, a cancelled ctx); a
// GetTransaction that keeps failing for one transaction is counted as
// Unverified instead.
func Check(ctx context.Context, cfg Config, answers []Answer) (Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	_, keys := group(answers)
	cl, err := dial(cfg)
	if err != nil {
		return Report{}, err
	}
	defer cl.close()

	looks, err := getAll(ctx, cl.payments, keys, cfg.Concurrency, cfg.CallTimeout)
	if err != nil {
		return Report{}, err
	}
	recs, err := readCells(ctx, cfg.Cells, keys)
	if err != nil {
		return Report{}, err
	}
	effs, err := readEffects(ctx, cl.issuer, keys, cfg.EffectsBatch, cfg.CallTimeout)
	if err != nil {
		return Report{}, err
	}
	observed := make(map[idempotency.Key]Observed, len(keys))
	for _, k := range keys {
		l, e := looks[k], effs[k]
		observed[k] = Observed{Read: l.txn, ReadCode: l.code, ReadErr: l.err, Records: recs[k], Effects: e.effects, Requests: e.requests,
			Amounts: true, IssuerApproved: e.approved, IssuerAmount: e.amount, IssuerCurrency: e.currency}
	}
	return Judge(answers, observed, cfg.PrePNRFailures, cfg.Examples), nil
}

// Observed is what was read back of one transaction: the platform's
// answer to a read of it (GetTransaction: Read, or ReadCode and ReadErr),
// every cell's record of it, and the issuer's counters.
type Observed struct {
	Read     *cellpayv1.Transaction
	ReadCode codes.Code
	ReadErr  error
	Records  []CellRecord
	// Effects and Requests are the issuer's counters for it.
	Effects, Requests int32
	// Amounts says IssuerApproved and IssuerAmount were read: the
	// issuer's applied outcome (approved or not) and its amount, which a
	// follow-up's approved record, and an approved answer, must equal.
	// IssuerCurrency is the amount's currency; empty, it is not compared.
	Amounts        bool
	IssuerApproved bool
	IssuerAmount   int64
	IssuerCurrency string
}

// Judge classifies the answers partners got against what was observed of
// each transaction, with no I/O: Check's rules, for a caller that gathers
// the observations itself (the simulator, internal/dev/model, over its
// own cells and issuer). prePNRFailures and examples are Config's
// PrePNRFailures and Examples.
func Judge(answers []Answer, observed map[idempotency.Key]Observed, prePNRFailures []string, examples int) Report {
	byKey, keys := group(answers)
	c := classifier{limit: examples, prePNR: make(map[string]bool)}
	for _, reason := range prePNRFailures {
		c.prePNR[reason] = true
	}
	c.r.Answers = len(answers)
	c.r.Errors = make(map[string]int)
	for _, k := range keys {
		o := observed[k]
		eff := effect{effects: o.Effects, requests: o.Requests, amounts: o.Amounts, approved: o.IssuerApproved, amount: o.IssuerAmount, currency: o.IssuerCurrency}
		c.add(k, byKey[k], lookup{txn: o.Read, code: o.ReadCode, err: o.ReadErr}, o.Records, eff)
		c.amounts(k, byKey[k], o.Records, eff)
	}
	return c.r
}

// group returns the answers by transaction and the transactions in
// first-seen order.
func group(answers []Answer) (map[idempotency.Key][]Answer, []idempotency.Key) {
	byKey := make(map[idempotency.Key][]Answer, len(answers))
	var keys []idempotency.Key
	for _, a := range answers {
		k := a.Key()
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], a)
	}
	return byKey, keys
}

type classifier struct {
	r      Report
	limit  int
	prePNR map[string]bool
}

// add classifies one transaction. See the Report fields for the rules.
func (c *classifier) add(id idempotency.Key, answers []Answer, l lookup, recs []CellRecord, eff effect) {
	r := &c.r
	r.Attempted++
	r.IssuerEffects += int64(eff.effects)
	r.IssuerRequests += int64(eff.requests)
	answered := false // the partner got at least one non-error answer
	for _, a := range answers {
		if a.Err() {
			r.Errors[CodeName(a.Code)]++
		} else {
			answered = true
		}
	}
	if eff.effects > 1 {
		r.DuplicatedEffects++
		c.example(ProblemDuplicatedEffects, id, "%d issuer effects (%d requests); records: %s", eff.effects, eff.requests, describe(recs))
	}
	if past := c.pastPNR(recs); len(past) > 1 {
		r.ReroutesAfterPNR++
		c.example(ProblemReroutesAfterPNR, id, "past the PNR in %d cells: %s", len(past), describe(past))
	}

	switch l.code {
	case codes.OK:
		c.found(id, answers, answered, l.txn, recs, eff)
	case codes.NotFound:
		reached := eff.requests > 0 || eff.effects > 0
		switch {
		case !answered && eff.effects > 0:
			r.EffectsWithoutRecord++
			c.example(ProblemEffectsWithoutRecord, id, "partner got %s, issuer applied it %d time(s), GetTransaction NOT_FOUND; records: %s",
				errorCodes(answers), eff.effects, describe(recs))
			fallthrough
		case answered || reached:
			r.Lost++
			c.example(ProblemLost, id, "answered %s, issuer requests %d, GetTransaction NOT_FOUND; records: %s",
				describeAnswers(answers), eff.requests, describe(recs))
		default:
			r.NotStarted++
		}
	default:
		r.Unverified++
		c.example(ProblemUnverified, id, "GetTransaction: %v", l.err)
	}
}

// found classifies a transaction that GetTransaction returned.
func (c *classifier) found(id idempotency.Key, answers []Answer, answered bool, txn *cellpayv1.Transaction, recs []CellRecord, eff effect) {
	r := &c.r
	final := txn.GetStatus()
	switch final {
	case cellpayv1.TransactionStatus_APPROVED:
		r.Approved++
	case cellpayv1.TransactionStatus_DECLINED:
		r.Declined++
	case cellpayv1.TransactionStatus_FAILED:
		r.Failed++
	default:
		r.Pending++
		c.example(ProblemPending, id, "GetTransaction %s from %s; records: %s", final, txn.GetCellId(), describe(recs))
		if !answered && eff.effects > 0 {
			r.EffectsWithoutRecord++
			r.Lost++
			c.example(ProblemEffectsWithoutRecord, id, "partner got %s, issuer applied it, record still %s", errorCodes(answers), final)
			c.example(ProblemLost, id, "partner got %s, issuer applied it, record still %s", errorCodes(answers), final)
		}
	}
	resolved, differs := false, false
	for _, a := range answers {
		switch {
		case a.Err():
		case a.Status == cellpayv1.TransactionStatus_PENDING:
			resolved = resolved || final != cellpayv1.TransactionStatus_PENDING
		case a.Status != final || a.AuthCode != txn.GetAuthCode() || a.DeclineReason != txn.GetDeclineReason():
			if !differs {
				c.example(ProblemDifferingAnswers, id, "answered %s, record %s (cell %s)",
					describeAnswer(a), describeTxn(txn), txn.GetCellId())
			}
			differs = true
		}
	}
	if resolved {
		r.PendingResolved++
	}
	if differs {
		r.DifferingAnswers++
	}
}

// amounts checks the money of one transaction, and counts it once
// however many of its amounts are wrong: what its partner was answered
// (answeredAmounts), then its final records (recordAmounts).
func (c *classifier) amounts(id idempotency.Key, answers []Answer, recs []CellRecord, eff effect) {
	problem := answeredAmounts(answers, recs, eff)
	if problem == "" {
		problem = recordAmounts(recs, eff)
	}
	if problem != "" {
		c.r.AmountMismatches++
		c.example(ProblemAmounts, id, "%s", problem)
	}
}

// answeredAmounts compares, to the minor unit, the amounts a partner was
// answered with what was recorded and applied. An approved or declined
// answer's amount and currency are those of every record of the
// transaction in the same state (the cell that decided it); an approved
// answer's are the issuer's approved effect's, for every payment type (an
// authorization's amount, a capture's or refund's adjustment, a void's:
// the whole authorization). An authorization's answered sums can only be
// behind its record's, never ahead: captures and refunds only add up, and
// a void is final. It returns the first problem, or "".
func answeredAmounts(answers []Answer, recs []CellRecord, eff effect) string {
	for _, a := range answers {
		var state string
		switch {
		case a.Err() || !a.Amounts:
			continue
		case a.Status == cellpayv1.TransactionStatus_APPROVED:
			state = "approved"
		case a.Status == cellpayv1.TransactionStatus_DECLINED:
			state = "declined"
		default:
			continue // PENDING and FAILED answers may be the GTR's, not a record's
		}
		answered := money(a.Amount, a.Currency)
		for _, rec := range recs {
			if rec.State != state {
				continue
			}
			if rec.Amount != a.Amount || rec.Currency != "" && rec.Currency != a.Currency {
				return fmt.Sprintf("answered %s %s, recorded %s in %s", a.Status, answered, money(rec.Amount, rec.Currency), rec.Cell)
			}
			if rec.PaymentType != cellpayv1.PaymentType_CARD_AUTHORIZATION || state != "approved" {
				continue
			}
			l := rec.Ledger
			if a.Captured > l.Captured || a.Refunded > l.Refunded || a.Voided && !l.Voided {
				return fmt.Sprintf("authorization answered with captured %d, refunded %d, voided %v; its ledger in %s is ahead of none of it: %+v",
					a.Captured, a.Refunded, a.Voided, rec.Cell, l)
			}
		}
		if a.Captured > a.Amount || a.Refunded > a.Captured {
			return fmt.Sprintf("answered %s with captured %d and refunded %d: over its limits", answered, a.Captured, a.Refunded)
		}
		if state == "approved" && eff.amounts && eff.effects > 0 &&
			(!eff.approved || eff.amount != a.Amount || eff.currency != "" && eff.currency != a.Currency) {
			return fmt.Sprintf("answered APPROVED %s; the issuer: %d effects, approved %v, %s",
				answered, eff.effects, eff.approved, money(eff.amount, eff.currency))
		}
	}
	return ""
}

// recordAmounts checks the money of a transaction's final records: an
// authorization's ledger equals the approved follow-ups in its cell and
// keeps its limits; a follow-up approved in its cell is the issuer's
// approved effect for the same amount, and one the cell did not approve
// is no approved effect at the issuer. It returns the first problem, or "".
func recordAmounts(recs []CellRecord, eff effect) string {
	for _, rec := range recs {
		switch {
		case rec.PaymentType == cellpayv1.PaymentType_CARD_AUTHORIZATION && rec.State == "approved":
			l := rec.Ledger
			switch {
			case l != rec.Followed:
				return fmt.Sprintf("ledger %+v in %s, its approved follow-ups there sum to %+v", l, rec.Cell, rec.Followed)
			case l.Captured > rec.Amount || l.Refunded > l.Captured || l.Voided && l.Captured > 0:
				return fmt.Sprintf("ledger %+v in %s breaks its limits (authorized %d)", l, rec.Cell, rec.Amount)
			}
		case rec.Original == "" || !eff.amounts || rec.State == "sending":
		case rec.State == "approved" && (eff.effects != 1 || !eff.approved || eff.amount != rec.Amount ||
			eff.currency != "" && rec.Currency != "" && eff.currency != rec.Currency):
			return fmt.Sprintf("%v of %s approved for %s in %s; the issuer: %d effects, approved %v, %s",
				rec.PaymentType, rec.Original, money(rec.Amount, rec.Currency), rec.Cell, eff.effects, eff.approved, money(eff.amount, eff.currency))
		case rec.State != "approved" && eff.approved:
			return fmt.Sprintf("%v of %s %s in %s, approved at the issuer for %s", rec.PaymentType, rec.Original, rec.State, rec.Cell, money(eff.amount, eff.currency))
		}
	}
	return ""
}

// money is an amount for a problem's text: minor units and currency.
func money(minor int64, currency string) string {
	if currency == "" {
		return strconv.FormatInt(minor, 10)
	}
	return strconv.FormatInt(minor, 10) + " " + currency
}

func (c *classifier) pastPNR(recs []CellRecord) []CellRecord {
	var out []CellRecord
	for _, rec := range recs {
		if pastPNR(rec, c.prePNR) {
			out = append(out, rec)
		}
	}
	return out
}

func (c *classifier) example(problem string, id idempotency.Key, format string, args ...any) {
	c.r.example(c.limit, problem, id, format, args...)
}

func describe(recs []CellRecord) string {
	if len(recs) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(recs))
	for _, r := range recs {
		s := r.Cell + "=" + r.State
		if r.DeclineReason != "" {
			s += "(" + r.DeclineReason + ")"
		}
		parts = append(parts, fmt.Sprintf("%s attempt %d", s, r.Attempt))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

func describeAnswer(a Answer) string {
	if a.Err() {
		return CodeName(a.Code)
	}
	return statusString(a.Status, a.AuthCode, a.DeclineReason)
}

func describeAnswers(answers []Answer) string {
	parts := make([]string, len(answers))
	for i, a := range answers {
		parts[i] = describeAnswer(a)
	}
	return strings.Join(parts, ", ")
}

func describeTxn(t *cellpayv1.Transaction) string {
	return statusString(t.GetStatus(), t.GetAuthCode(), t.GetDeclineReason())
}

func statusString(s cellpayv1.TransactionStatus, auth, reason string) string {
	out := s.String()
	if auth != "" {
		out += " auth " + auth
	}
	if reason != "" {
		out += " reason " + reason
	}
	return out
}

func errorCodes(answers []Answer) string {
	var parts []string
	for _, a := range answers {
		if a.Err() {
			parts = append(parts, CodeName(a.Code))
		}
	}
	return strings.Join(parts, ", ")
}

// ErrNotResolved means WaitResolved timed out with transactions still
// PENDING.
var ErrNotResolved = errors.New("checker: transactions still pending")

// WaitResolved polls GetTransaction until none of the transactions keys is
// PENDING, and returns how long that took. A transaction is settled when
// GetTransaction returns it in a final status or NOT_FOUND (Check reports
// those as lost if they should exist); one it cannot read yet is polled
// again. After timeout it returns the time waited and an error wrapping
// ErrNotResolved that names a few of the transactions still pending.
func WaitResolved(ctx context.Context, cfg Config, keys []idempotency.Key, timeout time.Duration) (time.Duration, error) {
	cfg = cfg.withDefaults()
	if cfg.Payments == nil && cfg.GTRAddr == "" {
		return 0, fmt.Errorf("%w: GTRAddr is required", ErrInvalidConfig)
	}
	payments, closeGTR, err := dialGTR(cfg)
	if err != nil {
		return 0, err
	}
	defer closeGTR()
	start := time.Now()
	deadline := start.Add(timeout)
	pending := slices.Clone(keys)
	for {
		looks, err := getAll(ctx, payments, pending, cfg.Concurrency, cfg.CallTimeout)
		if err != nil {
			return time.Since(start), err
		}
		pending = slices.DeleteFunc(pending, func(k idempotency.Key) bool {
			l := looks[k]
			return l.code == codes.NotFound ||
				l.code == codes.OK && l.txn.GetStatus() != cellpayv1.TransactionStatus_PENDING
		})
		if len(pending) == 0 {
			return time.Since(start), nil
		}
		if !time.Now().Before(deadline) {
			names := make([]string, 0, 5)
			for _, k := range pending[:min(5, len(pending))] {
				names = append(names, k.String())
			}
			return time.Since(start), fmt.Errorf("%w: %d after %v, e.g. %s", ErrNotResolved,
				len(pending), timeout, strings.Join(names, ", "))
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("checker: wait resolved: %w", ctx.Err())
		case <-time.After(min(cfg.PollInterval, time.Until(deadline))):
		}
	}
}
