package load

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// TestPlanLife: the life of an authorization is a pure function of the
// seed and its sequence number; share of them are followed; each life is
// bounded and keeps the ledger's limits.
func TestPlanLife(t *testing.T) {
	const n = 20_000
	for _, share := range []float64{0, 0.3, 1} {
		t.Run(fmt.Sprint(share), func(t *testing.T) {
			followed := 0
			seen := map[string]int{}
			for seq := uint64(1); seq <= n; seq++ {
				amount := int64(100 + seq%50_000)
				l, ok := planLife(7, seq, share, amount)
				again, okAgain := planLife(7, seq, share, amount)
				if ok != okAgain || !reflect.DeepEqual(l, again) {
					t.Fatalf("seq %d: %+v then %+v", seq, l, again)
				}
				if !ok {
					continue
				}
				followed++
				seen[l.name]++
				checkLife(t, l, amount)
				var captured, refunded int64
				for _, s := range l.steps {
					switch s.kind {
					case cellpayv1.PaymentType_CAPTURE:
						captured += s.amount
					case cellpayv1.PaymentType_REFUND:
						refunded += s.amount
					}
				}
				if captured == amount {
					seen["full capture"]++
				} else if captured > 0 {
					seen["partial capture"]++
				}
				if refunded == captured && refunded > 0 {
					seen["full refund"]++
				} else if refunded > 0 {
					seen["partial refund"]++
				}
				if len(l.steps) == 4 {
					seen["four steps"]++
				}
			}
			if got := float64(followed) / n; got < share-0.02 || got > share+0.02 {
				t.Fatalf("followed %.3f of the authorizations, want %v", got, share)
			}
			if share == 0 {
				return
			}
			for _, want := range []string{LifeVoid, LifeCaptureRefund, "full capture", "partial capture", "full refund", "partial refund", "four steps"} {
				if seen[want] == 0 {
					t.Errorf("no %s among %d lives: %v", want, followed, seen)
				}
			}
			if v := float64(seen[LifeVoid]) / float64(followed); v < voidShare-0.03 || v > voidShare+0.03 {
				t.Errorf("voided %.3f of the lives, want %v", v, voidShare)
			}
		})
	}
	// Another seed, other lives; the smallest amounts still split.
	differ := 0
	for seq := uint64(1); seq <= 100; seq++ {
		a, _ := planLife(1, seq, 0.5, 1000)
		b, _ := planLife(2, seq, 0.5, 1000)
		if !reflect.DeepEqual(a, b) {
			differ++
		}
	}
	if differ == 0 {
		t.Error("seeds 1 and 2 planned the same 100 lives")
	}
	for _, amount := range []int64{1, 2, 3} {
		for seq := uint64(1); seq <= 200; seq++ {
			if l, ok := planLife(3, seq, 1, amount); ok {
				checkLife(t, l, amount)
			}
		}
	}
	if _, ok := planLife(3, 1, 1, 0); ok {
		t.Error("a life planned for an authorization of 0")
	}
}

// TestPlanLifeStable: a seed plays the lives it played when they were
// drawn in cmd/loadgen (lifeStream unchanged), so that a run repeated
// with the same seed, before and after the move, follows the same
// authorizations in the same way.
func TestPlanLifeStable(t *testing.T) {
	type want struct {
		seq   uint64
		ok    bool
		steps []step
	}
	var got []want
	for seq := uint64(1); seq <= 6; seq++ {
		l, ok := planLife(9, seq, 0.5, 1000)
		got = append(got, want{seq, ok, l.steps})
	}
	golden := fmt.Sprint(got)
	if golden != stableLives {
		t.Fatalf("lives of seed 9:\n got %s\nwant %s", golden, stableLives)
	}
}

// stableLives are the lives of seed 9, seqs 1 to 6, share 0.5, amount
// 1000, as cmd/loadgen's planLife drew them (kinds by number: 4 CAPTURE,
// 5 VOID, 6 REFUND).
const stableLives = "[{1 true [{4 66 -c1} {4 65 -c2} {6 83 -r1} {6 48 -r2}]} {2 true [{5 0 -v}]} {3 false []} {4 false []} " +
	"{5 true [{4 90 -c1} {4 135 -c2} {6 113 -r1} {6 112 -r2}]} {6 true [{4 147 -c1} {4 853 -c2} {6 418 -r1} {6 582 -r2}]}]"

// checkLife fails t unless l is a void alone, or captures of at most
// amount then refunds of at most the captures, each step at least one
// minor unit, at most maxSteps, with distinct suffixes of at most
// FollowUpSuffixLen characters.
func checkLife(t *testing.T, l life, amount int64) {
	t.Helper()
	if len(l.steps) == 0 || len(l.steps) > maxSteps {
		t.Fatalf("%d steps: %+v", len(l.steps), l)
	}
	var captured, refunded int64
	suffixes := map[string]bool{}
	for i, s := range l.steps {
		if len(s.suffix) > FollowUpSuffixLen || suffixes[s.suffix] {
			t.Fatalf("step %d suffix %q: %+v", i, s.suffix, l)
		}
		suffixes[s.suffix] = true
		switch s.kind {
		case cellpayv1.PaymentType_VOID:
			if l.name != LifeVoid || len(l.steps) != 1 || s.amount != 0 {
				t.Fatalf("void in %+v", l)
			}
		case cellpayv1.PaymentType_CAPTURE:
			if refunded > 0 || s.amount < 1 {
				t.Fatalf("capture %d: %+v", i, l)
			}
			captured += s.amount
		case cellpayv1.PaymentType_REFUND:
			if s.amount < 1 {
				t.Fatalf("refund %d: %+v", i, l)
			}
			refunded += s.amount
		default:
			t.Fatalf("step %d kind %v", i, s.kind)
		}
	}
	if captured > amount || refunded > captured || (l.name == LifeCaptureRefund && (captured == 0 || refunded == 0)) {
		t.Fatalf("authorized %d, captured %d, refunded %d: %+v", amount, captured, refunded, l)
	}
}
