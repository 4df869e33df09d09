package check

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// CheckBoundary proves the cell boundary over the rendered NetworkPolicies,
// by asking the evaluator about every pair of pods and every port tried
// (Targets). It returns one line per violation:
//
//   - no pod of one cell namespace can reach any pod of another;
//   - a cell pod admits traffic from the GTR's pods only, and does admit it,
//     but for its own namespace's Prometheus on the metrics port (the
//     scrape, CheckScrape);
//   - a cell pod's egress reaches only its own Postgres, NATS, the issuer and
//     DNS, and does reach each of them (outside the cluster's pods, only
//     partners' callback endpoints: CheckCallbacks);
//   - a cell's Postgres instances (its CloudNativePG Cluster's pods) admit
//     only its own cell's pods and each other on 5432, and the CNPG
//     operator on 8000 and 5432, and their cell's Prometheus on 9187, and
//     do admit each of them;
//   - the instances send only to each other on 5432, to DNS, and on the
//     API server's ports (443, 6443) outside the cells, and do reach
//     each other and DNS;
//   - every cell namespace denies by default: an unlabelled pod there can
//     neither send nor receive anything, and a policy selecting every pod
//     with no rules exists.
func CheckBoundary(w *World) []string {
	var v []string
	if len(w.Cells) == 0 {
		return []string{"no cell namespaces (label " + RoleLabel + "=cell)"}
	}
	for _, a := range w.Cells {
		v = append(v, crossCell(w, a)...)
		v = append(v, cellIngress(w, a)...)
		v = append(v, cellEgress(w, a)...)
		v = append(v, databaseIngress(w, a)...)
		v = append(v, databaseEgress(w, a)...)
		v = append(v, defaultDeny(w, a)...)
	}
	return v
}

func crossCell(w *World, a string) []string {
	var v []string
	for _, x := range w.PodsIn(a) {
		for _, y := range w.Pods {
			if y.Namespace == a || !w.isCell(y.Namespace) {
				continue
			}
			for _, t := range Targets(y) {
				if w.Net.Allowed(x, y, t.Port, t.Proto) {
					v = append(v, fmt.Sprintf("cross-cell path: %s can reach %s on %s", x, y, t))
				}
			}
		}
	}
	return v
}

func isGTR(p Pod) bool { return p.Namespace == GTRNamespace && p.Labels[NameLabel] == "gtr" }

func cellIngress(w *World, a string) []string {
	var v []string
	cell, ok := w.pod(a, "cell")
	if !ok {
		return []string{fmt.Sprintf("%s: no cell workload", a)}
	}
	gtrReaches := false
	for _, src := range w.Pods {
		for _, t := range Targets(cell) {
			if !w.Net.ingressAllows(src, cell, t.Port, t.Proto) {
				continue
			}
			switch {
			case isCellPrometheus(src, a) && t == Target{CellMetricsPort, corev1.ProtocolTCP}:
				// The scrape (CheckScrape proves it gets through).
			case !isGTR(src):
				v = append(v, fmt.Sprintf("%s admits %s on %s: only the GTR (and its own Prometheus, on %d) may reach a cell", cell, src, t, CellMetricsPort))
			case t.Port == 7081 && w.Net.egressAllows(src, cell, t.Port, t.Proto):
				gtrReaches = true
			}
		}
	}
	if !gtrReaches {
		v = append(v, fmt.Sprintf("the GTR cannot reach %s on 7081/TCP", cell))
	}
	return v
}

// cellEgressAllowed is the closed list of what a cell in namespace ns,
// whose Postgres is Cluster db, may reach.
func cellEgressAllowed(ns, db string, dst Pod, t Target) bool {
	name := dst.Labels[NameLabel]
	switch {
	case dst.Namespace == ns && db != "" && dst.Labels[CNPGClusterLabel] == db:
		return t == Target{5432, corev1.ProtocolTCP}
	case dst.Namespace == "cellpay-nats" && name == "nats":
		return t == Target{4222, corev1.ProtocolTCP}
	case dst.Namespace == "cellpay-issuer" && name == "issuersim":
		return t == Target{7090, corev1.ProtocolTCP}
	case dst.Namespace == "kube-system" && dst.Labels["k8s-app"] == "kube-dns":
		return t.Port == 53
	}
	return false
}

func cellEgress(w *World, a string) []string {
	var v []string
	cell, ok := w.pod(a, "cell")
	if !ok {
		return nil // reported by cellIngress
	}
	db := w.cellCluster(a)
	needed := map[string]Target{
		a + "/" + db:               {5432, corev1.ProtocolTCP},
		"cellpay-nats/nats":        {4222, corev1.ProtocolTCP},
		"cellpay-issuer/issuersim": {7090, corev1.ProtocolTCP},
		"kube-system/kube-dns":     {53, corev1.ProtocolUDP},
	}
	for _, dst := range w.Pods {
		for _, t := range Targets(dst) {
			if !w.Net.egressAllows(cell, dst, t.Port, t.Proto) {
				continue
			}
			if !cellEgressAllowed(a, db, dst, t) {
				v = append(v, fmt.Sprintf("%s may send to %s on %s: a cell reaches only its Postgres, NATS, the issuer and DNS", cell, dst, t))
			}
		}
	}
	for name, t := range needed {
		dst, ok := w.podByKey(name)
		if !ok {
			v = append(v, fmt.Sprintf("%s: %s is not deployed", cell, name))
			continue
		}
		if !w.Net.Allowed(cell, dst, t.Port, t.Proto) {
			v = append(v, fmt.Sprintf("%s cannot reach %s on %s", cell, dst, t))
		}
	}
	return v
}

