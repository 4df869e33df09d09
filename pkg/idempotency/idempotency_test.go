package idempotency

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/internal/dev/testutil"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

func TestValidateKey(t *testing.T) {
	cases := []struct {
		id      string
		wantErr string
	}{
		{"a", ""},
		{"txn-2026.11_29-ABC", ""},
		{strings.Repeat("x", 64), ""},
		{"", "required"},
		{strings.Repeat("x", 65), "at most 64"},
		{"has space", "position 3"},
		{"ünï", "position 0"},
		{"semi;colon", "position 4"},
	}
	for _, c := range cases {
		err := ValidateKey(c.id)
		if c.wantErr == "" && err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", c.id, err)
		}
		if c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("ValidateKey(%q) = %v, want an error containing %q", c.id, err, c.wantErr)
		}
	}
}

func sample() *cellpayv1.SubmitTransactionRequest {
	return &cellpayv1.SubmitTransactionRequest{
		TransactionId: "t-1",
		PaymentType:   cellpayv1.PaymentType_CARD_AUTHORIZATION,
		PartnerId:     "p-001",
		Market:        "GB",
		Amount:        &cellpayv1.Money{MinorUnits: 1250, Currency: "GBP"},
		Merchant:      &cellpayv1.Merchant{Id: "m-1", Mcc: "5411", Country: "GB"},
		Card:          &cellpayv1.Card{Pan: "4242424242424242", ExpiryMonth: 12, ExpiryYear: 2030},
	}
}

func TestFingerprint(t *testing.T) {
	f := NewFingerprinter([]byte("k"))
	base := f.Of(sample())
	if err := Check(base, f.Of(proto.Clone(sample()).(*cellpayv1.SubmitTransactionRequest))); err != nil {
		t.Fatalf("same payload: %v", err)
	}
	mutations := map[string]func(r *cellpayv1.SubmitTransactionRequest){
		"amount":   func(r *cellpayv1.SubmitTransactionRequest) { r.Amount.MinorUnits++ },
		"currency": func(r *cellpayv1.SubmitTransactionRequest) { r.Amount.Currency = "EUR" },
		"pan":      func(r *cellpayv1.SubmitTransactionRequest) { r.Card.Pan = "4000000000000002" },
		"expiry":   func(r *cellpayv1.SubmitTransactionRequest) { r.Card.ExpiryYear++ },
		"no card":  func(r *cellpayv1.SubmitTransactionRequest) { r.Card = nil },
		"type":     func(r *cellpayv1.SubmitTransactionRequest) { r.PaymentType = cellpayv1.PaymentType_CARD_REFUND },
		"merchant": func(r *cellpayv1.SubmitTransactionRequest) { r.Merchant.Id = "m-2" },
		"mcc":      func(r *cellpayv1.SubmitTransactionRequest) { r.Merchant.Mcc = "5412" },
		"partner":  func(r *cellpayv1.SubmitTransactionRequest) { r.PartnerId = "p-002" },
		"market":   func(r *cellpayv1.SubmitTransactionRequest) { r.Market = "DE" },
		// Length prefixes keep field boundaries: moving a byte across two
		// adjacent fields must change the fingerprint.
		"boundary": func(r *cellpayv1.SubmitTransactionRequest) { r.PartnerId, r.Market = "p-001G", "B" },
	}
	for name, mutate := range mutations {
		r := sample()
		mutate(r)
		if err := Check(base, f.Of(r)); !errors.Is(err, ErrConflict) {
			t.Errorf("%s changed: Check = %v, want ErrConflict", name, err)
		}
	}
	if NewFingerprinter([]byte("other")).Of(sample()) == base {
		t.Error("fingerprint does not depend on the key")
	}
}

func FuzzValidateKey(f *testing.F) {
	f.Add("t-1")
	f.Add("")
	f.Fuzz(func(t *testing.T, id string) {
		err := ValidateKey(id)
		ok := len(id) >= 1 && len(id) <= 64 && strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == ""
		if ok != (err == nil) {
			t.Fatalf("ValidateKey(%q) = %v, want ok=%v", id, err, ok)
		}
	})
}

// TestKeyIsPerPartner: one transaction ID sent by two partners is two keys,
// and a map keyed by Key keeps them apart.
func TestKeyIsPerPartner(t *testing.T) {
	a, b := sample(), sample()
	b.PartnerId = "p-002"
	ka, kb := KeyOf(a), KeyOf(b)
	if ka == kb {
		t.Fatalf("KeyOf(%v) == KeyOf(%v)", ka, kb)
	}
	if ka != (Key{PartnerID: a.GetPartnerId(), TransactionID: "t-1"}) || ka.String() != a.GetPartnerId()+"/t-1" {
		t.Fatalf("KeyOf = %+v (%s)", ka, ka)
	}
	m := map[Key]int{ka: 1, kb: 2}
	if len(m) != 2 || m[KeyOf(a)] != 1 || m[KeyOf(b)] != 2 {
		t.Fatalf("map by Key: %v", m)
	}
}

// TestFingerprintAllocatesNothing: Of runs once per transaction on the
// GTR's path; once its pool is warm it allocates nothing, and a long field
// (longer than its chunk) hashes as it did before.
func TestFingerprintAllocatesNothing(t *testing.T) {
	f := NewFingerprinter([]byte("k"))
	long := sample()
	long.Merchant.Id = strings.Repeat("m", 200)
	if f.Of(long) == f.Of(sample()) {
		t.Fatal("a 200-byte merchant ID did not change the fingerprint")
	}
	if testutil.Race {
		t.Skip("allocation counts differ under the race detector")
	}
	r := sample()
	f.Of(r)
	if n := testing.AllocsPerRun(200, func() { f.Of(r) }); n != 0 {
		t.Fatalf("Of allocates %.1f times per call, want 0", n)
	}
}
