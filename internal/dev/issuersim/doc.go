// Package issuersim is a card issuer stand-in for Cellpay's tests and local
// runs. It serves the issuerproto.Issuer gRPC service: it decides
// authorizations by fixed rules, applies captures, voids and refunds of
// approved authorizations (Adjust) to a ledger of each, suppresses
// duplicates by transaction,
// answers inquiries, closes a transaction an inquiry asks it to close,
// counts effects per transaction so tests can check "at most one issuer
// effect per transaction", and injects faults on request.
// A transaction is identified by (partner_id, transaction_id): transaction
// IDs are a namespace per partner, and the same ID from two partners is two
// transactions, each with its own effect and outcome.
//
// # Rules
//
// Authorize checks a request in this order; the first rule that applies
// decides.
//
//  1. An empty partner_id, transaction_id or pan, or a negative
//     amount_minor_units, is rejected with INVALID_ARGUMENT naming the
//     field. Nothing is recorded.
//  2. A transaction with an outcome repeats it (see Duplicates and
//     effects); one an inquiry closed is refused with FAILED_PRECONDITION
//     (see Closing): neither is decided again.
//  3. A test card with a fixed decline (table below) declines with its
//     reason, refunds included.
//  4. A refund (refund=true) is approved. Refunds skip the expiry and limit
//     rules and do not change the card's cumulative amount.
//  5. An expiry month outside 1..12 declines "invalid_expiry". An expiry
//     before the current month of Config.Now (in UTC) declines
//     "expired_card"; a card is valid through the end of its expiry month.
//     Two-digit years (0..99) mean 20YY.
//  6. amount_minor_units > Config.PerTxnLimit declines "exceeds_limit".
//  7. A card's cumulative approved amount plus this amount over
//     Config.PerCardLimit declines "insufficient_funds".
//  8. Otherwise the authorization is approved with
//     AuthCode(partner_id, transaction_id), six characters derived
//     deterministically from the partner and transaction ID.
//
// Test cards (16 digits, all Luhn-valid):
//
//	constant               PAN               outcome
//	CardApproved           4111111111111111  approved (subject to rules 5-7)
//	CardDoNotHonor         4000000000000002  declined "do_not_honor"
//	CardInsufficientFunds  4000000000009995  declined "insufficient_funds"
//	CardStolen             4000000000009979  declined "stolen_card"
//	CardExpired            4000000000000069  declined "expired_card"
//
// Any other PAN follows rules 4 to 8. The simulator does not check the PAN's
// format or Luhn digit: the callers (GTR, cells) validate input before the
// issuer sees it.
//
// # Duplicates and effects
//
// The first outcome recorded for a (partner_id, transaction_id) is final. A
// repeat returns it with duplicate=true, whatever its payload, counts as a
// request and never as a new effect. Another partner's request with the same
// transaction_id is no repeat: it is decided on its own. Concurrent requests
// for one transaction are serialised by a per-transaction lock, so exactly
// one of them applies the effect; transactions live in a sharded map so
// unrelated ones do not contend. Inquire and Effects look transactions up by
// the same pair. Effects are counted where
// they are applied, not derived, so a bug that applied two would show 2.
// Records are kept in memory for the life of the Server.
//
// Authorizations and adjustments share one key space: a transaction is one
// or the other, and a request of either kind for a (partner_id,
// transaction_id) that already has an outcome repeats that outcome as a
// duplicate, whichever kind recorded it.
//
// # Adjustments
//
// Adjust applies a capture, void or refund (kind) of an approved card
// authorization, its original_transaction_id of the same partner. It is
// deduplicated, closed by inquiry, counted and faulted exactly as
// Authorize, by its own (partner_id, transaction_id), and Inquire answers
// it the same way. It checks a request in this order:
//
//  1. An empty partner_id, transaction_id or original_transaction_id, a
//     kind that is not CAPTURE, VOID or REFUND, a negative
//     amount_minor_units, or a zero one for a capture or refund, is
//     rejected with INVALID_ARGUMENT naming the field. Nothing is
//     recorded.
//  2. A transaction with an outcome repeats it; one an inquiry closed is
//     refused with FAILED_PRECONDITION.
//  3. An original that is no approved card authorization of the partner
//     (unknown, declined, closed, a refund or a bank transfer) declines
//     "unknown_original".
//  4. A currency other than the original's declines "currency_mismatch".
//  5. The issuer keeps a ledger (package followup) of each approved card
//     authorization, its authorized amount and currency as authorized. The
//     adjustment is held and settled in it at once; a rule it would break
//     declines, the ledger unchanged: "exceeds_authorized" (captures
//     beyond the authorized amount), "voided" (a capture or a second void
//     of a voided authorization), "already_captured" (a void after a
//     capture), "exceeds_captured" (refunds beyond the captures). A void
//     releases the whole authorization whatever amount it carries.
//  6. Otherwise it is approved with AuthCode(partner_id, transaction_id).
//
// A decline is an outcome (recorded, repeated to duplicates, an effect of
// its transaction in Effects' counts) that moves no money. Effects reports
// each transaction's outcome with its counters: kind (UNSPECIFIED for an
// authorization), original, approved, and the amount and currency applied
// (a void's: the authorized amount; zero and empty for a decline).
//
// # The issuer's record
//
// ListEffects is what a real issuer offers its acquirers for
// reconciliation: every outcome it applied (approved or declined, an
// authorization of each kind or an adjustment) in a window of its own
// clock (Config.Now), in the order recorded, by pages (a token that is the
// place in an append-only journal), narrowed to one terminal_id (the
// cell that sent the request) when asked. Each entry carries what was
// applied (amount, currency, auth code or decline reason, the time) and
// never card data. A duplicate or a closed transaction adds nothing; an
// effect whose caller learnt nothing (a failure after it) is listed, which
// is the point: a cell whose database lost its last commits with a site
// learns from it what the issuer did.
//
// # Closing
//
// Inquire returns a transaction's outcome if it has one, with
// duplicate=false, and close has no effect on it. Without an outcome, an
// inquiry with close=true closes the transaction and answers OK with
// closed=true (approved false, no auth code); later inquiries, with or
// without close, answer the same; one without close on a transaction never
// closed answers NOT_FOUND. A closed transaction is never applied: an
// Authorize or Adjust of it counts as a request, applies nothing and is
// refused with FAILED_PRECONDITION, its message saying the transaction was
// closed by an inquiry. The close is taken under the record's lock, as an
// effect is, so an Authorize or Adjust racing with it is either applied first (and the inquiry
// answers its outcome) or refused after: a transaction ends with one effect
// or closed, never both. Effects lists a closed transaction with 0
// effects (and the requests it refused). This is what lets a caller that gave up on a send (the cell's
// reconciler) record it failed: gRPC deadlines are relative, so a request
// held up on a stalled connection can still arrive with its whole budget
// after any wait.
//
// # Faults
//
// SetFaults replaces the injected faults. latency_ms is waited before every
// Authorize, Adjust and Inquire (cut short by the caller's context). hang
// makes Authorize and Adjust block until the caller's context ends.
// error_rate is the share of Authorize and Adjust calls (one draw each, from
// one sequence) that fail with UNAVAILABLE, drawn from a math/rand/v2
// source seeded by Config.Seed: before the effect, or after it when
// after_effect is true (the outcome is recorded but the caller never learns
// it; on a closed transaction it hides the refusal the same way). A call
// that gets past the latency and validation counts as a request, whether or
// not a fault then fails it; one cut short during the latency does not.
//
// # What it must never do
//
// It never logs a full PAN or puts one in an error: logs carry card.Mask(pan)
// and error messages carry no request values at all. (An AdjustRequest
// carries no card data; its debug line names its IDs, kind and amount.)
package issuersim
