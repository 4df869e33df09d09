package check

import (
	"sort"

	cnpgv1 "github.com/cloudnative-pg/cloudnative-pg/api/v1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
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
	// CNPGClusterLabel is the label CloudNativePG puts on every pod of a
	// Cluster (instances and their jobs), with the Cluster's name.
	CNPGClusterLabel = "cnpg.io/cluster"
	// CNPGNamespace and CNPGOperatorName are where the CloudNativePG
	// operator runs and its pods' NameLabel, as its own manifests
	// install it.
	CNPGNamespace    = "cnpg-system"
	CNPGOperatorName = "cloudnative-pg"
	// PrometheusNameLabel is the label the Prometheus Operator puts on the
	// pods of a Prometheus, with its name; CellPrometheus is the name of
	// each cell's own, GlobalPrometheus the platform's (in
	// MonitoringNamespace).
	PrometheusNameLabel = "operator.prometheus.io/name"
	CellPrometheus      = "cell"
	GlobalPrometheus    = "global"
	// CertManagerNamespace is where cert-manager runs (installed
	// beforehand, not ours), CertManagerName its pods' NameLabel and
	// ComponentLabel tells its controller from its webhook and
	// cainjector, as its own chart labels them.
	CertManagerNamespace = "cert-manager"
	CertManagerName      = "cert-manager"
	ComponentLabel       = "app.kubernetes.io/component"
)

// World is every rendered object of every overlay, as one cluster would hold
// them, plus the pods the evaluator reasons about.
type World struct {
	Objects []Object
	Net     Network
	// Pods: one per workload, one per CloudNativePG Cluster (its
	// instances, as the operator labels them) and one per Prometheus (its
	// pods, as the Prometheus Operator labels them), plus stand-ins that no
	// manifest declares: cluster DNS, the CNPG operator, an outsider in the
	// default namespace (also standing for partners, who come through the
	// load balancer), pods in the default namespace wearing a cell's, the
	// GTR's, an admin client's, a Postgres instance's and the CNPG
	// operator's labels, a cell's and the global Prometheus's labels, an
	// admin client (gtrctl) in the GTR's namespace, cert-manager's
	// controller, webhook and cainjector (all serving metrics on
	// http-metrics, 9402), a pod in the default namespace wearing
	// cert-manager's controller's labels, and an intruder (an unlabelled
	// debug pod) in every cell namespace.
	Pods []Pod
	// Cells are the cell namespaces, sorted.
	Cells []string
}

