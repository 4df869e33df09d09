package store

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellpay/cellpay/internal/pnr/cellside"
	"github.com/cellpay/cellpay/pkg/api/cellpayv1"
)

// listed is one record a List or Statement test writes: partner, ID,
// creation (from t0), state reached, payment type and amount.
type listed struct {
	partner, id string
	at          time.Duration
	state       cellside.State
	pt          cellpayv1.PaymentType
	amount      int64
	currency    string
}

// writeListed records each of recs in its state, through the states a
// cell writes on the way (received, sending, then the final one).
func writeListed(t *testing.T, s *Store, recs []listed) {
	t.Helper()
	ctx := ctxT(t)
	for _, l := range recs {
		r := record(l.id)
		r.PartnerID, r.PaymentType, r.Amount, r.Currency = l.partner, l.pt, l.amount, l.currency
		r.CreatedAt, r.UpdatedAt = t0.Add(l.at), t0.Add(l.at)
		if _, _, err := s.Insert(ctx, r); err != nil {
			t.Fatalf("%s/%s: %v", l.partner, l.id, err)
		}
		var path []cellside.State
		switch l.state {
		case cellside.StateReceived:
		case cellside.StateSending:
			path = []cellside.State{cellside.StateSending}
		default:
			path = []cellside.State{cellside.StateSending, l.state}
		}
		for _, st := range path {
			from := r.State
			r.State = st
			if err := s.Persist(ctx, r, from); err != nil {
				t.Fatalf("%s/%s to %s: %v", l.partner, l.id, st, err)
			}
		}
	}
}

// listFixture is p-001's records around the window [t0, t0+1h), another
// partner's with the same IDs and times, and records partners do not see.
func listFixture() []listed {
	auth, capture := cellpayv1.PaymentType_CARD_AUTHORIZATION, cellpayv1.PaymentType_CAPTURE
	approved, declined := cellside.StateApproved, cellside.StateDeclined
	recs := []listed{
		{"p-001", "before", -time.Microsecond, approved, auth, 100, "GBP"}, // outside: before the start
		{"p-001", "a-start", 0, approved, auth, 1250, "GBP"},               // at the start: inside
		{"p-001", "b", time.Minute, declined, auth, 300, "GBP"},
		{"p-001", "c", 2 * time.Minute, approved, auth, 700, "EUR"},
		{"p-001", "d1", 3 * time.Minute, approved, capture, 1000, "GBP"}, // d1 and d2: one instant
		{"p-001", "d2", 3 * time.Minute, cellside.StateSending, auth, 50, "GBP"},
		{"p-001", "e", 4 * time.Minute, cellside.StateFailed, auth, 60, "GBP"},
		{"p-001", "unseen", 5 * time.Minute, cellside.StateReceived, auth, 70, "GBP"}, // not a state partners see
		{"p-001", "z-end", time.Hour, approved, auth, 100, "GBP"},                     // at the end: outside
	}
	for _, r := range slices.Clone(recs) {
		r.partner = "p-002"
		recs = append(recs, r)
	}
	return recs
}

