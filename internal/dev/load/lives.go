package load

import (
	"math/rand/v2"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// Lives: what follows an approved authorization with Config.FollowUps, as
// a partner's would. Each ends its authorization's money exactly once and
// never passes its limits (the captures at most the authorization, the
// refunds at most the captures), so that every follow-up of a healthy
// platform is approved and the checker can hold every amount to the
// minor unit.
const (
	// LifeCaptureRefund captures in one or two parts, all of the
	// authorization or part of it, then refunds in one or two parts, all
	// of the captures or part of them.
	LifeCaptureRefund = "capture_refund"
	// LifeVoid voids the authorization.
	LifeVoid = "void"
)

// voidShare is the share of followed authorizations voided instead of
// captured.
const voidShare = 0.25

// maxSteps bounds a life: two captures, then two refunds.
const maxSteps = 4

// FollowUpSuffixLen is the longest step suffix: a follow-up's ID is its
// authorization's and at most this many characters more, which the
// RunID must leave room for.
const FollowUpSuffixLen = 3

// lifeStream sets the lives' random stream apart from the payloads'
// (the generator draws a payload from PCG(seed, seq)). Its value is the
// one cmd/loadgen drew lives by before they moved here, so that a seed
// still plays the same lives.
const lifeStream = 0x6c6966652d6c67 // "life-lg"

// step is one follow-up of a life.
type step struct {
	kind cellpayv1.PaymentType // CAPTURE, VOID or REFUND
	// amount is in minor units of the authorization's currency; 0 for a
	// void.
	amount int64
	// suffix makes the follow-up's own transaction ID from its
	// authorization's: "-c1", "-c2", "-r1", "-r2" or "-v".
	suffix string
}

// life is what follows one authorization: its steps, sent in order.
type life struct {
	name  string // LifeCaptureRefund or LifeVoid
	steps []step
}

// planLife says whether the authorization seq of a run with seed, approved
// for amount minor units, is followed (share of them are, 0..1), and by
// which life. It is a pure function of its arguments: the same seed and
// seq give the same life whatever the run's scheduling, as they give the
// same payload. A life has at most maxSteps steps, each of at least one
// minor unit (a void has none).
func planLife(seed, seq uint64, share float64, amount int64) (life, bool) {
	rng := rand.New(rand.NewPCG(seed, seq^lifeStream))
	if rng.Float64() >= share || amount < 1 {
		return life{}, false
	}
	if rng.Float64() < voidShare {
		return life{name: LifeVoid, steps: []step{{kind: cellpayv1.PaymentType_VOID, suffix: "-v"}}}, true
	}
	captured := portion(rng, amount)
	refunded := portion(rng, captured)
	l := life{name: LifeCaptureRefund}
	l.steps = append(l.steps, parts(rng, cellpayv1.PaymentType_CAPTURE, "-c", captured)...)
	l.steps = append(l.steps, parts(rng, cellpayv1.PaymentType_REFUND, "-r", refunded)...)
	return l, true
}

// portion is all of total half the time, otherwise a part of it
// (1..total-1); all of it when total is 1.
func portion(rng *rand.Rand, total int64) int64 {
	if total < 2 || rng.IntN(2) == 0 {
		return total
	}
	return 1 + rng.Int64N(total-1)
}

// parts splits total into two steps of kind, each at least 1 (one step
// when total is 1), suffixed prefix+"1" and prefix+"2".
func parts(rng *rand.Rand, kind cellpayv1.PaymentType, prefix string, total int64) []step {
	if total < 2 {
		return []step{{kind: kind, amount: total, suffix: prefix + "1"}}
	}
	first := 1 + rng.Int64N(total-1)
	return []step{{kind: kind, amount: first, suffix: prefix + "1"}, {kind: kind, amount: total - first, suffix: prefix + "2"}}
}
