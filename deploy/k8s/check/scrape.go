package check

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// The metrics ports, as the manifests set -metrics-listen and the
// PodMonitors scrape them.
const (
	CellMetricsPort     = 9081
	GTRMetricsPort      = 9070
	PostgresMetricsPort = 9187 // CloudNativePG's exporter
	PrometheusWebPort   = 9090 // remote write, at the global Prometheus
	// CertManagerMetricsPort is cert-manager's controller's (http-metrics).
	CertManagerMetricsPort = 9402
	// NATSMonMetricsPort is natsmon's, the NATS pods' sidecar.
	NATSMonMetricsPort = 7777
)

// NATSNamespace is NATS's namespace.
const NATSNamespace = "cellpay-nats"

// isNATS says whether p is a NATS server's pod (its natsmon sidecar's).
func isNATS(p Pod) bool { return p.Namespace == NATSNamespace && p.Labels[NameLabel] == "nats" }

// isCellPrometheus says whether p is the Prometheus of cell namespace ns:
// its pods, in that namespace.
func isCellPrometheus(p Pod, ns string) bool {
	return p.Namespace == ns && p.Labels[NameLabel] == "prometheus" && p.Labels[PrometheusNameLabel] == CellPrometheus
}

// isGlobalPrometheus says whether p is the global Prometheus's pods.
func isGlobalPrometheus(p Pod) bool {
	return p.Namespace == MonitoringNamespace && p.Labels[NameLabel] == "prometheus" && p.Labels[PrometheusNameLabel] == GlobalPrometheus
}

// isCertManagerController says whether p is cert-manager's controller's
// pods, in cert-manager's namespace (not its webhook or cainjector).
func isCertManagerController(p Pod) bool {
	return p.Namespace == CertManagerNamespace && p.Labels[NameLabel] == CertManagerName && p.Labels[ComponentLabel] == "controller"
}

// CheckScrape proves the monitoring's paths over the rendered policies, and
// that they open nothing else:
//
//   - each cell's Prometheus reaches its cell's pods on 9081, its Postgres
//     instances on 9187, the global Prometheus on 9090 (remote write) and
//     DNS; it sends nowhere else but the API server's ports (443, 6443),
//     which no pod of ours admits; and nothing admits anything to it;
//   - the global Prometheus admits only the cells' own Prometheus, on
//     9090, and each of them gets through; it reaches every GTR pod on
//     9070, every NATS pod's natsmon on 7777, cert-manager's controller on 9402 (in cert-manager's
//     namespace, as far as our policies go: that namespace's own are not
//     ours) and DNS, sends nowhere else but the API server's ports and
//     the kubelets' (10250), and so into no cell, nor to cert-manager's
//     webhook or cainjector but on those.
//
// Who else may reach a cell, its Postgres or the GTR is CheckBoundary's
// and CheckTrust's, which admit these scrapes and nothing more.
func CheckScrape(w *World) []string {
	global, ok := w.pod(MonitoringNamespace, "prometheus-"+GlobalPrometheus)
	if !ok {
		return []string{"no global Prometheus (Prometheus " + GlobalPrometheus + " in " + MonitoringNamespace + ")"}
	}
	var v []string
	for _, a := range w.Cells {
		v = append(v, cellPrometheusPaths(w, a, global)...)
	}
	return append(v, globalPrometheusPaths(w, global)...)
}

// cellPrometheusPaths proves the paths of cell a's Prometheus.
func cellPrometheusPaths(w *World, a string, global Pod) []string {
	prom, ok := w.pod(a, "prometheus-"+CellPrometheus)
	if !ok {
		return []string{fmt.Sprintf("%s: no Prometheus %s", a, CellPrometheus)}
	}
	var v []string
	db := w.cellCluster(a)
	needed := []struct {
		dst string
		t   Target
	}{
		{"cell", Target{CellMetricsPort, corev1.ProtocolTCP}},
		{db, Target{PostgresMetricsPort, corev1.ProtocolTCP}},
	}
	for _, n := range needed {
		dst, ok := w.pod(a, n.dst)
		if !ok {
			continue // CheckBoundary reports it
		}
		if !w.Net.Allowed(prom, dst, n.t.Port, n.t.Proto) {
			v = append(v, fmt.Sprintf("%s cannot scrape %s on %s", prom, dst, n.t))
		}
	}
	if !w.Net.Allowed(prom, global, PrometheusWebPort, corev1.ProtocolTCP) {
		v = append(v, fmt.Sprintf("%s cannot remote-write to %s on %d/TCP", prom, global, PrometheusWebPort))
	}
	if dns, _ := w.pod("kube-system", "kube-dns"); !w.Net.Allowed(prom, dns, 53, corev1.ProtocolUDP) {
		v = append(v, fmt.Sprintf("%s cannot reach %s on 53/UDP", prom, dns))
	}
	for _, dst := range w.Pods {
		for _, t := range Targets(dst) {
			if w.Net.egressAllows(prom, dst, t.Port, t.Proto) && !cellPrometheusMaySend(w, prom, db, dst, t) {
				v = append(v, fmt.Sprintf("%s may send to %s on %s: a cell's Prometheus reaches only its cell (%d), its Postgres (%d), the global Prometheus (%d), DNS and the API server",
					prom, dst, t, CellMetricsPort, PostgresMetricsPort, PrometheusWebPort))
			}
		}
	}
	for _, src := range w.Pods {
		for _, t := range Targets(prom) {
			if w.Net.ingressAllows(src, prom, t.Port, t.Proto) {
				v = append(v, fmt.Sprintf("%s admits %s on %s: nothing may reach a cell's Prometheus", prom, src, t))
			}
		}
	}
	return v
}

