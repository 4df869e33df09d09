package load

import (
	"math/rand/v2"
	"strconv"

	"github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// mccs are merchant category codes every cell's reference data knows.
var mccs = []string{"5411", "5812", "5999", "4111"}

const (
	minAmount = 100
	maxAmount = 50_000
)

// generator builds request payloads. A payload depends only on the seed and
// the sequence number, so it is reproducible whatever the scheduling, and
// generator is safe for concurrent use.
type generator struct {
	runID        string
	seed         uint64
	partners     []string
	markets      []string
	mix          []PaymentWeight
	mixTotal     int
	declineShare float64
}

func newGenerator(cfg Config) *generator {
	g := &generator{
		runID:        cfg.RunID,
		seed:         cfg.Seed,
		partners:     cfg.Partners,
		markets:      cfg.Markets,
		mix:          cfg.PaymentMix,
		declineShare: cfg.DeclineShare,
	}
	for _, w := range g.mix {
		g.mixTotal += w.Weight
	}
	return g
}

// transactionID is RunID-seq.
func (g *generator) transactionID(seq int64) string {
	return g.runID + "-" + strconv.FormatInt(seq, 10)
}

func (g *generator) request(seq int64) *cellpayv1.SubmitTransactionRequest {
	rng := rand.New(rand.NewPCG(g.seed, uint64(seq)))
	market := g.markets[rng.IntN(len(g.markets))]
	req := &cellpayv1.SubmitTransactionRequest{
		TransactionId: g.transactionID(seq),
		PaymentType:   g.paymentType(rng),
		PartnerId:     g.partners[rng.IntN(len(g.partners))],
		Market:        market,
		Amount: &cellpayv1.Money{
			MinorUnits: minAmount + rng.Int64N(maxAmount-minAmount+1),
			Currency:   marketCurrency[market],
		},
		Merchant: &cellpayv1.Merchant{
			Id:      "m-" + market + "-" + strconv.Itoa(1+rng.IntN(500)),
			Mcc:     mccs[rng.IntN(len(mccs))],
			Country: market,
		},
	}
	if req.PaymentType != cellpayv1.PaymentType_BANK_TRANSFER {
		pan := DeclinePAN
		// Draw even when DeclineShare is 0 or 1 so that the rest of the
		// payload does not depend on it.
		if rng.Float64() >= g.declineShare {
			pan = randomPAN(rng)
		}
		req.Card = &cellpayv1.Card{Pan: pan, ExpiryMonth: 12, ExpiryYear: 2030}
	}
	return req
}

func (g *generator) paymentType(rng *rand.Rand) cellpayv1.PaymentType {
	n := rng.IntN(g.mixTotal)
	for _, w := range g.mix {
		if n < w.Weight {
			return w.Type
		}
		n -= w.Weight
	}
	panic("unreachable: weights validated")
}

// randomPAN returns a 16-digit, 4-prefixed card number with a valid Luhn
// check digit.
func randomPAN(rng *rand.Rand) string {
	var b [16]byte
	b[0] = '4'
	for i := 1; i < 15; i++ {
		b[i] = byte('0' + rng.IntN(10))
	}
	b[15] = card.CheckDigit(string(b[:15]))
	return string(b[:])
}
