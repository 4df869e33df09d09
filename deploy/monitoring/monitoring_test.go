// Package monitoring_test checks the alert rules and dashboards in this
// directory against the metrics the code exports, so that renaming an
// instrument cannot leave a rule that never fires or a dead panel.
//
// The names come from the Go sources, not a scrape: every instrument is
// created by a call of the form m.Int64Counter("cellpay.x.y", ...) (or
// Float64Histogram, Int64ObservableGauge, ...), with its unit, if any, in a
// metric.WithUnit on the same line. The test finds those calls, translates
// each to the names Prometheus sees (the exporter's
// UnderscoreEscapingWithSuffixes strategy, internal/telemetry), adds the
// gauges natsmon describes with prometheus.NewDesc("name", ...) (as they
// are: they take prometheus-nats-exporter's names), and compares the
// result with metrics.txt, the committed list (go test -update rewrites
// it). A call spelled another way (a name in a variable, the unit on the
// next line) fails the count check below instead of going unseen.
package monitoring_test

import (
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

var update = flag.Bool("update", false, "rewrite metrics.txt from the Go sources")

// external are metrics the rules use that Cellpay does not export: each
// with who does.
var external = map[string]string{
	"up": "Prometheus, for every scrape target",
	"certmanager_certificate_expiration_timestamp_seconds": "cert-manager",
	// The storage alerts' (Kubernetes only): the kubelet's (job kubelet),
	// and a cell's Postgres instances' exporter's (job cellpay-postgres).
	"kubelet_volume_stats_available_bytes":                           "the kubelet",
	"kubelet_volume_stats_capacity_bytes":                            "the kubelet",
	"cnpg_collector_pg_wal_archive_status":                           "CloudNativePG's instance manager",
	"barman_cloud_cloudnative_pg_io_last_available_backup_timestamp": "the Barman Cloud plugin, through CloudNativePG's instance manager",
}

var (
	// An instrument's creation: kind and name, and a unit if on the line.
	instrumentRe = regexp.MustCompile(`\.(Int64|Float64)(Observable)?(Counter|UpDownCounter|Histogram|Gauge)\("(cellpay\.[a-z0-9_.]+)"(.*metric\.WithUnit\("([^"]+)"\))?`)
	// Anything that looks like one, to catch a call the pattern misses.
	looseRe = regexp.MustCompile(`\.(Int64|Float64)\w*\(\s*"cellpay\.`)
	// A client_golang metric's description (natsmon's gauges, named as
	// prometheus-nats-exporter names them): the name as it is exported.
	descRe      = regexp.MustCompile(`prometheus\.NewDesc\("([a-zA-Z_:][a-zA-Z0-9_:]*)"`)
	looseDescRe = regexp.MustCompile(`prometheus\.NewDesc\(`)
)

// promUnits are the unit suffixes the exporter adds for the units the code
// uses.
var promUnits = map[string]string{"s": "seconds", "ms": "milliseconds", "By": "bytes", "1": "ratio"}

// exported returns the Prometheus names of every instrument in the
// module's non-test Go sources.
func exported(t *testing.T) []string {
	t.Helper()
	root := filepath.Join("..", "..")
	var names []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "tools") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		found := instrumentRe.FindAllStringSubmatch(src, -1)
		if loose := len(looseRe.FindAllString(src, -1)); loose != len(found) {
			t.Errorf("%s: %d instrument calls, %d in a form this test reads (name as a literal, unit on the same line)", path, loose, len(found))
		}
		for _, m := range found {
			names = append(names, promNames(t, path, m[3], m[4], m[6])...)
		}
		descs := descRe.FindAllStringSubmatch(src, -1)
		if loose := len(looseDescRe.FindAllString(src, -1)); loose != len(descs) {
			t.Errorf("%s: %d prometheus.NewDesc calls, %d with the name as a literal on the same line", path, loose, len(descs))
		}
		for _, m := range descs {
			names = append(names, m[1]) // gauges: no suffix
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// promNames translates one instrument to the series names it exports.
func promNames(t *testing.T, path, kind, name, unit string) []string {
	base := strings.ReplaceAll(name, ".", "_")
	if unit != "" {
		suffix, ok := promUnits[unit]
		if !ok {
			t.Errorf("%s: %s: unit %q: add its Prometheus suffix to promUnits", path, name, unit)
		}
		base += "_" + suffix
	}
	switch kind {
	case "Counter":
		return []string{base + "_total"}
	case "Histogram":
		return []string{base + "_bucket", base + "_count", base + "_sum"}
	}
	return []string{base} // gauges and up-down counters
}

func TestMetricsList(t *testing.T) {
	got := strings.Join(exported(t), "\n") + "\n"
	if *update {
		if err := os.WriteFile("metrics.txt", []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		code, list := strings.Fields(got), strings.Fields(string(want))
		var gone, added []string
		for _, n := range list {
			if !slices.Contains(code, n) {
				gone = append(gone, n)
			}
		}
		for _, n := range code {
			if !slices.Contains(list, n) {
				added = append(added, n)
			}
		}
		t.Errorf("metrics.txt is not the list the code exports: run go test ./deploy/monitoring -update, then fix the rules and dashboards\nin metrics.txt, not in the code: %q\nin the code, not in metrics.txt: %q", gone, added)
	}
}

// known reads metrics.txt and adds the external names.
func known(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	k := map[string]bool{}
	for _, n := range strings.Fields(string(b)) {
		k[n] = true
	}
	for n := range external {
		k[n] = true
	}
	return k
}

var (
	quotedRe = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	// What is not a metric name: label matchers, ranges and the label
	// lists of by, without, on, ignoring and the group modifiers.
	matchersRe  = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	labelListRe = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// A number or a duration (5m, 1e3), taken whole so that its unit is
	// not read as a name, or an identifier and whether a call follows.
	identRe     = regexp.MustCompile(`[0-9][0-9a-zA-Z_.]*|[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	labelValsRe = regexp.MustCompile(`^\s*label_values\(\s*([^,)]+)`)
	// Words of PromQL that stand alone.
	keywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true}
)

// metricNames returns the metric names an expression selects: every
// identifier that is not a function, a keyword, a label or inside a label
// matcher or a range. Grafana's label_values(metric, label) names its
// first argument.
func metricNames(expr string) []string {
	if m := labelValsRe.FindStringSubmatch(expr); m != nil {
		expr = m[1]
	}
	expr = quotedRe.ReplaceAllString(expr, `""`)
	expr = matchersRe.ReplaceAllString(expr, " ")
	expr = labelListRe.ReplaceAllString(expr, " ")
	var names []string
	for _, id := range identRe.FindAllString(expr, -1) {
		if id[0] >= '0' && id[0] <= '9' || strings.HasSuffix(id, "(") || keywords[strings.ToLower(id)] {
			continue // a number, a function or an aggregation, a keyword
		}
		names = append(names, id)
	}
	return names
}

// checkExpr reports each metric name in expr that nothing exports, and an
// expression that names none.
func checkExpr(t *testing.T, where, expr string, k map[string]bool) {
	t.Helper()
	names := metricNames(expr)
	if len(names) == 0 {
		t.Errorf("%s: %q names no metric", where, expr)
	}
	for _, n := range names {
		if !k[n] {
			t.Errorf("%s: metric %s is not exported (metrics.txt): %q", where, n, expr)
		}
	}
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up == 0`, []string{"up"}},
		{`max by (cell) (cellpay_gtr_cell_health_share) == 0`, []string{"cellpay_gtr_cell_health_share"}},
		{`sum by (le, method) (rate(cellpay_cell_issuer_duration_seconds_bucket{cell="$cell",method=~"a|b"}[$__rate_interval]))`,
			[]string{"cellpay_cell_issuer_duration_seconds_bucket"}},
		{`a / scalar(sum(rate(b[5m])) + sum(rate(c_total[5m]))) > 0.01 and on (x) d offset 5m`, []string{"a", "b", "c_total", "d"}},
		{`certmanager_certificate_expiration_timestamp_seconds - time() < 14 * 86400`, []string{"certmanager_certificate_expiration_timestamp_seconds"}},
		{`cellpy_gtr_transactions_total`, []string{"cellpy_gtr_transactions_total"}}, // a typo is a name, and unknown
		{`label_values(cellpay_cell_transactions_total, cell)`, []string{"cellpay_cell_transactions_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(x_bucket[1m])))`, []string{"x_bucket"}},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func TestRulesNameExportedMetrics(t *testing.T) {
	k := known(t)
	b, err := os.ReadFile(filepath.Join("rules", "cellpay.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join("rules", "cellpay.rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			n++
			where := g.Name + "/" + r.Alert
			checkExpr(t, where, r.Expr, k)
			if r.Alert == "" {
				continue
			}
			if r.For == "" {
				t.Errorf("%s: no for", where)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", where, s)
			}
			if r.Annotations["summary"] == "" || !strings.Contains(r.Annotations["description"], "Runbook:") {
				t.Errorf("%s: wants a summary and a description with a Runbook:", where)
			}
			if c := strings.Count(string(tests), "alertname: "+r.Alert+"\n"); c < 2 {
				t.Errorf("%s: %d cases in cellpay.rules_test.yaml, want one that fires and one that does not", where, c)
			}
		}
	}
	if n == 0 {
		t.Fatal("no rules")
	}
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"` // a row's
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func TestDashboardsNameExportedMetrics(t *testing.T) {
	k := known(t)
	files, err := filepath.Glob(filepath.Join("dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			UID           string  `json:"uid"`
			Title         string  `json:"title"`
			SchemaVersion int     `json:"schemaVersion"`
			Panels        []panel `json:"panels"`
			Templating    struct {
				List []struct {
					Name  string `json:"name"`
					Query any    `json:"query"`
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 {
			t.Errorf("%s: wants uid, title and schemaVersion", file)
		}
		for _, v := range d.Templating.List {
			if q, ok := v.Query.(map[string]any); ok {
				if s, ok := q["query"].(string); ok {
					checkExpr(t, file+": variable "+v.Name, s, k)
				}
			}
		}
		var walk func([]panel)
		exprs := 0
		walk = func(ps []panel) {
			for _, p := range ps {
				walk(p.Panels)
				if p.Type == "row" {
					continue
				}
				if len(p.Targets) == 0 {
					t.Errorf("%s: panel %q has no query", file, p.Title)
				}
				for _, tg := range p.Targets {
					exprs++
					checkExpr(t, file+": "+p.Title, tg.Expr, k)
				}
			}
		}
		walk(d.Panels)
		if exprs == 0 {
			t.Errorf("%s: no queries", file)
		}
	}
}