// cellCluster is the name of the one CloudNativePG Cluster in ns, or ""
// (none or several: CheckCells reports it).
func (w *World) cellCluster(ns string) string {
	cs := w.Find("Cluster", ns)
	if len(cs) != 1 {
		return ""
	}
	return cs[0].Name
}

// isOperator says whether p is the CNPG operator: its pods in its namespace.
func isOperator(p Pod) bool {
	return p.Namespace == CNPGNamespace && p.Labels[NameLabel] == CNPGOperatorName
}

// databaseIngress proves who reaches cell a's Postgres instances: its own
// cell's pods and its own instances on 5432, the operator on 8000 and
// 5432, its cell's Prometheus on 9187 (CheckScrape proves that one gets
// through), nobody else; and that each of them does get through.
func databaseIngress(w *World, a string) []string {
	db := w.cellCluster(a)
	pg, ok := w.pod(a, db)
	if db == "" || !ok {
		return []string{fmt.Sprintf("%s: no Postgres Cluster", a)}
	}
	pgPort := Target{5432, corev1.ProtocolTCP}
	var v []string
	for _, src := range w.Pods {
		own := src.Namespace == a && (src.Labels[NameLabel] == "cell" || src.Labels[CNPGClusterLabel] == db)
		for _, t := range Targets(pg) {
			if !w.Net.ingressAllows(src, pg, t.Port, t.Proto) {
				continue
			}
			if !(own && t == pgPort || isOperator(src) && (t == pgPort || t == Target{8000, corev1.ProtocolTCP}) ||
				isCellPrometheus(src, a) && t == Target{PostgresMetricsPort, corev1.ProtocolTCP}) {
				v = append(v, fmt.Sprintf("%s admits %s on %s: only its own cell and instances (5432), the CNPG operator (8000, 5432) and its cell's Prometheus (%d) may reach it", pg, src, t, PostgresMetricsPort))
			}
		}
	}
	op, _ := w.pod(CNPGNamespace, "cnpg-operator")
	for _, need := range []struct {
		src Pod
		t   Target
	}{{pg, pgPort}, {op, pgPort}, {op, Target{8000, corev1.ProtocolTCP}}} {
		if !w.Net.Allowed(need.src, pg, need.t.Port, need.t.Proto) {
			v = append(v, fmt.Sprintf("%s cannot reach %s on %s", need.src, pg, need.t))
		}
	}
	return v
}

// databaseEgress proves where cell a's Postgres instances may send: each
// other on 5432, DNS, and the API server's ports (443, 6443), but into no
// cell on those.
func databaseEgress(w *World, a string) []string {
	db := w.cellCluster(a)
	pg, ok := w.pod(a, db)
	if db == "" || !ok {
		return nil // reported by databaseIngress
	}
	var v []string
	for _, dst := range w.Pods {
		for _, t := range Targets(dst) {
			if !w.Net.egressAllows(pg, dst, t.Port, t.Proto) {
				continue
			}
			switch {
			case dst.Namespace == a && dst.Labels[CNPGClusterLabel] == db && t == Target{5432, corev1.ProtocolTCP}:
			case dst.Namespace == "kube-system" && dst.Labels["k8s-app"] == "kube-dns" && t.Port == 53:
			case (t == Target{443, corev1.ProtocolTCP} || t == Target{6443, corev1.ProtocolTCP}) &&
				(!w.isCell(dst.Namespace) || !w.Net.ingressAllows(pg, dst, t.Port, t.Proto)):
				// The API server's ports, open to any address since the API
				// server is no pod: never into a cell (crossCell proves the
				// same for other cells' pods).
			default:
				v = append(v, fmt.Sprintf("%s may send to %s on %s: Postgres instances reach only each other, DNS and the API server", pg, dst, t))
			}
		}
	}
	dns, _ := w.pod("kube-system", "kube-dns")
	if !w.Net.Allowed(pg, dns, 53, corev1.ProtocolUDP) {
		v = append(v, fmt.Sprintf("%s cannot reach %s on 53/UDP", pg, dns))
	}
	return v
}

func defaultDeny(w *World, a string) []string {
	var v []string
	intruder, _ := w.pod(a, "intruder")
	for _, other := range w.Pods {
		for _, t := range Targets(other) {
			if w.Net.egressAllows(intruder, other, t.Port, t.Proto) {
				v = append(v, fmt.Sprintf("%s: not deny-by-default: an unlabelled pod may send to %s on %s", a, other, t))
			}
		}
		for _, t := range Targets(intruder) {
			if w.Net.ingressAllows(other, intruder, t.Port, t.Proto) {
				v = append(v, fmt.Sprintf("%s: not deny-by-default: an unlabelled pod admits %s on %s", a, other, t))
			}
		}
	}
	found := false
	for _, p := range w.Net.Policies {
		if p.Namespace == a && len(p.Spec.PodSelector.MatchLabels) == 0 && len(p.Spec.PodSelector.MatchExpressions) == 0 &&
			len(p.Spec.Ingress) == 0 && len(p.Spec.Egress) == 0 && hasType(&p, "Ingress") && hasType(&p, "Egress") {
			found = true
		}
	}
	if !found {
		v = append(v, fmt.Sprintf("%s: no default-deny NetworkPolicy (empty podSelector, Ingress and Egress, no rules)", a))
	}
	return v
}

// pod finds the pod of namespace ns named name.
func (w *World) pod(ns, name string) (Pod, bool) {
	for _, p := range w.Pods {
		if p.Namespace == ns && p.Name == name {
			return p, true
		}
	}
	return Pod{}, false
}

func (w *World) podByKey(key string) (Pod, bool) {
	for _, p := range w.Pods {
		if p.String() == key {
			return p, true
		}
	}
	return Pod{}, false
}
