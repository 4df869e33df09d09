package benchrun

import (
	"fmt"
	"math"
	"slices"
)

// Stats summarises one variant's samples of one metric.
type Stats struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Q1     float64 `json:"q1"`
	Q3     float64 `json:"q3"`
	// IQR is Q3 - Q1.
	IQR float64 `json:"iqr"`
}

// statsOf summarises values (not modified); the zero Stats when empty.
func statsOf(values []float64) Stats {
	if len(values) == 0 {
		return Stats{}
	}
	s := slices.Clone(values)
	slices.Sort(s)
	q1, q3 := quantile(s, 0.25), quantile(s, 0.75)
	return Stats{N: len(s), Median: quantile(s, 0.5), Min: s[0], Max: s[len(s)-1], Q1: q1, Q3: q3, IQR: q3 - q1}
}

// quantile is the p-quantile (0 <= p <= 1) of a sorted, non-empty slice by
// linear interpolation between the closest ranks (R's type 7, numpy's
// default): at p = 0.5 it is the usual median.
func quantile(sorted []float64, p float64) float64 {
	h := p * float64(len(sorted)-1)
	lo := int(math.Floor(h))
	if lo >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// Verdict is the outcome of comparing a variant with the baseline.
type Verdict int

// Verdicts.
const (
	// Same: the ranges overlap; no difference is claimed.
	Same Verdict = iota
	// TooFew: the ranges may not overlap, but so few samples would not
	// overlap by chance too often to claim a difference.
	TooFew
	// Higher: every sample of the variant is above every sample of the
	// baseline.
	Higher
	// Lower: every sample of the variant is below every sample of the
	// baseline.
	Lower
)

// maxFalseClaim is the largest chance, for identical distributions, of the
// range rule claiming a difference that is accepted.
const maxFalseClaim = 0.05

// compare applies the range rule to a variant's stats against the
// baseline's; both need samples.
func compare(base, v Stats) Verdict {
	if falseClaimChance(base.N, v.N) > maxFalseClaim {
		return TooFew
	}
	switch {
	case v.Min > base.Max:
		return Higher
	case v.Max < base.Min:
		return Lower
	}
	return Same
}

// falseClaimChance is the chance that n samples and m samples of one
// continuous distribution have disjoint ranges: of the C(n+m, n) equally
// likely orders of the pooled samples, two put one group wholly first.
func falseClaimChance(n, m int) float64 {
	c := 1.0 // C(n+m, n), built as a product of ratios to stay exact enough
	for i := 1; i <= n; i++ {
		c = c * float64(m+i) / float64(i)
	}
	return min(1, 2/c)
}

// text is the verdict in words for a metric of kind k.
func (v Verdict) text(k Kind, baseN, n int) string {
	higher, lower := k.words()
	switch v {
	case Higher:
		return higher
	case Lower:
		return lower
	case TooFew:
		return fmt.Sprintf("no difference (too few samples to claim one: %d and %d)", baseN, n)
	}
	return "no difference (inside the spread)"
}

// changePct is the change from base to v in percent; NaN when base is 0.
func changePct(base, v float64) float64 {
	if base == 0 {
		return math.NaN()
	}
	return (v - base) / math.Abs(base) * 100
}

// MarshalText spells v in JSON.
func (v Verdict) MarshalText() ([]byte, error) {
	switch v {
	case Same:
		return []byte("same"), nil
	case TooFew:
		return []byte("too-few"), nil
	case Higher:
		return []byte("higher"), nil
	case Lower:
		return []byte("lower"), nil
	}
	return nil, fmt.Errorf("benchrun: unknown verdict %d", int(v))
}

// UnmarshalText reads what MarshalText writes.
func (v *Verdict) UnmarshalText(b []byte) error {
	for _, w := range []Verdict{Same, TooFew, Higher, Lower} {
		if t, _ := w.MarshalText(); string(t) == string(b) {
			*v = w
			return nil
		}
	}
	return fmt.Errorf("benchrun: unknown verdict %q", b)
}

// MetricSummary is one metric across the variants.
type MetricSummary struct {
	Metric
	// Variants are the variants that have samples of the metric, in the
	// order given.
	Variants []VariantStats `json:"variants"`
	// Comparisons compare each other variant with the baseline, the
	// first variant, when both have samples.
	Comparisons []Comparison `json:"comparisons,omitempty"`
}

// VariantStats is one variant's Stats of a metric.
type VariantStats struct {
	Variant string `json:"variant"`
	Stats
}

// Comparison is a variant against the baseline on one metric.
type Comparison struct {
	Variant  string `json:"variant"`
	Baseline string `json:"baseline"`
	// ChangePct is the change of the median from the baseline's, in
	// percent; nil when the baseline's median is 0.
	ChangePct *float64 `json:"change_pct,omitempty"`
	Verdict   Verdict  `json:"verdict"`
	// Text is the verdict in words: "no difference (...)", or a direction
	// word for the metric's kind ("slower", "cheaper", "higher (better)").
	Text string `json:"text"`
}

// summarize gathers the samples of the successful records by metric and
// variant and compares every variant with variants[0].
func summarize(records []Record, variants []string) []MetricSummary {
	var order []Metric
	values := map[Metric]map[string][]float64{}
	for _, rec := range records {
		if rec.Err != "" {
			continue
		}
		for _, s := range rec.Samples {
			byVariant := values[s.Metric]
			if byVariant == nil {
				byVariant = map[string][]float64{}
				values[s.Metric] = byVariant
				order = append(order, s.Metric)
			}
			byVariant[rec.Variant] = append(byVariant[rec.Variant], s.Value)
		}
	}
	out := make([]MetricSummary, 0, len(order))
	for _, m := range order {
		ms := MetricSummary{Metric: m}
		stats := map[string]Stats{}
		for _, v := range variants {
			if vals := values[m][v]; len(vals) > 0 {
				stats[v] = statsOf(vals)
				ms.Variants = append(ms.Variants, VariantStats{Variant: v, Stats: stats[v]})
			}
		}
		base, ok := stats[variants[0]]
		for _, v := range variants[1:] {
			st, has := stats[v]
			if !ok || !has {
				continue
			}
			verdict := compare(base, st)
			c := Comparison{Variant: v, Baseline: variants[0], Verdict: verdict, Text: verdict.text(KindOf(m), base.N, st.N)}
			if pct := changePct(base.Median, st.Median); !math.IsNaN(pct) {
				c.ChangePct = &pct
			}
			ms.Comparisons = append(ms.Comparisons, c)
		}
		out = append(out, ms)
	}
	return out
}