// NewWorld builds the evaluator's view of objs.
func NewWorld(objs []Object) *World {
	w := &World{Objects: objs, Net: Network{Namespaces: map[string]map[string]string{
		"kube-system": {}, "default": {}, CNPGNamespace: {}, CertManagerNamespace: {},
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
		case *cnpgv1.Cluster:
			w.Pods = append(w.Pods, instancePod(t))
		case *monitoringv1.Prometheus:
			w.Pods = append(w.Pods, prometheusPod(t))
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
		Pod{Namespace: CNPGNamespace, Name: "cnpg-operator", Labels: map[string]string{NameLabel: CNPGOperatorName}},
		Pod{Namespace: "default", Name: "spoofed-postgres", Labels: map[string]string{CNPGClusterLabel: "postgres"}},
		Pod{Namespace: "default", Name: "spoofed-cnpg-operator", Labels: map[string]string{NameLabel: CNPGOperatorName}},
		Pod{Namespace: "default", Name: "spoofed-cell-prometheus", Labels: prometheusLabels(CellPrometheus)},
		Pod{Namespace: "default", Name: "spoofed-global-prometheus", Labels: prometheusLabels(GlobalPrometheus)},
		certManagerPod(CertManagerNamespace, "cert-manager", CertManagerName, "controller",
			corev1.ContainerPort{Name: "http-healthz", ContainerPort: 9403, Protocol: corev1.ProtocolTCP}),
		certManagerPod(CertManagerNamespace, "cert-manager-webhook", "webhook", "webhook",
			corev1.ContainerPort{Name: "https", ContainerPort: 10250, Protocol: corev1.ProtocolTCP},
			corev1.ContainerPort{Name: "healthcheck", ContainerPort: 6080, Protocol: corev1.ProtocolTCP}),
		certManagerPod(CertManagerNamespace, "cert-manager-cainjector", "cainjector", "cainjector"),
		certManagerPod("default", "spoofed-cert-manager", CertManagerName, "controller"),
	)
	for _, c := range w.Cells {
		w.Pods = append(w.Pods, Pod{Namespace: c, Name: "intruder", Labels: map[string]string{NameLabel: "debug"}})
	}
	return w
}

// instancePod is the pods of a CloudNativePG Cluster as the operator makes
// them: its Cluster's name as a label, the labels the Cluster asks its
// pods to inherit, and the instance manager's ports (Postgres, status,
// metrics).
func instancePod(c *cnpgv1.Cluster) Pod {
	l := map[string]string{}
	if c.Spec.InheritedMetadata != nil {
		for k, v := range c.Spec.InheritedMetadata.Labels {
			l[k] = v
		}
	}
	l[CNPGClusterLabel] = c.Name
	l["cnpg.io/podRole"] = "instance"
	return Pod{Namespace: c.Namespace, Name: c.Name, Labels: l, Ports: []corev1.ContainerPort{
		{Name: "postgresql", ContainerPort: 5432, Protocol: corev1.ProtocolTCP},
		{Name: "status", ContainerPort: 8000, Protocol: corev1.ProtocolTCP},
		{Name: "metrics", ContainerPort: 9187, Protocol: corev1.ProtocolTCP},
	}}
}

// certManagerPod is a pod of cert-manager as its chart makes them: its
// name and component as labels, the release's instance, and the metrics
// port every one of them serves (http-metrics, 9402) besides ports.
func certManagerPod(ns, pod, name, component string, ports ...corev1.ContainerPort) Pod {
	return Pod{Namespace: ns, Name: pod, Labels: map[string]string{
		"app": name, NameLabel: name, "app.kubernetes.io/instance": "cert-manager", ComponentLabel: component,
	}, Ports: append([]corev1.ContainerPort{{Name: "http-metrics", ContainerPort: CertManagerMetricsPort, Protocol: corev1.ProtocolTCP}}, ports...)}
}

// prometheusLabels are the labels the Prometheus Operator puts on the pods
// of Prometheus name (its StatefulSet's selector labels).
func prometheusLabels(name string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/managed-by": "prometheus-operator",
		NameLabel:                      "prometheus",
		"app.kubernetes.io/instance":   name,
		PrometheusNameLabel:            name,
		"prometheus":                   name,
		"operator.prometheus.io/shard": "0",
	}
}

// prometheusPod is the pods of a Prometheus as the operator makes them:
// spec.podMetadata's labels, then its own (which win), and the ports of
// Prometheus (web) and its config reloader.
func prometheusPod(p *monitoringv1.Prometheus) Pod {
	l := map[string]string{}
	if p.Spec.PodMetadata != nil {
		for k, v := range p.Spec.PodMetadata.Labels {
			l[k] = v
		}
	}
	for k, v := range prometheusLabels(p.Name) {
		l[k] = v
	}
	return Pod{Namespace: p.Namespace, Name: "prometheus-" + p.Name, Labels: l, Ports: []corev1.ContainerPort{
		{Name: "web", ContainerPort: 9090, Protocol: corev1.ProtocolTCP},
		{Name: "reloader-web", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
	}}
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
	{6443, corev1.ProtocolTCP}, {7060, corev1.ProtocolTCP}, {7070, corev1.ProtocolTCP}, {7071, corev1.ProtocolTCP},
	{7081, corev1.ProtocolTCP}, {7082, corev1.ProtocolTCP}, {7090, corev1.ProtocolTCP}, {7091, corev1.ProtocolTCP},
	{8000, corev1.ProtocolTCP}, {8080, corev1.ProtocolTCP}, {8222, corev1.ProtocolTCP}, {9070, corev1.ProtocolTCP},
	{9081, corev1.ProtocolTCP}, {9090, corev1.ProtocolTCP}, {9187, corev1.ProtocolTCP}, {9402, corev1.ProtocolTCP},
	{65535, corev1.ProtocolTCP},
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
