package check

import (
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// Names the checks rely on. They are the contract between the manifests and
// the policies: a cell namespace carries RoleLabel=cell, pods are told apart
// by NameLabel.
const (
	RoleLabel    = "cellpay.io/role"
	NameLabel    = "app.kubernetes.io/name"
	GTRNamespace = "cellpay-gtr"
)

// World is every rendered object of every overlay, as one cluster would hold
// them, plus the pods the evaluator reasons about.
type World struct {
	Objects []Object
	Net     Network
	// Pods: one per workload, plus stand-ins that no manifest declares:
	// cluster DNS, an outsider in the default namespace (also standing for
	// partners, who come through the load balancer), pods in the default
	// namespace wearing a cell's, the GTR's and an admin client's labels, an
	// admin client (gtrctl) in the GTR's namespace, and an intruder (an
	// unlabelled debug pod) in every cell namespace.
	Pods []Pod
	// Cells are the cell namespaces, sorted.
	Cells []string
}

// NewWorld builds the evaluator's view of objs.
func NewWorld(objs []Object) *World {
	w := &World{Objects: objs, Net: Network{Namespaces: map[string]map[string]string{
		"kube-system": {}, "default": {},
	}}}
	for _, o := range objs {
		switch t := o.Typed.(type) {
		case *corev1.Namespace:
			w.Net.Namespaces[t.Name] = t.Labels
			if t.Labels[RoleLabel] == "cell" {
				w.Cells = append(w.Cells, t.Name)
			}
		case *networkingv1.NetworkPolicy:
			w.Net.Policies = append(w.Net.Policies, *t)
		}
		if spec, ok := podTemplate(o); ok {
			w.Pods = append(w.Pods, Pod{Namespace: o.Namespace, Name: o.Name, Labels: spec.Labels, Ports: containerPorts(spec.Spec)})
		}
	}
	sort.Strings(w.Cells)
	w.Pods = append(w.Pods,
		Pod{Namespace: "kube-system", Name: "kube-dns", Labels: map[string]string{"k8s-app": "kube-dns"},
			Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP}}},
		Pod{Namespace: "default", Name: "outsider", Labels: map[string]string{}},
		Pod{Namespace: "default", Name: "spoofed-cell", Labels: map[string]string{NameLabel: "cell"}},
		Pod{Namespace: "default", Name: "spoofed-gtr", Labels: map[string]string{NameLabel: "gtr"}},
		Pod{Namespace: "default", Name: "spoofed-admin-client", Labels: map[string]string{AdminClientLabel: "true"}},
		Pod{Namespace: GTRNamespace, Name: "admin-client", Labels: map[string]string{AdminClientLabel: "true"}},
	)
	for _, c := range w.Cells {
		w.Pods = append(w.Pods, Pod{Namespace: c, Name: "intruder", Labels: map[string]string{NameLabel: "debug"}})
	}
	return w
}

// podTemplate returns the pod template of a workload object.
func podTemplate(o Object) (*corev1.PodTemplateSpec, bool) {
	switch t := o.Typed.(type) {
	case *appsv1.Deployment:
		return &t.Spec.Template, true
	case *appsv1.StatefulSet:
		return &t.Spec.Template, true
	case *appsv1.DaemonSet:
		return &t.Spec.Template, true
	}
	return nil, false
}

func containerPorts(spec corev1.PodSpec) []corev1.ContainerPort {
	var out []corev1.ContainerPort
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			if p.Protocol == "" {
				p.Protocol = corev1.ProtocolTCP
			}
			out = append(out, p)
		}
	}
	return out
}

// commonPorts are tried against every pod besides its declared ports, so
// that a policy opening a port nobody declared is still seen.
var commonPorts = []Target{
	{53, corev1.ProtocolUDP}, {53, corev1.ProtocolTCP}, {22, corev1.ProtocolTCP}, {80, corev1.ProtocolTCP},
	{443, corev1.ProtocolTCP}, {4222, corev1.ProtocolTCP}, {5432, corev1.ProtocolTCP}, {6222, corev1.ProtocolTCP},
	{7070, corev1.ProtocolTCP}, {7071, corev1.ProtocolTCP}, {7081, corev1.ProtocolTCP}, {7090, corev1.ProtocolTCP},
	{8080, corev1.ProtocolTCP}, {8222, corev1.ProtocolTCP}, {9090, corev1.ProtocolTCP}, {65535, corev1.ProtocolTCP},
}

// Targets are the ports the checks try on p: its own and commonPorts.
func Targets(p Pod) []Target {
	seen := map[Target]bool{}
	var out []Target
	add := func(t Target) {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	for _, cp := range p.Ports {
		add(Target{cp.ContainerPort, cp.Protocol})
	}
	for _, t := range commonPorts {
		add(t)
	}
	return out
}

// PodsIn returns the pods of namespace ns.
func (w *World) PodsIn(ns string) []Pod {
	var out []Pod
	for _, p := range w.Pods {
		if p.Namespace == ns {
			out = append(out, p)
		}
	}
	return out
}

// Find returns the objects of one kind in a namespace ("" for any).
func (w *World) Find(kind, ns string) []Object {
	var out []Object
	for _, o := range w.Objects {
		if o.GVK.Kind == kind && (ns == "" || o.Namespace == ns) {
			out = append(out, o)
		}
	}
	return out
}

// isCell says whether ns is a cell namespace.
func (w *World) isCell(ns string) bool {
	i := sort.SearchStrings(w.Cells, ns)
	return i < len(w.Cells) && w.Cells[i] == ns
}