// TestList: a partner's listing holds its own records partners see,
// created in [start, end) (a record a microsecond before the start, and
// one at the end, are not in it), in (created_at, transaction_id) order;
// states and types filter; pages after a position hold each record once.
func TestList(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	writeListed(t, s, listFixture())
	ids := func(recs []*cellside.Record) []string {
		var out []string
		for _, r := range recs {
			if r.PartnerID != "p-001" {
				t.Errorf("listed %s of %s", r.TransactionID, r.PartnerID)
			}
			out = append(out, r.TransactionID)
		}
		return out
	}
	window := ListFilter{PartnerID: "p-001", Start: t0, End: t0.Add(time.Hour), Limit: 100}
	all := []string{"a-start", "b", "c", "d1", "d2", "e"}
	for _, c := range []struct {
		name string
		f    func(f *ListFilter)
		want []string
	}{
		{"the window", func(*ListFilter) {}, all},
		{"a narrower window", func(f *ListFilter) { f.Start, f.End = t0.Add(time.Minute), t0.Add(3*time.Minute) }, []string{"b", "c"}},
		{"an hour earlier", func(f *ListFilter) { f.Start, f.End = t0.Add(-time.Hour), t0 }, []string{"before"}},
		{"approved", func(f *ListFilter) { f.States = []cellside.State{cellside.StateApproved} }, []string{"a-start", "c", "d1"}},
		{"pending and failed", func(f *ListFilter) {
			f.States = []cellside.State{cellside.StateSending, cellside.StateFailed}
		}, []string{"d2", "e"}},
		{"captures", func(f *ListFilter) { f.Types = []cellpayv1.PaymentType{cellpayv1.PaymentType_CAPTURE} }, []string{"d1"}},
		{"after d1, at the same instant as d2", func(f *ListFilter) { f.AfterCreated, f.AfterID = t0.Add(3*time.Minute), "d1" }, []string{"d2", "e"}},
		{"limited", func(f *ListFilter) { f.Limit = 2 }, []string{"a-start", "b"}},
		{"another partner's window", func(f *ListFilter) { f.PartnerID = "p-003" }, nil},
	} {
		f := window
		c.f(&f)
		got, err := s.List(ctx, f)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.name == "another partner's window" {
			if len(got) != 0 {
				t.Errorf("%s: listed %d", c.name, len(got))
			}
			continue
		}
		if g := ids(got); !slices.Equal(g, c.want) {
			t.Errorf("%s: listed %v, want %v", c.name, g, c.want)
		}
	}
	// Page by page, from each last listed position: every record once.
	for _, size := range []int{1, 2, 4} {
		f := window
		f.Limit = size
		var got []string
		for page := 0; page <= len(all); page++ {
			recs, err := s.List(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ids(recs)...)
			if len(recs) < size {
				break
			}
			last := recs[len(recs)-1]
			f.AfterCreated, f.AfterID = last.CreatedAt, last.TransactionID
		}
		if !slices.Equal(got, all) {
			t.Errorf("pages of %d: %v, want %v", size, got, all)
		}
	}
}

// TestStatement: a statement sums the partner's records partners see,
// created in [start, end), by payment type, state and currency, to the
// minor unit; another partner's records, one not visible and those
// outside the range are in no sum.
func TestStatement(t *testing.T) {
	s, _ := open(t)
	ctx := ctxT(t)
	recs := listFixture()
	recs = append(recs, listed{"p-001", "b2", 30 * time.Minute, cellside.StateDeclined, cellpayv1.PaymentType_CARD_AUTHORIZATION, 5, "GBP"})
	writeListed(t, s, recs)
	got, err := s.Statement(ctx, "p-001", t0, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	auth, capture := cellpayv1.PaymentType_CARD_AUTHORIZATION, cellpayv1.PaymentType_CAPTURE
	want := []StatementLine{
		{auth, cellside.StateApproved, "EUR", 1, 700},
		{auth, cellside.StateApproved, "GBP", 1, 1250},
		{auth, cellside.StateDeclined, "GBP", 2, 305},
		{auth, cellside.StateFailed, "GBP", 1, 60},
		{auth, cellside.StateSending, "GBP", 1, 50},
		{capture, cellside.StateApproved, "GBP", 1, 1000},
	}
	key := func(l StatementLine) string { return l.Type.String() + "/" + string(l.State) + "/" + l.Currency }
	slices.SortFunc(got, func(a, b StatementLine) int { return strings.Compare(key(a), key(b)) })
	slices.SortFunc(want, func(a, b StatementLine) int { return strings.Compare(key(a), key(b)) })
	if !slices.Equal(got, want) {
		t.Fatalf("statement\n got %+v\nwant %+v", got, want)
	}
	if got, err := s.Statement(ctx, "p-001", t0.Add(time.Hour), t0.Add(2*time.Hour)); err != nil || len(got) != 1 || got[0].Amount != 100 {
		t.Fatalf("the next hour: %+v, %v; want the record at its start alone", got, err)
	}
}
