package check

import (
	"fmt"
	"strings"

	cnpgv1 "github.com/cloudnative-pg/cloudnative-pg/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The well-known node labels the scheduler spreads over.
const (
	ZoneKey = "topology.kubernetes.io/zone"
	HostKey = "kubernetes.io/hostname"
)

// NATSZones is the number of zones NATS's spread requires (minDomains):
// one per server, so that no zone holds two of the three. 0 takes
// minDomains out of the check, for a two-zone cluster that patches it out
// of the StatefulSet and runs the servers 2 + 1 (README.md, "Zones").
const NATSZones = 3

// CheckZones checks that losing one zone (or one node) loses no part of
// the platform, as README.md ("Zones") decides it:
//
//   - each GTR Deployment (both access points) spreads its own pods over
//     zones, maxSkew 1, ScheduleAnyway (stateless, and the other access
//     point covers it: a replacement must start even when the spread
//     cannot be kept), never DoNotSchedule; and over nodes;
//   - each cell's Deployment spreads its own pods over zones, maxSkew 1,
//     DoNotSchedule (a cell has no second access point: a zone must not
//     hold all of it), counting only the nodes its pods may go to
//     (nodeTaintsPolicy Honor), so that a lost zone's nodes, tainted
//     unreachable, do not hold its replacement Pending; and over nodes;
//   - the NATS StatefulSet spreads its servers over zones with maxSkew 1,
//     DoNotSchedule and minDomains NATSZones, so that each of three zones
//     holds one server and a lost zone leaves two, the JetStream quorum,
//     and a zone that has no node at the time is not skipped; and over
//     nodes;
//   - each cell's CloudNativePG Cluster keeps its instances in different
//     zones, required (CNPG's pod anti-affinity over the zone label), so
//     that a primary and its synchronous standby never share one.
//
// A constraint counts only if its labelSelector selects the workload's own
// pods and no other pod of its namespace.
func CheckZones(w *World) []string {
	var v []string
	for _, o := range w.Find("Deployment", GTRNamespace) {
		if tmpl, _ := podTemplate(o); tmpl.Labels[NameLabel] != "gtr" {
			continue
		}
		v = append(v, spread(w, o, spreadWant{key: ZoneKey, when: corev1.ScheduleAnyway},
			"a lost zone may take every replica of this access point")...)
		v = append(v, spread(w, o, spreadWant{key: HostKey}, "a lost node may take several replicas")...)
	}
	for _, ns := range w.Cells {
		for _, o := range w.Find("Deployment", ns) {
			if tmpl, _ := podTemplate(o); tmpl.Labels[NameLabel] != "cell" {
				continue
			}
			v = append(v, spread(w, o, spreadWant{key: ZoneKey, when: corev1.DoNotSchedule, taints: corev1.NodeInclusionPolicyHonor},
				"a lost zone may take every instance of the cell")...)
			v = append(v, spread(w, o, spreadWant{key: HostKey}, "a lost node may take several instances")...)
		}
	}
	if nats, ok := w.get("StatefulSet", NATSNamespace, "nats"); ok {
		v = append(v, spread(w, nats, spreadWant{key: ZoneKey, when: corev1.DoNotSchedule, minDomains: NATSZones},
			"a lost zone may take two of the three servers, and the JetStream quorum with them")...)
		v = append(v, spread(w, nats, spreadWant{key: HostKey}, "a lost node may take several servers")...)
	}
	for _, ns := range w.Cells {
		for _, o := range w.Find("Cluster", ns) {
			v = append(v, instanceZones(o)...)
		}
	}
	return v
}

// spreadWant is the topology spread constraint a workload must have: over
// key, maxSkew 1, and, where set, this whenUnsatisfiable, minDomains and
// nodeTaintsPolicy. When ScheduleAnyway is wanted, no constraint over key
// may be DoNotSchedule: the scheduler holds a pod to all of them, so one
// such constraint makes the spread required.
type spreadWant struct {
	key        string
	when       corev1.UnsatisfiableConstraintAction
	minDomains int32
	taints     corev1.NodeInclusionPolicy
}

// spread holds workload o to a topology spread constraint as want has it
// that selects its own pods and no other of its namespace.
func spread(w *World, o Object, want spreadWant, why string) []string {
	tmpl, _ := podTemplate(o)
	var first, v []string
	found, required := false, false
	for _, c := range tmpl.Spec.TopologySpreadConstraints {
		if c.TopologyKey != want.key {
			continue
		}
		if want.when == corev1.ScheduleAnyway && unsatisfiable(c.WhenUnsatisfiable) != corev1.ScheduleAnyway {
			v = append(v, fmt.Sprintf("%s: topology spread over %s: whenUnsatisfiable %s, want only %s: a replacement would wait, Pending, whenever the spread cannot be kept (README.md, \"Zones\")",
				o, want.key, unsatisfiable(c.WhenUnsatisfiable), want.when))
			required = true
			continue
		}
		if found {
			continue
		}
		var wrong []string
		if c.MaxSkew != 1 {
			wrong = append(wrong, fmt.Sprintf("maxSkew %d, want 1", c.MaxSkew))
		}
		if want.when != "" && unsatisfiable(c.WhenUnsatisfiable) != want.when {
			wrong = append(wrong, fmt.Sprintf("whenUnsatisfiable %s, want %s", unsatisfiable(c.WhenUnsatisfiable), want.when))
		}
		if want.minDomains != 0 && (c.MinDomains == nil || *c.MinDomains != want.minDomains) {
			got := "unset"
			if c.MinDomains != nil {
				got = fmt.Sprint(*c.MinDomains)
			}
			wrong = append(wrong, fmt.Sprintf("minDomains %s, want %d", got, want.minDomains))
		}
		if want.taints != "" {
			got := corev1.NodeInclusionPolicyIgnore + " (the default)"
			if c.NodeTaintsPolicy != nil {
				got = *c.NodeTaintsPolicy
			}
			if got != want.taints {
				wrong = append(wrong, fmt.Sprintf("nodeTaintsPolicy %s, want %s", got, want.taints))
			}
		}
		sel := selector(c.LabelSelector)
		if !sel.Matches(labels.Set(tmpl.Labels)) {
			wrong = append(wrong, "its labelSelector does not select the workload's pods")
		}
		for _, p := range w.PodsIn(o.Namespace) {
			if p.Name != o.Name && sel.Matches(labels.Set(p.Labels)) {
				wrong = append(wrong, fmt.Sprintf("its labelSelector also selects %s", p))
			}
		}
		if len(wrong) == 0 {
			found = true
		} else if first == nil {
			first = wrong
		}
	}
	switch {
	case found, required && first == nil:
	case first == nil:
		v = append(v, fmt.Sprintf("%s: no topology spread over %s: %s", o, want.key, why))
	default:
		v = append(v, fmt.Sprintf("%s: topology spread over %s: %s: %s", o, want.key, strings.Join(first, ", "), why))
	}
	return v
}

// unsatisfiable is a constraint's whenUnsatisfiable, its default
// (DoNotSchedule) when unset.
func unsatisfiable(a corev1.UnsatisfiableConstraintAction) corev1.UnsatisfiableConstraintAction {
	if a == "" {
		return corev1.DoNotSchedule
	}
	return a
}

// selector is a constraint's label selector; nil, or one that does not
// parse, selects nothing (as the scheduler counts it).
func selector(ls *metav1.LabelSelector) labels.Selector {
	if ls == nil {
		return labels.Nothing()
	}
	s, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return labels.Nothing()
	}
	return s
}

