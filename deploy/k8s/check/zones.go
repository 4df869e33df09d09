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

// CheckZones checks that losing one zone (or one node) loses no part of
// the platform:
//
//   - each GTR Deployment (both access points) spreads its own pods over
//     zones and over nodes, maxSkew 1 (whenUnsatisfiable left to the
//     manifests: the GTR is stateless, and README.md says why it is
//     ScheduleAnyway);
//   - the NATS StatefulSet spreads its servers over zones with maxSkew 1
//     and DoNotSchedule, so that with three zones each holds one server
//     and a lost zone leaves two, the JetStream quorum; and over nodes;
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
		v = append(v, spread(w, o, ZoneKey, false, "a lost zone may take every replica of this access point")...)
		v = append(v, spread(w, o, HostKey, false, "a lost node may take several replicas")...)
	}
	if nats, ok := w.get("StatefulSet", NATSNamespace, "nats"); ok {
		v = append(v, spread(w, nats, ZoneKey, true, "a lost zone may take two of the three servers, and the JetStream quorum with them")...)
		v = append(v, spread(w, nats, HostKey, false, "a lost node may take several servers")...)
	}
	for _, ns := range w.Cells {
		for _, o := range w.Find("Cluster", ns) {
			v = append(v, instanceZones(o)...)
		}
	}
	return v
}

// spread holds workload o to a topology spread constraint over key with
// maxSkew 1 that selects its own pods and no other of its namespace, and
// DoNotSchedule if hard.
func spread(w *World, o Object, key string, hard bool, why string) []string {
	tmpl, _ := podTemplate(o)
	var first []string
	for _, c := range tmpl.Spec.TopologySpreadConstraints {
		if c.TopologyKey != key {
			continue
		}
		var wrong []string
		if c.MaxSkew != 1 {
			wrong = append(wrong, fmt.Sprintf("maxSkew %d, want 1", c.MaxSkew))
		}
		if hard && c.WhenUnsatisfiable != corev1.DoNotSchedule {
			wrong = append(wrong, fmt.Sprintf("whenUnsatisfiable %s, want %s", c.WhenUnsatisfiable, corev1.DoNotSchedule))
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
			return nil
		}
		if first == nil {
			first = wrong
		}
	}
	if first == nil {
		return []string{fmt.Sprintf("%s: no topology spread over %s: %s", o, key, why)}
	}
	return []string{fmt.Sprintf("%s: topology spread over %s: %s: %s", o, key, strings.Join(first, ", "), why)}
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
