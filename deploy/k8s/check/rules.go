package check

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"
)

// The alert rules (deploy/monitoring/rules/cellpay.rules.yaml) ship as two
// PrometheusRules, generated from that file and never edited by hand
// (TestPrometheusRules keeps them equal; -update rewrites them):
//
//   - the cell's (base/cell/rules.yaml), evaluated by each cell's own
//     Prometheus: the rules every series of which a cell or its Postgres
//     exports, so that a cell alerts on itself with the global Prometheus
//     away;
//   - the platform's (base/monitoring/rules.yaml), evaluated by the global
//     Prometheus: every other rule (the GTR's metrics, up, cert-manager's).
//
// A group keeps its name, interval and order on both sides; a side with
// none of a group's rules does not have the group.
const (
	// RulesFile is the rules file, relative to deploy/k8s.
	RulesFile = "../monitoring/rules/cellpay.rules.yaml"
	// RulesLabel is the label by which each Prometheus selects its rules.
	RulesLabel = "cellpay.io/rules"
	// MonitoringNamespace holds the global Prometheus.
	MonitoringNamespace = "cellpay-monitoring"
)

// cellMetricPrefixes are the series a cell's own Prometheus scrapes: the
// cell's (cmd/cell: its own instruments and refsync's), and its Postgres
// instances' exporter's (CloudNativePG's collector, and the Barman Cloud
// plugin's backup metrics through it). A rule naming only these is the
// cell's.
var cellMetricPrefixes = []string{"cellpay_cell_", "cellpay_refdata_", "cnpg_collector_", "barman_cloud_cloudnative_pg_io_"}

// RuleFiles are the generated PrometheusRules: path (relative to
// deploy/k8s), name, namespace ("" for the overlay's) and RulesLabel value.
var RuleFiles = []struct{ Path, Name, Namespace, Side string }{
	{"base/cell/rules.yaml", "cellpay-cell", "", "cell"},
	{"base/monitoring/rules.yaml", "cellpay-platform", MonitoringNamespace, "platform"},
}

type rulesFile struct {
	Groups []monitoringv1.RuleGroup `json:"groups"`
}

// SplitRules reads a Prometheus rules file strictly and splits its groups'
// rules into the cell's and the platform's.
func SplitRules(data []byte) (cell, platform monitoringv1.PrometheusRuleSpec, err error) {
	var f rulesFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return cell, platform, fmt.Errorf("check: rules: %w", err)
	}
	for _, g := range f.Groups {
		c, p := g, g
		c.Rules, p.Rules = nil, nil
		for _, r := range g.Rules {
			metrics := ExprMetrics(r.Expr.String())
			if len(metrics) == 0 {
				return cell, platform, fmt.Errorf("check: rules: %s/%s%s: names no metric", g.Name, r.Alert, r.Record)
			}
			if cellOnly(metrics) {
				c.Rules = append(c.Rules, r)
			} else {
				p.Rules = append(p.Rules, r)
			}
		}
		if len(c.Rules) > 0 {
			cell.Groups = append(cell.Groups, c)
		}
		if len(p.Rules) > 0 {
			platform.Groups = append(platform.Groups, p)
		}
	}
	return cell, platform, nil
}

func cellOnly(metrics []string) bool {
	for _, m := range metrics {
		ok := false
		for _, p := range cellMetricPrefixes {
			ok = ok || strings.HasPrefix(m, p)
		}
		if !ok {
			return false
		}
	}
	return true
}

var (
	exprStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	exprMatchers  = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	exprGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	exprNumbers   = regexp.MustCompile(`\b[0-9][A-Za-z0-9_.]*`)
	exprIdent     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*\s*\(?`)
	exprNotMetric = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true, "Inf": true, "NaN": true}
)

// ExprMetrics returns the metric names a PromQL expression selects, sorted:
// the identifiers left once strings, label matchers, ranges and grouping
// clauses (and numbers, durations) are taken out, other than functions (followed by "(") and
// keywords. It is a lexer, not a parser: enough for the rules file, whose
// expressions promtool checks.
func ExprMetrics(expr string) []string {
	s := exprStrings.ReplaceAllString(expr, " ")
	s = exprMatchers.ReplaceAllString(s, " ")
	s = exprGrouping.ReplaceAllString(s, " ")
	s = exprNumbers.ReplaceAllString(s, " ")
	seen := map[string]bool{}
	for _, m := range exprIdent.FindAllString(s, -1) {
		name := strings.TrimSpace(m)
		if strings.HasSuffix(name, "(") || exprNotMetric[name] {
			continue
		}
		seen[name] = true
	}
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

type promRuleDoc struct {
	APIVersion string                          `json:"apiVersion"`
	Kind       string                          `json:"kind"`
	Metadata   promRuleMeta                    `json:"metadata"`
	Spec       monitoringv1.PrometheusRuleSpec `json:"spec"`
}

type promRuleMeta struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace,omitempty"`
	Labels    map[string]string `json:"labels"`
}

// RuleManifests generates the PrometheusRules of RuleFiles from the rules
// file's content, keyed by path.
func RuleManifests(rules []byte) (map[string][]byte, error) {
	cell, platform, err := SplitRules(rules)
	if err != nil {
		return nil, err
	}
	specs := map[string]monitoringv1.PrometheusRuleSpec{"cell": cell, "platform": platform}
	out := map[string][]byte{}
	for _, f := range RuleFiles {
		doc := promRuleDoc{
			APIVersion: monitoringv1.SchemeGroupVersion.String(), Kind: monitoringv1.PrometheusRuleKind,
			Metadata: promRuleMeta{Name: f.Name, Namespace: f.Namespace, Labels: map[string]string{
				RulesLabel: f.Side, NameLabel: "cellpay", "app.kubernetes.io/part-of": "cellpay"}},
			Spec: specs[f.Side],
		}
		body, err := yaml.Marshal(doc)
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, "# Generated from deploy/monitoring/rules/cellpay.rules.yaml: the %s's rules\n", f.Side)
		b.WriteString("# (deploy/k8s/check/rules.go says which). Do not edit: change the rules\n")
		b.WriteString("# file, then in deploy/k8s/check: go test -run TestPrometheusRules -update\n")
		b.Write(body)
		out[f.Path] = b.Bytes()
	}
	return out, nil
}

func yamlStrict(data []byte, v any) error { return yaml.UnmarshalStrict(data, v) }
