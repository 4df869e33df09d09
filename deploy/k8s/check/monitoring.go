package check

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The jobs the rules and dashboards expect (deploy/monitoring/README.md).
const (
	GTRJob      = "cellpay-gtr"
	CellJob     = "cellpay-cell"
	PostgresJob = "cellpay-postgres"
	// CertManagerJob names cert-manager's controller's scrape; no rule
	// reads it, it only keeps the job stable.
	CertManagerJob = "cert-manager"
)

// CheckMonitoring checks the monitoring's objects, cell-local first (the
// paths between them are CheckScrape's, the rules' content
// TestPrometheusRules's):
//
//   - every cell namespace has its Prometheus, which discovers PodMonitors
//     and PrometheusRules of its own namespace only (no namespace
//     selector, no ServiceMonitor, Probe, ScrapeConfig or additional
//     scrape config), scrapes its cell's pods on the port the cell serves
//     /metrics at (job cellpay-cell) and its Postgres instances' exporter
//     (job cellpay-postgres, cell = the namespace), evaluates the cell's
//     PrometheusRule, and remote-writes, as one replica, to the global
//     Prometheus's Service;
//   - the global Prometheus receives remote writes, discovers PodMonitors
//     in the GTR's namespace and in no cell's, scrapes every GTR pod on
//     the port the GTR serves /metrics at, as job cellpay-gtr with
//     access_point from the pod's label, scrapes cert-manager's controller
//     (and so no other of its pods) on its http-metrics port as job
//     cert-manager with honorLabels, so that its metrics keep the
//     Certificate's namespace that CellpayCertificateExpiry names, scrapes
//     no pod of a cell, scrapes the kubelets' volume stats through its one
//     scrape config that is no PodMonitor (kubeletScrape,
//     monitoring_kubelet.go), and evaluates the platform's PrometheusRule.
func CheckMonitoring(w *World) []string {
	var v []string
	for _, ns := range w.Cells {
		v = append(v, cellMonitoring(w, ns)...)
	}
	return append(v, globalMonitoring(w)...)
}

func cellMonitoring(w *World, ns string) []string {
	o, ok := w.get(monitoringv1.PrometheusesKind, ns, CellPrometheus)
	if !ok {
		return []string{fmt.Sprintf("%s: no Prometheus %s", ns, CellPrometheus)}
	}
	p := o.Typed.(*monitoringv1.Prometheus)
	at := o.String()
	v := ownNamespaceOnly(at, p)
	if p.Spec.Replicas != nil && *p.Spec.Replicas != 1 {
		v = append(v, fmt.Sprintf("%s: %d replicas: each would remote-write the same series", at, *p.Spec.Replicas))
	}
	if dep, ok := w.get("Deployment", ns, "cell"); ok {
		v = append(v, metricsListen(dep, "cell", "CELL_METRICS_LISTEN", CellMetricsPort)...)
	}
	cell, _ := w.pod(ns, "cell")
	pg, _ := w.pod(ns, w.cellCluster(ns))
	for _, want := range []struct {
		pod  Pod
		port int32
		job  string
	}{{cell, CellMetricsPort, CellJob}, {pg, PostgresMetricsPort, PostgresJob}} {
		if want.pod.Name == "" {
			continue // CheckBoundary reports it
		}
		got := scrapes(w, p, want.pod)
		if len(got) != 1 {
			v = append(v, fmt.Sprintf("%s: scrapes %s through %d endpoints, want one", at, want.pod, len(got)))
			continue
		}
		s := got[0]
		if s.port != want.port {
			v = append(v, fmt.Sprintf("%s: scrapes %s on %d, want %d", at, want.pod, s.port, want.port))
		}
		if s.err != nil {
			v = append(v, fmt.Sprintf("%s: %v", s.monitor, s.err))
			continue
		}
		if s.labels["job"] != want.job {
			v = append(v, fmt.Sprintf("%s: job of %s is %q, want %q", s.monitor, want.pod, s.labels["job"], want.job))
		}
		if want.job == PostgresJob && s.labels["cell"] != ns {
			v = append(v, fmt.Sprintf("%s: cell of %s is %q, want %q", s.monitor, want.pod, s.labels["cell"], ns))
		}
	}
	v = append(v, rulesSelected(w, at, ns, p, "cell")...)
	if len(p.Spec.RemoteWrite) != 1 {
		v = append(v, fmt.Sprintf("%s: %d remote writes, want one, to the global Prometheus", at, len(p.Spec.RemoteWrite)))
	} else if msg := toGlobal(w, string(p.Spec.RemoteWrite[0].URL)); msg != "" {
		v = append(v, fmt.Sprintf("%s: remote write %s", at, msg))
	}
	return v
}