// instanceZones holds a cell's Cluster to CNPG's pod anti-affinity between
// its instances over the zone label, required.
func instanceZones(o Object) []string {
	a := o.Typed.(*cnpgv1.Cluster).Spec.Affinity
	const why = "a primary and its synchronous standby may share a zone, and a lost zone lose committed transactions"
	var v []string
	if a.EnablePodAntiAffinity != nil && !*a.EnablePodAntiAffinity {
		v = append(v, fmt.Sprintf("%s: affinity.enablePodAntiAffinity is false: %s", o, why))
	}
	if a.TopologyKey != ZoneKey {
		key := a.TopologyKey
		if key == "" {
			key = HostKey + " (the default)"
		}
		v = append(v, fmt.Sprintf("%s: affinity.topologyKey is %s, want %s: %s", o, key, ZoneKey, why))
	}
	if a.PodAntiAffinityType != cnpgv1.PodAntiAffinityTypeRequired {
		t := a.PodAntiAffinityType
		if t == "" {
			t = cnpgv1.PodAntiAffinityTypePreferred + " (the default)"
		}
		v = append(v, fmt.Sprintf("%s: affinity.podAntiAffinityType is %s, want %s: %s", o, t, cnpgv1.PodAntiAffinityTypeRequired, why))
	}
	return v
}
