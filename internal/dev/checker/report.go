package checker

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cellpay/cellpay/pkg/idempotency"
)

// Report is the outcome of one Check. Counts are of distinct transactions,
// each a (partner, transaction ID) pair, unless they say otherwise.
type Report struct {
	// Attempted counts the distinct transactions in the answers.
	Attempted int `json:"attempted"`
	// Answers counts the answers read (a transaction submitted twice has
	// two).
	Answers int `json:"answers"`
	// Errors counts error answers by gRPC code name.
	Errors map[string]int `json:"errors"`

	// The final record's status, as GetTransaction reads it now. Approved
	// is the "ok" count (a field named OK would clash with the method).
	Approved int `json:"ok"`
	Declined int `json:"declined"`
	Failed   int `json:"failed"`
	Pending  int `json:"pending"`
	// PendingResolved counts transactions answered PENDING that now have a final
	// record.
	PendingResolved int `json:"pending_resolved"`
	// NotStarted counts transactions the partner only got errors for, that have no
	// record and never reached the issuer: nothing happened, as promised.
	NotStarted int `json:"not_started"`

	// Lost counts transactions the partner got a non-error answer for, or that
	// reached the issuer, which GetTransaction cannot find; plus every
	// EffectsWithoutRecord transaction.
	Lost int `json:"lost"`
	// EffectsWithoutRecord counts transactions the partner got only errors for that
	// the issuer applied, without a final record to show for it.
	EffectsWithoutRecord int `json:"effects_without_record"`
	// DuplicatedEffects counts transactions with more than one issuer effect.
	DuplicatedEffects int `json:"duplicated_effects"`
	// ReroutesAfterPNR counts transactions with a record past the point of no return
	// in more than one cell.
	ReroutesAfterPNR int `json:"reroutes_after_pnr"`
	// DifferingAnswers counts transactions with a final answer (not PENDING) whose
	// status, auth code or decline reason differs from the final record.
	DifferingAnswers int `json:"differing_answers"`
	// AmountMismatches counts transactions whose money does not add up:
	// an authorization whose ledger is not the sum of its approved
	// captures and refunds (or passes its limits), or a capture, void or
	// refund approved in its cell but not at the issuer for the same
	// amount, or approved at the issuer and not in its cell; or a
	// transaction of any type whose partner was answered an amount or
	// currency (approved or declined) other than its cell's record, an
	// approval other than the issuer's effect, or an authorization's
	// captured or refunded sum ahead of its ledger. Each transaction
	// counts once, however many of its amounts differ.
	AmountMismatches int `json:"amount_mismatches"`
	// Unverified counts transactions GetTransaction could not read (other than
	// NOT_FOUND) after retries: nothing can be said about them.
	Unverified int `json:"unverified"`

	// IssuerEffects and IssuerRequests total the issuer's counters over the
	// attempted transactions.
	IssuerEffects  int64 `json:"issuer_effects"`
	IssuerRequests int64 `json:"issuer_requests"`

	// Examples holds up to Config.Examples transactions per problem, by problem
	// name (the JSON names of the counts above).
	Examples map[string][]Example `json:"examples,omitempty"`
}

// Example is one transaction showing a problem, and what was seen.
type Example struct {
	PartnerID string `json:"partner_id"`
	ID        string `json:"id"`
	Detail    string `json:"detail"`
}

// Problem names, as keys of Report.Examples.
const (
	ProblemLost                 = "lost"
	ProblemEffectsWithoutRecord = "effects_without_record"
	ProblemDuplicatedEffects    = "duplicated_effects"
	ProblemReroutesAfterPNR     = "reroutes_after_pnr"
	ProblemDifferingAnswers     = "differing_answers"
	ProblemUnverified           = "unverified"
	ProblemAmounts              = "amount_mismatches"
	ProblemPending              = "pending"
)

// OK reports whether the run kept the invariants the report can check:
// nothing lost, at most one issuer effect per transaction, no record past
// the PNR in two cells, every final answer equal to its record, every
// amount equal in the cells and at the issuer, and every transaction
// verified (an unreadable transaction could hide any of these).
func (r Report) OK() bool {
	return r.Lost == 0 && r.DuplicatedEffects == 0 && r.ReroutesAfterPNR == 0 &&
		r.DifferingAnswers == 0 && r.AmountMismatches == 0 && r.Unverified == 0
}

func (r *Report) example(limit int, problem string, k idempotency.Key, format string, args ...any) {
	if limit < 0 || len(r.Examples[problem]) >= limit {
		return
	}
	if r.Examples == nil {
		r.Examples = make(map[string][]Example)
	}
	r.Examples[problem] = append(r.Examples[problem],
		Example{PartnerID: k.PartnerID, ID: k.TransactionID, Detail: fmt.Sprintf(format, args...)})
}

// String renders the report for a terminal.
func (r Report) String() string {
	var b strings.Builder
	line := func(name string, n any) { fmt.Fprintf(&b, "%-24s %v\n", name, n) }
	line("attempted", r.Attempted)
	line("answers", r.Answers)
	if len(r.Errors) > 0 {
		var parts []string
		for _, c := range slices.Sorted(maps.Keys(r.Errors)) {
			parts = append(parts, fmt.Sprintf("%s=%d", c, r.Errors[c]))
		}
		line("error answers", strings.Join(parts, " "))
	}
	line("ok (approved)", r.Approved)
	line("declined", r.Declined)
	line("failed", r.Failed)
	line("pending", r.Pending)
	line("pending resolved", r.PendingResolved)
	line("not started", r.NotStarted)
	line("issuer effects", r.IssuerEffects)
	line("issuer requests", r.IssuerRequests)
	b.WriteString("\n")
	problems := []struct {
		name string
		n    int
	}{
		{ProblemLost, r.Lost},
		{ProblemEffectsWithoutRecord, r.EffectsWithoutRecord},
		{ProblemDuplicatedEffects, r.DuplicatedEffects},
		{ProblemReroutesAfterPNR, r.ReroutesAfterPNR},
		{ProblemDifferingAnswers, r.DifferingAnswers},
		{ProblemAmounts, r.AmountMismatches},
		{ProblemUnverified, r.Unverified},
	}
	for _, p := range problems {
		line(strings.ReplaceAll(p.name, "_", " "), p.n)
	}
	for _, p := range append(problems, struct {
		name string
		n    int
	}{ProblemPending, r.Pending}) {
		for _, ex := range r.Examples[p.name] {
			fmt.Fprintf(&b, "  %s %s/%s: %s\n", p.name, ex.PartnerID, ex.ID, ex.Detail)
		}
	}
	if r.OK() {
		b.WriteString("\nRESULT: OK\n")
	} else {
		b.WriteString("\nRESULT: INVARIANTS BROKEN\n")
	}
	return b.String()
}
