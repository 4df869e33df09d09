package followup

import (
	"errors"
	"testing"

	"pgregory.net/rapid"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

const (
	capture = cellpayv1.PaymentType_CAPTURE
	void    = cellpayv1.PaymentType_VOID
	refund  = cellpayv1.PaymentType_REFUND
)

func reason(err error) string {
	var b *Broken
	if errors.As(err, &b) {
		return b.Reason
	}
	return ""
}

func TestRules(t *testing.T) {
	l := Ledger{Authorized: 1000}
	if got := reason(l.Hold(refund, 1)); got != RefundBeforeCapture {
		t.Fatalf("refund before capture: %q", got)
	}
	if err := l.Hold(capture, 600); err != nil {
		t.Fatal(err)
	}
	if got := reason(l.Hold(capture, 401)); got != CaptureExceeds {
		t.Fatalf("capture over the authorization with 600 held: %q", got)
	}
	if got := reason(l.Hold(void, 0)); got != VoidAfterCapture {
		t.Fatalf("void with a capture held: %q", got)
	}
	if got := reason(l.Hold(refund, 1)); got != RefundBeforeCapture {
		t.Fatalf("refund of a capture still held: %q", got)
	}
	l.Settle(capture, 600, true)
	if got := reason(l.Hold(refund, 601)); got != RefundExceeds {
		t.Fatalf("refund over the captures: %q", got)
	}
	if err := l.Hold(refund, 600); err != nil {
		t.Fatal(err)
	}
	l.Settle(refund, 600, false) // declined: released
	if err := l.Hold(refund, 250); err != nil {
		t.Fatal(err)
	}
	l.Settle(refund, 250, true)
	if want := (Ledger{Authorized: 1000, Captured: 600, Refunded: 250}); l != want {
		t.Fatalf("ledger %+v, want %+v", l, want)
	}
	v := Ledger{Authorized: 1000}
	if err := v.Hold(void, 0); err != nil {
		t.Fatal(err)
	}
	if got := reason(v.Hold(capture, 1)); got != CaptureExceeds {
		t.Fatalf("capture with a void in flight: %q", got)
	}
	v.Settle(void, 1000, true)
	if got := reason(v.Hold(capture, 1)); got != OriginalVoided {
		t.Fatalf("capture after a void: %q", got)
	}
	if got := reason(v.Hold(void, 0)); got != OriginalVoided {
		t.Fatalf("second void: %q", got)
	}
	if (&Ledger{}).Hold(cellpayv1.PaymentType_CARD_AUTHORIZATION, 1) == nil {
		t.Fatal("an authorization held as a follow-up")
	}
}

// TestLedgerStaysValid: whatever follow-ups are held and settled in
// whatever order, the sums never pass the limits, and settling everything
// held leaves nothing held.
func TestLedgerStaysValid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := Ledger{Authorized: rapid.Int64Range(1, 1000).Draw(t, "authorized")}
		type held struct {
			kind   cellpayv1.PaymentType
			amount int64
		}
		var open []held
		for range rapid.IntRange(0, 40).Draw(t, "steps") {
			if len(open) > 0 && rapid.Bool().Draw(t, "settle") {
				i := rapid.IntRange(0, len(open)-1).Draw(t, "which")
				h := open[i]
				open = append(open[:i], open[i+1:]...)
				l.Settle(h.kind, h.amount, rapid.Bool().Draw(t, "approved"))
			} else {
				kind := rapid.SampledFrom([]cellpayv1.PaymentType{capture, void, refund}).Draw(t, "kind")
				amount := rapid.Int64Range(1, 600).Draw(t, "amount")
				if kind == void {
					amount = l.Authorized
				}
				if l.Hold(kind, amount) == nil {
					open = append(open, held{kind, amount})
				}
			}
			if !l.Valid() {
				t.Fatalf("ledger broke a limit: %+v", l)
			}
		}
		for _, h := range open {
			l.Settle(h.kind, h.amount, true)
		}
		if l.HeldCapture != 0 || l.HeldRefund != 0 || !l.Valid() {
			t.Fatalf("after settling all: %+v", l)
		}
	})
}