// ownNamespaceOnly holds a cell's Prometheus to its namespace: a nil
// namespace selector is the operator's "the Prometheus's own namespace";
// a nil selector of a kind selects none of it.
func ownNamespaceOnly(at string, p *monitoringv1.Prometheus) []string {
	var v []string
	s := p.Spec
	for name, sel := range map[string]*metav1.LabelSelector{
		"podMonitorNamespaceSelector": s.PodMonitorNamespaceSelector, "ruleNamespaceSelector": s.RuleNamespaceSelector,
		"serviceMonitorNamespaceSelector": s.ServiceMonitorNamespaceSelector, "probeNamespaceSelector": s.ProbeNamespaceSelector,
		"scrapeConfigNamespaceSelector": s.ScrapeConfigNamespaceSelector, "serviceMonitorSelector": s.ServiceMonitorSelector,
		"probeSelector": s.ProbeSelector, "scrapeConfigSelector": s.ScrapeConfigSelector,
	} {
		if sel != nil {
			v = append(v, fmt.Sprintf("%s: %s is set: a cell's Prometheus sees its own namespace's PodMonitors and rules only", at, name))
		}
	}
	if s.AdditionalScrapeConfigs != nil {
		v = append(v, at+": additionalScrapeConfigs is set")
	}
	sort.Strings(v)
	return v
}

func globalMonitoring(w *World) []string {
	o, ok := w.get(monitoringv1.PrometheusesKind, MonitoringNamespace, GlobalPrometheus)
	if !ok {
		return []string{fmt.Sprintf("no Prometheus %s in %s", GlobalPrometheus, MonitoringNamespace)}
	}
	p := o.Typed.(*monitoringv1.Prometheus)
	at := o.String()
	var v []string
	if !p.Spec.EnableRemoteWriteReceiver {
		v = append(v, at+": enableRemoteWriteReceiver is off: the cells cannot write to it")
	}
	if p.Spec.ServiceMonitorSelector != nil || p.Spec.ProbeSelector != nil || p.Spec.ScrapeConfigSelector != nil {
		v = append(v, at+": scrapes more than PodMonitors and the kubelets")
	}
	v = append(v, kubeletScrape(w, at, p)...)
	for _, ns := range w.Cells {
		if nsSelected(w, p.Spec.PodMonitorNamespaceSelector, MonitoringNamespace, ns) {
			v = append(v, fmt.Sprintf("%s: discovers PodMonitors in cell %s, whose scrape is its own Prometheus's", at, ns))
		}
		for _, pod := range w.PodsIn(ns) {
			for _, s := range scrapes(w, p, pod) {
				v = append(v, fmt.Sprintf("%s: scrapes %s through %s, whose scrape is its cell's Prometheus's", at, pod, s.monitor))
			}
		}
	}
	v = append(v, certManagerScrape(w, at, p)...)
	gtrs := 0
	for _, obj := range w.Find("Deployment", GTRNamespace) {
		d := obj.Typed.(*appsv1.Deployment)
		if d.Spec.Template.Labels[NameLabel] != "gtr" {
			continue
		}
		gtrs++
		v = append(v, metricsListen(obj, "gtr", "GTR_METRICS_LISTEN", GTRMetricsPort)...)
		pod, _ := w.pod(GTRNamespace, obj.Name)
		got := scrapes(w, p, pod)
		if len(got) != 1 {
			v = append(v, fmt.Sprintf("%s: scrapes %s through %d endpoints, want one", at, pod, len(got)))
			continue
		}
		s := got[0]
		if s.port != GTRMetricsPort {
			v = append(v, fmt.Sprintf("%s: scrapes %s on %d, want %d", at, pod, s.port, GTRMetricsPort))
		}
		if s.err != nil {
			v = append(v, fmt.Sprintf("%s: %v", s.monitor, s.err))
			continue
		}
		ap := pod.Labels[AccessPointLabel]
		if s.labels["job"] != GTRJob || ap == "" || s.labels["access_point"] != ap {
			v = append(v, fmt.Sprintf("%s: %s is scraped as job=%q access_point=%q, want job=%q access_point=%q (the pod's %s)",
				s.monitor, pod, s.labels["job"], s.labels["access_point"], GTRJob, ap, AccessPointLabel))
		}
	}
	if gtrs == 0 {
		v = append(v, "no GTR Deployment for the global Prometheus to scrape")
	}
	return append(v, rulesSelected(w, at, MonitoringNamespace, p, "platform")...)
}

