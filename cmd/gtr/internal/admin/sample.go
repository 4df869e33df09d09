package admin

import (
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/pkg/routing"
)

// commonMarkets fill in markets no rule names, so catch-all rules get
// realistic traffic too.
var commonMarkets = []string{"GB", "DE", "FR", "US", "NL", "ES", "IT", "PL", "SE", "IE"}

var paymentTypes = []string{routing.PaymentCardAuthorization, routing.PaymentCardRefund, routing.PaymentBankTransfer}

// syntheticAttrs returns n deterministic attribute sets spread over the
// partners and markets the specs' rules name and the partners homed in a
// site (sites: partner ID to home site), plus synthetic partners and
// common markets, each with its partner's home site: the same n, specs
// and sites give the same keys, so shares computed from them are
// comparable run to run and replica to replica.
func syntheticAttrs(n int, sites map[string]string, specs ...routing.Spec) []routing.Attrs {
	var partners, markets []string
	for _, s := range specs {
		for _, r := range s.Rules {
			partners = append(partners, r.Partners...)
			markets = append(markets, r.Markets...)
		}
	}
	for p := range sites {
		partners = append(partners, p)
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
			HomeSite:      sites[p],
		}
	}
	return out
}

// homeSites maps each partner of reg homed in a site to that site.
func homeSites(reg *partners.Registry) map[string]string {
	out := map[string]string{}
	for _, p := range reg.Partners {
		if p.HomeSite != "" {
			out[p.ID] = p.HomeSite
		}
	}
	return out
}

// homeSites is the partner registry's home sites (homeSites).
func (s *Server) homeSites() map[string]string {
	return homeSites(s.cfg.Partners.Index().Registry())
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