// globalPrometheusPaths proves the global Prometheus's paths.
func globalPrometheusPaths(w *World, global Pod) []string {
	var v []string
	for _, src := range w.Pods {
		for _, t := range Targets(global) {
			if !w.Net.ingressAllows(src, global, t.Port, t.Proto) {
				continue
			}
			if !(w.isCell(src.Namespace) && isCellPrometheus(src, src.Namespace) && t == Target{PrometheusWebPort, corev1.ProtocolTCP}) {
				v = append(v, fmt.Sprintf("%s admits %s on %s: only the cells' Prometheus may reach it, on %d", global, src, t, PrometheusWebPort))
			}
		}
	}
	gtrs, certManagers, natss := 0, 0, 0
	for _, dst := range w.Pods {
		if isNATS(dst) {
			natss++
			if !w.Net.Allowed(global, dst, NATSMonMetricsPort, corev1.ProtocolTCP) {
				v = append(v, fmt.Sprintf("%s cannot scrape %s on %d/TCP", global, dst, NATSMonMetricsPort))
			}
		}
		if isGTR(dst) {
			gtrs++
			if !w.Net.Allowed(global, dst, GTRMetricsPort, corev1.ProtocolTCP) {
				v = append(v, fmt.Sprintf("%s cannot scrape %s on %d/TCP", global, dst, GTRMetricsPort))
			}
		}
		if isCertManagerController(dst) {
			certManagers++
			if !w.Net.Allowed(global, dst, CertManagerMetricsPort, corev1.ProtocolTCP) {
				v = append(v, fmt.Sprintf("%s cannot scrape %s on %d/TCP", global, dst, CertManagerMetricsPort))
			}
		}
		for _, t := range Targets(dst) {
			if !w.Net.egressAllows(global, dst, t.Port, t.Proto) {
				continue
			}
			switch {
			case apiServerPort(t) && apiServerOnly(w, global, dst, t):
			case t == (Target{KubeletPort, corev1.ProtocolTCP}) && apiServerOnly(w, global, dst, t):
				// The kubelets' port, open to any address as the API
				// server's are (nodes are no pods): no pod of ours on it.
			case isGTR(dst) && t == Target{GTRMetricsPort, corev1.ProtocolTCP}:
			case isNATS(dst) && t == Target{NATSMonMetricsPort, corev1.ProtocolTCP}:
			case isCertManagerController(dst) && t == Target{CertManagerMetricsPort, corev1.ProtocolTCP}:
			case dst.Namespace == "kube-system" && dst.Labels["k8s-app"] == "kube-dns" && t.Port == 53:
			default:
				v = append(v, fmt.Sprintf("%s may send to %s on %s: the global Prometheus reaches only the GTR (%d), natsmon (%d), cert-manager's controller (%d), DNS, the API server and the kubelets (%d)",
					global, dst, t, GTRMetricsPort, NATSMonMetricsPort, CertManagerMetricsPort, KubeletPort))
			}
		}
	}
	if gtrs == 0 {
		v = append(v, "the global Prometheus has no GTR pod to scrape")
	}
	if natss == 0 {
		v = append(v, "the global Prometheus has no NATS pod to scrape")
	}
	if certManagers == 0 {
		v = append(v, "the global Prometheus has no cert-manager controller pod to scrape")
	}
	return v
}

// apiServerOnly says whether src's egress to dst on t, an API server's
// port, reaches no pod of ours: dst's namespace is none the overlays make,
// or its policies do not admit it.
func apiServerOnly(w *World, src, dst Pod, t Target) bool {
	return !w.renders(dst.Namespace) || !w.Net.ingressAllows(src, dst, t.Port, t.Proto)
}

// renders says whether the overlays make namespace ns.
func (w *World) renders(ns string) bool {
	_, ok := w.get("Namespace", "", ns)
	return ok
}

func apiServerPort(t Target) bool {
	return t == Target{443, corev1.ProtocolTCP} || t == Target{6443, corev1.ProtocolTCP}
}

// cellPrometheusMaySend is the closed list of where prom, the Prometheus of
// a cell whose Postgres is Cluster db, may send: the API server's ports
// are open to any address, since the API server is no pod, but no pod may
// admit them.
func cellPrometheusMaySend(w *World, prom Pod, db string, dst Pod, t Target) bool {
	ns := prom.Namespace
	if apiServerPort(t) {
		return apiServerOnly(w, prom, dst, t)
	}
	switch {
	case dst.Namespace == ns && dst.Labels[NameLabel] == "cell":
		return t == Target{CellMetricsPort, corev1.ProtocolTCP}
	case dst.Namespace == ns && db != "" && dst.Labels[CNPGClusterLabel] == db:
		return t == Target{PostgresMetricsPort, corev1.ProtocolTCP}
	case isGlobalPrometheus(dst):
		return t == Target{PrometheusWebPort, corev1.ProtocolTCP}
	case dst.Namespace == "kube-system" && dst.Labels["k8s-app"] == "kube-dns":
		return t.Port == 53
	}
	return false
}