// certManagerScrape checks the global Prometheus p's scrape of
// cert-manager's controller: once, on 9402, as job cert-manager, with the
// metrics' own labels kept (their namespace is the Certificate's, and
// the target's, cert-manager, would otherwise take it).
func certManagerScrape(w *World, at string, p *monitoringv1.Prometheus) []string {
	pod, _ := w.pod(CertManagerNamespace, "cert-manager")
	got := scrapes(w, p, pod)
	if len(got) != 1 {
		return []string{fmt.Sprintf("%s: scrapes %s through %d endpoints, want one", at, pod, len(got))}
	}
	s := got[0]
	var v []string
	if s.port != CertManagerMetricsPort {
		v = append(v, fmt.Sprintf("%s: scrapes %s on %d, want %d", at, pod, s.port, CertManagerMetricsPort))
	}
	if !s.honorLabels {
		v = append(v, fmt.Sprintf("%s: scrapes %s without honorLabels: its metrics' namespace (the Certificate's) would become exported_namespace", s.monitor, pod))
	}
	if s.err != nil {
		return append(v, fmt.Sprintf("%s: %v", s.monitor, s.err))
	}
	if s.labels["job"] != CertManagerJob {
		v = append(v, fmt.Sprintf("%s: job of %s is %q, want %q", s.monitor, pod, s.labels["job"], CertManagerJob))
	}
	return v
}

// metricsListen checks that a container serves /metrics on the named port
// "metrics", at port.
func metricsListen(o Object, container, env string, port int32) []string {
	tmpl, _ := podTemplate(o)
	addr := envValue(tmpl.Spec, container, env)
	got, err := listenPort(addr)
	if err != nil {
		return []string{fmt.Sprintf("%s: %s %v", o, env, err)}
	}
	if got != port {
		return []string{fmt.Sprintf("%s: %s is %q, want port %d", o, env, addr, port)}
	}
	for _, p := range containerPorts(tmpl.Spec) {
		if p.Name == "metrics" && p.ContainerPort == port {
			return nil
		}
	}
	return []string{fmt.Sprintf("%s: no container port metrics (%d)", o, port)}
}

// rulesSelected checks that p evaluates exactly the PrometheusRules of
// side (RulesLabel) in its namespace ns, and that there is one.
func rulesSelected(w *World, at, ns string, p *monitoringv1.Prometheus, side string) []string {
	var v []string
	if p.Spec.RuleNamespaceSelector != nil {
		v = append(v, at+": ruleNamespaceSelector is set: it evaluates the rules of its own namespace")
	}
	n := 0
	for _, o := range w.Find(monitoringv1.PrometheusRuleKind, ns) {
		pr := o.Typed.(*monitoringv1.PrometheusRule)
		sel := promSelects(p.Spec.RuleSelector, pr.Labels)
		switch {
		case sel && pr.Labels[RulesLabel] != side:
			v = append(v, fmt.Sprintf("%s: evaluates %s, which is not the %s's rules", at, o, side))
		case sel:
			n++
		}
	}
	if n != 1 {
		v = append(v, fmt.Sprintf("%s: evaluates %d PrometheusRules labelled %s=%s in %s, want one", at, n, RulesLabel, side, ns))
	}
	return v
}

// toGlobal checks a remote-write URL: plain HTTP to the global
// Prometheus's Service by name, on the port that leads to its pods'
// 9090, at /api/v1/write.
func toGlobal(w *World, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return err.Error()
	}
	host := u.Hostname()
	name, ns, _ := strings.Cut(host, ".")
	ns, _, _ = strings.Cut(ns, ".")
	o, ok := w.get("Service", ns, name)
	if ns != MonitoringNamespace || !ok || !slices.Contains(serviceNames(name, ns), host) {
		return fmt.Sprintf("%s: not a Service of %s", raw, MonitoringNamespace)
	}
	svc := o.Typed.(*corev1.Service)
	global, _ := w.pod(MonitoringNamespace, "prometheus-"+GlobalPrometheus)
	if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(global.Labels)) {
		return fmt.Sprintf("%s: Service %s does not select the global Prometheus's pods", raw, name)
	}
	for _, sp := range svc.Spec.Ports {
		if u.Port() != fmt.Sprint(sp.Port) {
			continue
		}
		if tp := sp.TargetPort; tp.IntValue() == PrometheusWebPort || tp.String() == "web" {
			if u.Path != "/api/v1/write" {
				return fmt.Sprintf("%s: path is not /api/v1/write", raw)
			}
			return ""
		}
	}
	return fmt.Sprintf("%s: no port of Service %s leads to %d", raw, name, PrometheusWebPort)
}

// A scrape is what one PodMonitor endpoint makes of a pod: the port it
// asks and the target's labels after its relabelings.
type scrape struct {
	monitor     string
	port        int32
	labels      map[string]string
	honorLabels bool
	err         error
}

