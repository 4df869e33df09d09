package admin

import (
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/cellpay/cellpay/pkg/routing"
)

// commonMarkets fill in markets no rule names, so catch-all rules get
// realistic traffic too.
var commonMarkets = []string{"GB", "DE", "FR", "US", "NL", "ES", "IT", "PL", "SE", "IE"}

var paymentTypes = []string{routing.PaymentCardAuthorization, routing.PaymentCardRefund, routing.PaymentBankTransfer}

// syntheticAttrs returns n deterministic attribute sets spread over the
// partners and markets the specs' rules name, plus synthetic partners and
// common markets: the same n and specs give the same keys, so shares
// computed from them are comparable run to run and replica to replica.
func syntheticAttrs(n int, specs ...routing.Spec) []routing.Attrs {
	var partners, markets []string
	for _, s := range specs {
		for _, r := range s.Rules {
			partners = append(partners, r.Partners...)
			markets = append(markets, r.Markets...)
		}
	}
	markets = append(markets, commonMarkets...)
	slices.Sort(partners)
	partners = slices.Compact(partners)
	slices.Sort(markets)
	markets = slices.Compact(markets)

	rng := rand.New(rand.NewPCG(0xce11, 0x9a7))
	out := make([]routing.Attrs, n)
	for i := range out {
		p := "partner-" + strconv.Itoa(rng.IntN(1_000_000))
		if len(partners) > 0 && rng.IntN(2) == 0 {
			p = partners[rng.IntN(len(partners))]
		}
		out[i] = routing.Attrs{
			TransactionID: "txn-" + strconv.Itoa(i),
			PartnerID:     p,
			Market:        markets[rng.IntN(len(markets))],
			PaymentType:   paymentTypes[rng.IntN(len(paymentTypes))],
			MerchantID:    "merchant-" + strconv.Itoa(rng.IntN(100_000)),
		}
	}
	return out
}

// homes routes every attribute set through t and returns each one's home
// cell ("" when nothing routes it).
func homes(t *routing.Table, attrs []routing.Attrs) []string {
	out := make([]string, len(attrs))
	dst := make([]routing.Choice, 0, t.MaxPoolSize())
	for i := range attrs {
		res, err := t.Route(&attrs[i], dst)
		if err == nil && len(res.Ranked) > 0 {
			out[i] = res.Ranked[0].Cell.ID
		}
	}
	return out
}
