package check

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
)

var update = flag.Bool("update", false, "rewrite the generated PrometheusRules (RuleFiles) from the rules file")

// TestPrometheusRules holds the generated PrometheusRules to the rules file:
// a rule changed there and not here fails, and -update rewrites them.
func TestPrometheusRules(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join(deployDir, RulesFile))
	if err != nil {
		t.Fatal(err)
	}
	want, err := RuleManifests(rules)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range RuleFiles {
		p := filepath.Join(deployDir, f.Path)
		if *update {
			if err := os.WriteFile(p, want[f.Path], 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want[f.Path]) {
			t.Errorf("deploy/k8s/%s is not generated from deploy/monitoring/rules/cellpay.rules.yaml: run go test -run TestPrometheusRules -update in deploy/k8s/check", f.Path)
		}
	}
}

// TestRenderedRulesAreTheRulesFile proves that, as rendered, every cell
// namespace holds the cell's rules and the monitoring namespace the
// platform's, and that together they are the rules file: every rule once,
// none changed, none lost by the split.
func TestRenderedRulesAreTheRulesFile(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join(deployDir, RulesFile))
	if err != nil {
		t.Fatal(err)
	}
	var file rulesFile
	if err := yamlStrict(rules, &file); err != nil {
		t.Fatal(err)
	}
	w := NewWorld(renderAll(t, deployDir))
	specs := map[string]monitoringv1.PrometheusRuleSpec{}
	for _, o := range w.Find(monitoringv1.PrometheusRuleKind, "") {
		pr := o.Typed.(*monitoringv1.PrometheusRule)
		specs[o.Namespace] = pr.Spec
	}
	cell := specs[w.Cells[0]]
	for _, ns := range w.Cells {
		if !reflect.DeepEqual(specs[ns], cell) {
			t.Errorf("%s's PrometheusRule differs from %s's", ns, w.Cells[0])
		}
	}
	platform, ok := specs[MonitoringNamespace]
	if !ok {
		t.Fatalf("no PrometheusRule in %s", MonitoringNamespace)
	}
	n := 0
	for _, g := range file.Groups {
		var merged []monitoringv1.Rule
		for _, side := range []monitoringv1.PrometheusRuleSpec{cell, platform} {
			for _, sg := range side.Groups {
				if sg.Name == g.Name {
					merged = append(merged, sg.Rules...)
				}
			}
		}
		if len(merged) != len(g.Rules) {
			t.Errorf("group %s: %d rules rendered, the file has %d", g.Name, len(merged), len(g.Rules))
			continue
		}
		for _, r := range g.Rules {
			found := 0
			for _, m := range merged {
				if reflect.DeepEqual(m, r) {
					found++
				}
			}
			if found != 1 {
				t.Errorf("group %s: rule %s%s rendered %d times, want once", g.Name, r.Alert, r.Record, found)
			}
			n++
		}
	}
	if len(cell.Groups) == 0 || len(platform.Groups) == 0 {
		t.Errorf("a side has no rules: cell %d groups, platform %d", len(cell.Groups), len(platform.Groups))
	}
	t.Logf("%d rules: cell %d groups, platform %d groups", n, len(cell.Groups), len(platform.Groups))
}

func TestExprMetrics(t *testing.T) {
	for expr, want := range map[string][]string{
		`max by (cell) (cellpay_gtr_cell_health_share) == 0`: {"cellpay_gtr_cell_health_share"},
		`sum by (cell) (rate(cellpay_cell_transactions_total{state="pending"}[10m])) / sum by (cell) (rate(cellpay_cell_transactions_total[10m])) > 0.02`: {"cellpay_cell_transactions_total"},
		`max by (access_point) (up{job="cellpay-gtr"}) == 0`:                                     {"up"},
		`certmanager_certificate_expiration_timestamp_seconds - time() < 14 * 86400`:             {"certmanager_certificate_expiration_timestamp_seconds"},
		`a_total / on(cell) group_left(x) b_total and c unless d offset 5m`:                      {"a_total", "b_total", "c", "d"},
		`sum(rate(x_total{reason=~"partner_.*", y="a}b"}[5m])) / scalar(sum(rate(z_total[5m])))`: {"x_total", "z_total"},
	} {
		if got := ExprMetrics(expr); !reflect.DeepEqual(got, want) {
			t.Errorf("ExprMetrics(%q) = %v, want %v", expr, got, want)
		}
	}
}
