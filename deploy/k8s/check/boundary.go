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
//   - a cell pod admits traffic from the GTR's pods only, and does admit it;
//   - a cell pod's egress reaches only its own Postgres, NATS, the issuer and
//     DNS, and does reach each of them;
//   - a cell's Postgres admits only its own cell's pods;
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
		v = append(v, postgresIngress(w, a)...)
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
			if !isGTR(src) {
				v = append(v, fmt.Sprintf("%s admits %s on %s: only the GTR may reach a cell", cell, src, t))
			} else if t.Port == 7081 && w.Net.egressAllows(src, cell, t.Port, t.Proto) {
				gtrReaches = true
			}
		}
	}
	if !gtrReaches {
		v = append(v, fmt.Sprintf("the GTR cannot reach %s on 7081/TCP", cell))
	}
	return v
}

// cellEgressAllowed is the closed list of what a cell in namespace ns may
// reach.
func cellEgressAllowed(ns string, dst Pod, t Target) bool {
	name := dst.Labels[NameLabel]
	switch {
	case dst.Namespace == ns && name == "postgres":
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
	needed := map[string]Target{
		a + "/postgres":            {5432, corev1.ProtocolTCP},
		"cellpay-nats/nats":        {4222, corev1.ProtocolTCP},
		"cellpay-issuer/issuersim": {7090, corev1.ProtocolTCP},
		"kube-system/kube-dns":     {53, corev1.ProtocolUDP},
	}
	for _, dst := range w.Pods {
		for _, t := range Targets(dst) {
			if !w.Net.egressAllows(cell, dst, t.Port, t.Proto) {
				continue
			}
			if !cellEgressAllowed(a, dst, t) {
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

func postgresIngress(w *World, a string) []string {
	var v []string
	pg, ok := w.pod(a, "postgres")
	if !ok {
		return []string{fmt.Sprintf("%s: no postgres workload", a)}
	}
	for _, src := range w.Pods {
		for _, t := range Targets(pg) {
			if w.Net.ingressAllows(src, pg, t.Port, t.Proto) && (src.Namespace != a || src.Labels[NameLabel] != "cell") {
				v = append(v, fmt.Sprintf("%s admits %s on %s: only its own cell may reach it", pg, src, t))
			}
		}
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
