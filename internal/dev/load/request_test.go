package load

import (
	"regexp"
	"testing"

	"google.golang.org/protobuf/proto"

	cardlib "github.com/cellpay/cellpay/internal/card"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// idPattern is the public API's transaction ID contract.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func TestLuhn(t *testing.T) {
	tests := []struct {
		pan  string
		want bool
	}{
		{DeclinePAN, true},
		{"4111111111111111", true},
		{"79927398713", true},
		{"4111111111111112", false},
		{"4000000000000001", false},
		{"", false},
		{"4111-1111", false},
	}
	for _, tt := range tests {
		if got := cardlib.Luhn(tt.pan); got != tt.want {
			t.Errorf("cardlib.Luhn(%q) = %v, want %v", tt.pan, got, tt.want)
		}
	}
}

func TestRequestGeneration(t *testing.T) {
	cfg := validConfig()
	cfg.DeclineShare = 0.3
	cfg.Seed = 42
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	g := newGenerator(cfg)
	const n = 5000
	ids := map[string]bool{}
	types := map[cellpayv1.PaymentType]int{}
	var cards, declines int
	mccOK := map[string]bool{"5411": true, "5812": true, "5999": true, "4111": true}
	for seq := int64(1); seq <= n; seq++ {
		req := g.request(seq)
		id := req.GetTransactionId()
		if !idPattern.MatchString(id) || ids[id] {
			t.Fatalf("seq %d: bad or duplicate ID %q", seq, id)
		}
		ids[id] = true
		types[req.GetPaymentType()]++
		if cur := marketCurrency[req.GetMarket()]; cur == "" || req.GetAmount().GetCurrency() != cur {
			t.Errorf("seq %d: market %s currency %s", seq, req.GetMarket(), req.GetAmount().GetCurrency())
		}
		if a := req.GetAmount().GetMinorUnits(); a < 100 || a > 50000 {
			t.Errorf("seq %d: amount %d out of 100..50000", seq, a)
		}
		m := req.GetMerchant()
		if !mccOK[m.GetMcc()] || m.GetCountry() != req.GetMarket() || m.GetId() == "" {
			t.Errorf("seq %d: merchant %v", seq, m)
		}
		if req.GetPartnerId() == "" {
			t.Errorf("seq %d: no partner", seq)
		}
		card := req.GetCard()
		if req.GetPaymentType() == cellpayv1.PaymentType_BANK_TRANSFER {
			if card != nil {
				t.Errorf("seq %d: bank transfer with a card", seq)
			}
			continue
		}
		cards++
		if len(card.GetPan()) != 16 || !cardlib.Luhn(card.GetPan()) {
			t.Errorf("seq %d: PAN %q is not 16 Luhn-valid digits", seq, card.GetPan())
		}
		if card.GetExpiryMonth() != 12 || card.GetExpiryYear() != 2030 {
			t.Errorf("seq %d: expiry %d/%d", seq, card.GetExpiryMonth(), card.GetExpiryYear())
		}
		if card.GetPan() == DeclinePAN {
			declines++
		}
	}
	if share := float64(declines) / float64(cards); share < 0.25 || share > 0.35 {
		t.Errorf("decline share %.3f, want about 0.3", share)
	}
	if auth := types[cellpayv1.PaymentType_CARD_AUTHORIZATION]; auth < n*8/10 {
		t.Errorf("CARD_AUTHORIZATION %d of %d, want mostly", auth, n)
	}
	// Same seed and sequence number: same payload.
	if a, b := g.request(17), newGenerator(cfg).request(17); !proto.Equal(a, b) {
		t.Errorf("request 17 differs between generators:\n%v\n%v", a, b)
	}
}

func TestNoDeclinesByDefault(t *testing.T) {
	cfg := validConfig()
	cfg.setDefaults()
	g := newGenerator(cfg)
	for seq := int64(1); seq <= 2000; seq++ {
		if g.request(seq).GetCard().GetPan() == DeclinePAN {
			t.Fatalf("seq %d: declining card with DeclineShare 0", seq)
		}
	}
}