// scrapes lists what Prometheus p scrapes of pod: every endpoint of every
// PodMonitor p discovers that selects the pod and names one of its ports.
// A PodMonitor's namespaceSelector counts unless p ignores them
// (ignoreNamespaceSelectors), which holds it to its own namespace, and
// its honorLabels unless p overrides them (overrideHonorLabels).
func scrapes(w *World, p *monitoringv1.Prometheus, pod Pod) []scrape {
	var out []scrape
	for _, o := range w.Find(monitoringv1.PodMonitorsKind, "") {
		m := o.Typed.(*monitoringv1.PodMonitor)
		if !nsSelected(w, p.Spec.PodMonitorNamespaceSelector, p.Namespace, m.Namespace) || !promSelects(p.Spec.PodMonitorSelector, m.Labels) {
			continue
		}
		ns := m.Spec.NamespaceSelector
		if p.Spec.IgnoreNamespaceSelectors {
			ns = monitoringv1.NamespaceSelector{}
		}
		inNS := ns.Any || slices.Contains(ns.MatchNames, pod.Namespace) || len(ns.MatchNames) == 0 && pod.Namespace == m.Namespace
		sel, err := metav1.LabelSelectorAsSelector(&m.Spec.Selector)
		if !inNS || err != nil || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		for _, ep := range m.Spec.PodMetricsEndpoints {
			if ep.Port == nil {
				continue
			}
			for _, cp := range pod.Ports {
				if cp.Name == *ep.Port {
					l, err := relabel(targetLabels(m, pod), ep.RelabelConfigs)
					out = append(out, scrape{monitor: o.String(), port: cp.ContainerPort, labels: l, honorLabels: ep.HonorLabels && !p.Spec.OverrideHonorLabels, err: err})
				}
			}
		}
	}
	return out
}

// nsSelected says whether a Prometheus in home with namespace selector sel
// discovers objects in ns: nil is its own namespace only.
func nsSelected(w *World, sel *metav1.LabelSelector, home, ns string) bool {
	if sel == nil {
		return ns == home
	}
	l := map[string]string{"kubernetes.io/metadata.name": ns}
	for k, val := range w.Net.Namespaces[ns] {
		l[k] = val
	}
	return promSelects(sel, l)
}

// promSelects applies a Prometheus's selector: nil selects nothing.
func promSelects(sel *metav1.LabelSelector, l map[string]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(l))
}

var notLabelChar = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// targetLabels are a PodMonitor target's labels before its relabelings, as
// the operator's configuration makes them: the pod's labels and namespace
// as Kubernetes service discovery gives them, and the job named after
// the PodMonitor.
func targetLabels(m *monitoringv1.PodMonitor, pod Pod) map[string]string {
	l := map[string]string{
		"__meta_kubernetes_namespace": pod.Namespace,
		"__meta_kubernetes_pod_name":  pod.Name,
		"namespace":                   pod.Namespace,
		"pod":                         pod.Name,
		"job":                         m.Namespace + "/" + m.Name,
	}
	for k, val := range pod.Labels {
		l["__meta_kubernetes_pod_label_"+notLabelChar.ReplaceAllString(k, "_")] = val
	}
	return l
}

// relabel applies Prometheus relabel configs of action replace (the only
// one the manifests use; any other is an error, not a guess) and returns
// the target's labels without the __ ones.
func relabel(l map[string]string, cfgs []monitoringv1.RelabelConfig) (map[string]string, error) {
	for _, c := range cfgs {
		if c.Action != "" && !strings.EqualFold(c.Action, "replace") {
			return nil, fmt.Errorf("relabel action %q: the checks understand replace only", c.Action)
		}
		var vals []string
		for _, s := range c.SourceLabels {
			vals = append(vals, l[string(s)])
		}
		sep := ";"
		if c.Separator != nil {
			sep = *c.Separator
		}
		expr := c.Regex
		if expr == "" {
			expr = "(.*)"
		}
		re, err := regexp.Compile("^(?:" + expr + ")$")
		if err != nil {
			return nil, fmt.Errorf("relabel regex %q: %w", c.Regex, err)
		}
		src := strings.Join(vals, sep)
		idx := re.FindStringSubmatchIndex(src)
		if idx == nil || c.TargetLabel == "" {
			continue
		}
		repl := "$1"
		if c.Replacement != nil {
			repl = *c.Replacement
		}
		if res := string(re.ExpandString(nil, repl, src, idx)); res != "" {
			l[c.TargetLabel] = res
		} else {
			delete(l, c.TargetLabel)
		}
	}
	out := map[string]string{}
	for k, val := range l {
		if !strings.HasPrefix(k, "__") {
			out[k] = val
		}
	}
	return out, nil
}
