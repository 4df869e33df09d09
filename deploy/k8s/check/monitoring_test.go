package check

import (
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestMonitoringChecksCatch feeds broken monitoring to the checks: leaky or
// missing scrape policies, a cell's Prometheus that looks beyond its
// namespace, a global one that scrapes cells, wrong labels, a lost monitor,
// and cert-manager's scrape lost, mislabelled or opened too wide.
func TestMonitoringChecksCatch(t *testing.T) {
	base := renderAll(t, deployDir)
	cases := []struct {
		name   string
		add    []Object
		drop   string // "Kind ns/name" of an object to remove
		change string // "Kind ns/name" of an object to change with edit
		edit   func(runtime.Object)
		wants  []string
	}{
		{
			name: "a cell's metrics port open to its whole namespace",
			add: []Object{policy(t, "cell-a", "metadata: {name: scrape-any}\nspec:\n  podSelector: {matchLabels: {app.kubernetes.io/name: cell}}\n"+
				"  ingress: [{from: [{podSelector: {}}], ports: [{port: 9081}]}]\n")},
			wants: []string{"cell-a/cell admits cell-a/intruder on 9081/TCP"},
		},
		{
			name: "the scrape admitted by Prometheus's labels from any namespace",
			add: []Object{policy(t, "cell-b", "metadata: {name: scrape-any-ns}\nspec:\n  podSelector: {matchLabels: {cnpg.io/cluster: postgres}}\n"+
				"  ingress: [{from: [{namespaceSelector: {}, podSelector: {matchLabels: {app.kubernetes.io/name: prometheus}}}], ports: [{port: 9187}]}]\n")},
			wants: []string{"cell-b/postgres admits cell-a/prometheus-cell on 9187/TCP", "cell-b/postgres admits default/spoofed-cell-prometheus on 9187/TCP",
				"cell-b/postgres admits cellpay-monitoring/prometheus-global on 9187/TCP"},
		},
		{
			name: "a cell's Prometheus may send anywhere",
			add: []Object{policy(t, "cell-c", "metadata: {name: prom-out}\nspec:\n  podSelector: {matchLabels: {app.kubernetes.io/name: prometheus}}\n"+
				"  policyTypes: [Egress]\n  egress: [{}]\n")},
			wants: []string{"cell-c/prometheus-cell may send to cellpay-nats/nats on 4222/TCP", "cell-c/prometheus-cell may send to cell-c/cell on 7081/TCP"},
		},
		{
			name:  "a cell's Prometheus shut in",
			drop:  "NetworkPolicy cell-b/prometheus-egress",
			wants: []string{"cell-b/prometheus-cell cannot scrape cell-b/cell on 9081/TCP", "cell-b/prometheus-cell cannot scrape cell-b/postgres on 9187/TCP", "cell-b/prometheus-cell cannot remote-write"},
		},
		{
			name:  "the global Prometheus shut out",
			drop:  "NetworkPolicy cellpay-monitoring/prometheus-ingress",
			wants: []string{"cell-a/prometheus-cell cannot remote-write to cellpay-monitoring/prometheus-global"},
		},
		{
			name:  "the global Prometheus open to everyone",
			add:   []Object{policy(t, "cellpay-monitoring", "metadata: {name: open}\nspec: {podSelector: {}, ingress: [{}]}\n")},
			wants: []string{"cellpay-monitoring/prometheus-global admits default/spoofed-cell-prometheus on 9090/TCP", "cellpay-monitoring/prometheus-global admits cell-a/cell on 9090/TCP"},
		},
		{
			name: "the global Prometheus scrapes a cell",
			add: []Object{policy(t, "cellpay-monitoring", "metadata: {name: to-cells}\nspec:\n  podSelector: {}\n"+
				"  policyTypes: [Egress]\n  egress: [{to: [{namespaceSelector: {matchLabels: {cellpay.io/role: cell}}}], ports: [{port: 9081}]}]\n")},
			wants: []string{"cellpay-monitoring/prometheus-global may send to cell-a/cell on 9081/TCP"},
		},
		{
			name:  "the GTR's metrics port open to everyone",
			add:   []Object{policy(t, "cellpay-gtr", "metadata: {name: metrics-open}\nspec: {podSelector: {}, ingress: [{ports: [{port: 9070}]}]}\n")},
			wants: []string{"cellpay-gtr/gtr admits default/spoofed-global-prometheus on 9070/TCP"},
		},
		{
			name:   "a cell's Prometheus discovers every namespace's PodMonitors",
			change: "Prometheus cell-a/cell",
			edit: func(o runtime.Object) {
				o.(*monitoringv1.Prometheus).Spec.PodMonitorNamespaceSelector = &metav1.LabelSelector{}
			},
			wants: []string{"Prometheus cell-a/cell: podMonitorNamespaceSelector is set"},
		},
		{
			name:   "the global Prometheus discovers the cells' PodMonitors",
			change: "Prometheus cellpay-monitoring/global",
			edit: func(o runtime.Object) {
				o.(*monitoringv1.Prometheus).Spec.PodMonitorNamespaceSelector = &metav1.LabelSelector{}
			},
			wants: []string{"discovers PodMonitors in cell cell-b"},
		},
		{
			name:   "the GTR's scrape without its relabelings",
			change: "PodMonitor cellpay-gtr/gtr",
			edit: func(o runtime.Object) {
				o.(*monitoringv1.PodMonitor).Spec.PodMetricsEndpoints[0].RelabelConfigs = nil
			},
			wants: []string{`cellpay-gtr/gtr-backup is scraped as job="cellpay-gtr/gtr" access_point=""`},
		},
		{
			name:   "remote write elsewhere",
			change: "Prometheus cell-b/cell",
			edit: func(o runtime.Object) {
				o.(*monitoringv1.Prometheus).Spec.RemoteWrite[0].URL = "http://prometheus.cellpay-gtr.svc:9090/api/v1/write"
			},
			wants: []string{"Prometheus cell-b/cell: remote write http://prometheus.cellpay-gtr.svc:9090/api/v1/write: not a Service of cellpay-monitoring"},
		},
		{
			name:   "no remote-write receiver",
			change: "Prometheus cellpay-monitoring/global",
			edit: func(o runtime.Object) {
				o.(*monitoringv1.Prometheus).Spec.EnableRemoteWriteReceiver = false
			},
			wants: []string{"enableRemoteWriteReceiver is off"},
		},
		{
			name:  "a cell's Postgres not scraped",
			drop:  "PodMonitor cell-c/postgres",
			wants: []string{"Prometheus cell-c/cell: scrapes cell-c/postgres through 0 endpoints"},
		},
		{
			name:  "cert-manager not scraped",
			drop:  "PodMonitor cellpay-monitoring/cert-manager",
			wants: []string{"Prometheus cellpay-monitoring/global: scrapes cert-manager/cert-manager through 0 endpoints, want one"},
		},
		{
			name:   "cert-manager's scrape without honorLabels",
			change: "PodMonitor cellpay-monitoring/cert-manager",
			edit: func(o runtime.Object) {
				o.(*monitoringv1.PodMonitor).Spec.PodMetricsEndpoints[0].HonorLabels = false
			},
			wants: []string{"PodMonitor cellpay-monitoring/cert-manager: scrapes cert-manager/cert-manager without honorLabels"},
		},
		{
			name:   "the global Prometheus overrides honorLabels",
			change: "Prometheus cellpay-monitoring/global",
			edit: func(o runtime.Object) {
				o.(*monitoringv1.Prometheus).Spec.OverrideHonorLabels = true
			},
			wants: []string{"scrapes cert-manager/cert-manager without honorLabels"},
		},
		{
			name:   "cert-manager's scrape without its job",
			change: "PodMonitor cellpay-monitoring/cert-manager",
			edit: func(o runtime.Object) {
				o.(*monitoringv1.PodMonitor).Spec.PodMetricsEndpoints[0].RelabelConfigs = nil
			},
			wants: []string{`PodMonitor cellpay-monitoring/cert-manager: job of cert-manager/cert-manager is "cellpay-monitoring/cert-manager", want "cert-manager"`},
		},
		{
			// The operator then holds every PodMonitor to its own namespace.
			name:   "the global Prometheus ignores namespace selectors",
			change: "Prometheus cellpay-monitoring/global",
			edit: func(o runtime.Object) {
				o.(*monitoringv1.Prometheus).Spec.IgnoreNamespaceSelectors = true
			},
			wants: []string{"Prometheus cellpay-monitoring/global: scrapes cert-manager/cert-manager through 0 endpoints"},
		},
		{
			name:   "cert-manager's PodMonitor reaching into every namespace",
			change: "PodMonitor cellpay-monitoring/cert-manager",
			edit: func(o runtime.Object) {
				m := o.(*monitoringv1.PodMonitor)
				m.Spec.NamespaceSelector = monitoringv1.NamespaceSelector{Any: true}
				m.Spec.Selector = metav1.LabelSelector{}
				m.Spec.PodMetricsEndpoints[0].Port = new("metrics")
			},
			wants: []string{"Prometheus cellpay-monitoring/global: scrapes cell-b/cell through PodMonitor cellpay-monitoring/cert-manager, whose scrape is its cell's Prometheus's",
				"Prometheus cellpay-monitoring/global: scrapes cert-manager/cert-manager through 0 endpoints"},
		},
		{
			name:   "the global Prometheus shut out of cert-manager",
			change: "NetworkPolicy cellpay-monitoring/prometheus-egress",
			edit: func(o runtime.Object) {
				p := o.(*networkingv1.NetworkPolicy)
				p.Spec.Egress = slices.DeleteFunc(p.Spec.Egress, func(r networkingv1.NetworkPolicyEgressRule) bool {
					return len(r.Ports) == 1 && r.Ports[0].Port.IntValue() == 9402
				})
			},
			wants: []string{"cellpay-monitoring/prometheus-global cannot scrape cert-manager/cert-manager on 9402/TCP"},
		},
		{
			name: "the global Prometheus's egress open to cert-manager's whole namespace",
			add: []Object{policy(t, "cellpay-monitoring", "metadata: {name: to-cert-manager}\nspec:\n  podSelector: {}\n"+
				"  policyTypes: [Egress]\n  egress: [{to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: cert-manager}}}], ports: [{port: 9402}]}]\n")},
			wants: []string{"cellpay-monitoring/prometheus-global may send to cert-manager/cert-manager-webhook on 9402/TCP",
				"cellpay-monitoring/prometheus-global may send to cert-manager/cert-manager-cainjector on 9402/TCP"},
		},
		{
			name: "cert-manager's controller admitted by its labels in any namespace",
			add: []Object{policy(t, "cellpay-monitoring", "metadata: {name: to-cert-manager}\nspec:\n  podSelector: {}\n  policyTypes: [Egress]\n"+
				"  egress: [{to: [{namespaceSelector: {}, podSelector: {matchLabels: {app.kubernetes.io/name: cert-manager}}}], ports: [{port: http-metrics}]}]\n")},
			wants: []string{"cellpay-monitoring/prometheus-global may send to default/spoofed-cert-manager on 9402/TCP"},
		},
		{
			name: "cert-manager's controller on every port",
			add: []Object{policy(t, "cellpay-monitoring", "metadata: {name: to-cert-manager}\nspec:\n  podSelector: {}\n  policyTypes: [Egress]\n"+
				"  egress: [{to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: cert-manager}}, podSelector: {matchLabels: {app.kubernetes.io/component: controller}}}]}]\n")},
			wants: []string{"cellpay-monitoring/prometheus-global may send to cert-manager/cert-manager on 9403/TCP"},
		},
		{
			name: "a cell's Prometheus scrapes cert-manager",
			add: []Object{policy(t, "cell-a", "metadata: {name: to-cert-manager}\nspec:\n  podSelector: {matchLabels: {app.kubernetes.io/name: prometheus}}\n  policyTypes: [Egress]\n"+
				"  egress: [{to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: cert-manager}}}], ports: [{port: 9402}]}]\n")},
			wants: []string{"cell-a/prometheus-cell may send to cert-manager/cert-manager on 9402/TCP"},
		},
		{
			name:  "a cell without its Prometheus",
			drop:  "Prometheus cell-a/cell",
			wants: []string{"cell-a: no Prometheus cell"},
		},
		{
			name:  "a cell without its rules",
			drop:  "PrometheusRule cell-b/cellpay-cell",
			wants: []string{"Prometheus cell-b/cell: evaluates 0 PrometheusRules labelled cellpay.io/rules=cell in cell-b"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var objs []Object
			for _, o := range base {
				switch o.String() {
				case c.drop:
					continue
				case c.change:
					o.Typed = o.Typed.DeepCopyObject()
					c.edit(o.Typed)
				}
				objs = append(objs, o)
			}
			got := strings.Join(Check(append(objs, c.add...)), "\n")
			for _, w := range c.wants {
				if !strings.Contains(got, w) {
					t.Errorf("no violation containing %q; got:\n%s", w, got)
				}
			}
		})
	}
}

// TestRelabel holds the relabel evaluator to Prometheus's semantics for
// replace: default regex (.*) and replacement $1, anchored, empty result
// deletes, and refuses an action it does not know.
func TestRelabel(t *testing.T) {
	s := func(x string) *string { return &x }
	l, err := relabel(map[string]string{"job": "ns/m", "__meta_x": "primary", "a": "1"}, []monitoringv1.RelabelConfig{
		{TargetLabel: "job", Replacement: s("cellpay-gtr")},
		{SourceLabels: []monitoringv1.LabelName{"__meta_x"}, TargetLabel: "access_point"},
		{SourceLabels: []monitoringv1.LabelName{"__meta_x"}, Regex: "prim", TargetLabel: "nomatch"},
		{SourceLabels: []monitoringv1.LabelName{"__meta_missing"}, TargetLabel: "a"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if l["job"] != "cellpay-gtr" || l["access_point"] != "primary" || l["nomatch"] != "" || l["a"] != "" || l["__meta_x"] != "" {
		t.Errorf("relabel gave %v", l)
	}
	if _, err := relabel(map[string]string{}, []monitoringv1.RelabelConfig{{Action: "labelmap", Regex: "(.*)"}}); err == nil {
		t.Error("labelmap accepted")
	}
}
