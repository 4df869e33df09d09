package benchrun

import (
	"math"
	"strings"
	"testing"
)

func TestStats(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   []float64
		want Stats
	}{
		{nil, Stats{}},
		{[]float64{7}, Stats{N: 1, Median: 7, Min: 7, Max: 7, Q1: 7, Q3: 7}},
		{[]float64{3, 1, 2}, Stats{N: 3, Median: 2, Min: 1, Max: 3, Q1: 1.5, Q3: 2.5, IQR: 1}},
		{[]float64{4, 1, 3, 2}, Stats{N: 4, Median: 2.5, Min: 1, Max: 4, Q1: 1.75, Q3: 3.25, IQR: 1.5}},
		{[]float64{5, 4, 3, 2, 1}, Stats{N: 5, Median: 3, Min: 1, Max: 5, Q1: 2, Q3: 4, IQR: 2}},
		// numpy.percentile([1, 2, 4, 8, 16, 32], [25, 50, 75]) = 2.5, 6, 14
		{[]float64{32, 16, 8, 4, 2, 1}, Stats{N: 6, Median: 6, Min: 1, Max: 32, Q1: 2.5, Q3: 14, IQR: 11.5}},
	}
	for _, tt := range tests {
		in := append([]float64(nil), tt.in...)
		if got := statsOf(in); got != tt.want {
			t.Errorf("statsOf(%v) = %+v, want %+v", tt.in, got, tt.want)
		}
		for i := range in {
			if in[i] != tt.in[i] {
				t.Fatalf("statsOf sorted its input: %v", in)
			}
		}
	}
}

func TestCompare(t *testing.T) {
	t.Parallel()
	five := func(lo float64) []float64 { return []float64{lo, lo + 1, lo + 2, lo + 3, lo + 4} }
	tests := []struct {
		name       string
		base, v    []float64
		want       Verdict
		wantChance float64
	}{
		{"identical", five(10), five(10), Same, 2.0 / 252},
		{"sharing one value: equal is not beyond", five(10), five(14), Same, 2.0 / 252},
		{"just above", five(10), five(14.000001), Higher, 2.0 / 252},
		{"all above", five(10), five(20), Higher, 2.0 / 252},
		{"all below", five(10), five(0), Lower, 2.0 / 252},
		{"ties of a constant metric", []float64{1, 1, 1, 1, 1}, []float64{1, 1, 1, 1, 1}, Same, 2.0 / 252},
		{"4 a side may claim (2/70)", []float64{1, 2, 3, 4}, []float64{5, 6, 7, 8}, Higher, 2.0 / 70},
		{"3 a side may not (2/20)", []float64{1, 2, 3}, []float64{5, 6, 7}, TooFew, 2.0 / 20},
		{"3 and 5 may (2/56)", []float64{1, 2, 3}, five(10), Higher, 2.0 / 56},
		{"1 a side never", []float64{1}, []float64{9}, TooFew, 1},
		{"7 a side (2/3432)", []float64{1, 2, 3, 4, 5, 6, 7}, []float64{1, 2, 3, 4, 5, 6, 7}, Same, 2.0 / 3432},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, v := statsOf(tt.base), statsOf(tt.v)
			if got := compare(b, v); got != tt.want {
				t.Errorf("compare = %d, want %d", got, tt.want)
			}
			if got := falseClaimChance(b.N, v.N); math.Abs(got-tt.wantChance) > 1e-12 {
				t.Errorf("falseClaimChance(%d, %d) = %v, want %v", b.N, v.N, got, tt.wantChance)
			}
		})
	}
}

func TestVerdictText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		v    Verdict
		k    Kind
		want string
	}{
		{Same, KindTime, "no difference (inside the spread)"},
		{TooFew, KindTime, "no difference (too few samples to claim one: 3 and 3)"},
		{Higher, KindTime, "slower"},
		{Lower, KindTime, "faster"},
		{Higher, KindCost, "costlier"},
		{Lower, KindCost, "cheaper"},
		{Higher, KindRate, "higher (better)"},
		{Lower, KindRate, "lower (worse)"},
		{Higher, KindUnknown, "higher"},
		{Lower, KindUnknown, "lower"},
	}
	for _, tt := range tests {
		if got := tt.v.text(tt.k, 3, 3); got != tt.want {
			t.Errorf("verdict %d kind %d: %q, want %q", tt.v, tt.k, got, tt.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	x, y := Metric{"x", "ms"}, Metric{"only-b", ""}
	rec := func(variant string, run int, err string, samples ...Sample) Record {
		return Record{Variant: variant, Run: run, Err: err, Samples: samples}
	}
	var records []Record
	for i := 1; i <= 5; i++ {
		records = append(records,
			rec("a", i, "", Sample{x, float64(10 + i)}, Sample{MetricWall, 0}),
			rec("b", i, "", Sample{x, float64(20 + i)}, Sample{y, 1}, Sample{MetricWall, 0}))
	}
	records = append(records, rec("a", 6, "exit status 1", Sample{x, 1000}, Sample{Metric{"failed-only", ""}, 1}))
	got := summarize(records, []string{"a", "b"})

	var names []string
	for _, m := range got {
		names = append(names, m.String())
	}
	if strings.Join(names, ",") != "x ms,wall s,only-b" {
		t.Fatalf("metrics %v: want first-seen order, and none from the failed run", names)
	}
	mx := got[0]
	if len(mx.Variants) != 2 || mx.Variants[0].Max != 15 || mx.Variants[0].N != 5 {
		t.Errorf("x: %+v (the failed run's 1000 must not count)", mx.Variants)
	}
	if len(mx.Comparisons) != 1 || mx.Comparisons[0].Verdict != Higher || mx.Comparisons[0].Text != "slower" ||
		mx.Comparisons[0].ChangePct == nil || math.Abs(*mx.Comparisons[0].ChangePct-10.0/13*100) > 1e-9 {
		t.Errorf("x: %+v", mx.Comparisons)
	}
	if c := got[1].Comparisons; len(c) != 1 || c[0].ChangePct != nil || c[0].Verdict != Same {
		t.Errorf("wall, baseline median 0: %+v, want no change in %% and no difference", c)
	}
	if m := got[2]; len(m.Variants) != 1 || m.Variants[0].Variant != "b" || len(m.Comparisons) != 0 {
		t.Errorf("only-b: %+v, want b alone and no comparison", m)
	}
}
